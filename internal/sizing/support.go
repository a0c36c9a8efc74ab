package sizing

// A virt-launcher pod holds more than its compute container: KubeVirt adds a container
// per containerDisk volume (it serves the disk's image to the guest) and, unless the
// cluster turns it off, the guest-console-log sidecar. kube-scheduler counts their
// requests with the compute container's, so placement counts them too (Result's
// SupportCPUMilli and SupportMemoryBytes); test/kubevirt checks the figures against
// the launcher pod KubeVirt's own code renders.

// Resources are a container's CPU (millicores) and memory (bytes).
type Resources struct{ CPUMilli, MemoryBytes int64 }

// ContainerResources are a support container's requests and limits.
type ContainerResources struct{ Requests, Limits Resources }

// SupportConfig is what KubeVirt's configuration (its KubeVirt resource's
// spec.configuration) makes of a launcher's support containers: their resources
// (supportContainerResources, types container-disk and guest-console-log, over KubeVirt's
// defaults) and whether launchers have the console log at all
// (virtualMachineOptions.disableSerialConsoleLog turns it off).
type SupportConfig struct {
	ContainerDisk, ConsoleLog ContainerResources
	ConsoleLogDisabled        bool
}

// KubeVirt v1.8's defaults for the support containers (pkg/container-disk
// getMinimalInitContainerDiskResources, pkg/virt-controller/services
// resourcesForSerialConsoleLogContainer).
var (
	DefaultContainerDisk = ContainerResources{Requests: Resources{1, 1_000_000}, Limits: Resources{10, 40_000_000}}
	DefaultConsoleLog    = ContainerResources{Requests: Resources{5, 35_000_000}, Limits: Resources{15, 60_000_000}}
)

// DefaultSupport is KubeVirt's configuration when it sets nothing of its own.
func DefaultSupport() SupportConfig {
	return SupportConfig{ContainerDisk: DefaultContainerDisk, ConsoleLog: DefaultConsoleLog}
}

// Requests is what the support containers of a launcher with containerDisks containerDisk
// volumes request: KubeVirt requests their limits for a VMI with dedicated CPUs (the pod
// is Guaranteed), their requests otherwise. Init containers of the same size run one at
// a time before them and add nothing to the pod's request.
func (c SupportConfig) Requests(dedicated bool, containerDisks int) Resources {
	of := func(r ContainerResources) Resources {
		if dedicated {
			return r.Limits
		}
		return r.Requests
	}
	disk := of(c.ContainerDisk)
	out := Resources{CPUMilli: int64(containerDisks) * disk.CPUMilli, MemoryBytes: int64(containerDisks) * disk.MemoryBytes}
	if !c.ConsoleLogDisabled {
		log := of(c.ConsoleLog)
		out.CPUMilli += log.CPUMilli
		out.MemoryBytes += log.MemoryBytes
	}
	return out
}
