package inventory

import (
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/sizing"
)

// Support is what KubeVirt's configuration makes of a launcher's support containers
// (sizing.SupportConfig): kv's spec.configuration.supportContainerResources over
// KubeVirt's defaults, as its ClusterConfig reads them (the first entry of a type, a zero
// or absent quantity keeps the default), and virtualMachineOptions.disableSerialConsoleLog.
// A nil kv (no KubeVirt resource) is KubeVirt's defaults.
func Support(kv *kubevirtv1.KubeVirt) sizing.SupportConfig {
	c := sizing.DefaultSupport()
	if kv == nil {
		return c
	}
	cfg := kv.Spec.Configuration
	c.ContainerDisk = supportOf(cfg.SupportContainerResources, kubevirtv1.ContainerDisk, c.ContainerDisk)
	c.ConsoleLog = supportOf(cfg.SupportContainerResources, kubevirtv1.GuestConsoleLog, c.ConsoleLog)
	c.ConsoleLogDisabled = cfg.VirtualMachineOptions != nil && cfg.VirtualMachineOptions.DisableSerialConsoleLog != nil
	return c
}

// ClusterKubeVirt is the KubeVirt resource that configures the cluster among kvs (a
// List's items): virt-operator deploys only one, so with more than one the first whose
// phase is Deployed, else the first; nil for none.
func ClusterKubeVirt(kvs []kubevirtv1.KubeVirt) *kubevirtv1.KubeVirt {
	var kv *kubevirtv1.KubeVirt
	for i := range kvs {
		if kv == nil || (kvs[i].Status.Phase == kubevirtv1.KubeVirtPhaseDeployed && kv.Status.Phase != kubevirtv1.KubeVirtPhaseDeployed) {
			kv = &kvs[i]
		}
	}
	return kv
}

// CountedOtherwise reports whether the reservation c holds (Resident) counts its pod
// otherwise than req does: VFIO memory its RT network no longer needs, or the reverse
// (its network became SR-IOV, or appeared as one after the crawler was placed), or
// support containers KubeVirt's configuration now sizes otherwise, or the reservation
// predates either count. The operator then decides the crawler again, on its node if
// that still fits it.
func CountedOtherwise(c *isov1.CrawlerVM, req placement.Request) bool {
	held, _ := Resident(c) // none held: nothing counted
	s := held.Sizing
	return (s.VFIOBytes > 0) != req.Demand.VFIO ||
		s.SupportCPUMilli != req.Demand.Support.CPUMilli || s.SupportMemoryBytes != req.Demand.Support.MemoryBytes
}

// supportOf is def with what entries of type typ set: KubeVirt takes, per resource, the
// first entry of the type with a non-zero quantity.
func supportOf(entries []kubevirtv1.SupportContainerResources, typ kubevirtv1.SupportContainerType, def sizing.ContainerResources) sizing.ContainerResources {
	first := func(list func(kubevirtv1.ResourceRequirementsWithoutClaims) corev1.ResourceList, name corev1.ResourceName, milli bool, def int64) int64 {
		for _, e := range entries {
			if e.Type != typ {
				continue
			}
			if q, ok := list(e.Resources)[name]; ok && !q.IsZero() {
				if milli {
					return q.MilliValue()
				}
				return q.Value()
			}
		}
		return def
	}
	requests := func(r kubevirtv1.ResourceRequirementsWithoutClaims) corev1.ResourceList { return r.Requests }
	limits := func(r kubevirtv1.ResourceRequirementsWithoutClaims) corev1.ResourceList { return r.Limits }
	return sizing.ContainerResources{
		Requests: sizing.Resources{
			CPUMilli:    first(requests, corev1.ResourceCPU, true, def.Requests.CPUMilli),
			MemoryBytes: first(requests, corev1.ResourceMemory, false, def.Requests.MemoryBytes),
		},
		Limits: sizing.Resources{
			CPUMilli:    first(limits, corev1.ResourceCPU, true, def.Limits.CPUMilli),
			MemoryBytes: first(limits, corev1.ResourceMemory, false, def.Limits.MemoryBytes),
		},
	}
}
