package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

// baseVMI is the smallest VMI KubeVirt accepts: one containerDisk, 1 core, 1Gi.
func baseVMI() *kubevirtv1.VirtualMachineInstance {
	return &kubevirtv1.VirtualMachineInstance{
		TypeMeta:   metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{Name: "vmi", Namespace: "default"},
		Spec: kubevirtv1.VirtualMachineInstanceSpec{
			Domain: kubevirtv1.DomainSpec{
				CPU: &kubevirtv1.CPU{Cores: 1},
				Resources: kubevirtv1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				},
				Devices: kubevirtv1.Devices{
					Disks: []kubevirtv1.Disk{{
						Name:       "rootdisk",
						DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}},
					}},
				},
			},
			Volumes: []kubevirtv1.Volume{{
				Name: "rootdisk",
				VolumeSource: kubevirtv1.VolumeSource{
					ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "quay.io/containerdisks/fedora:41"},
				},
			}},
		},
	}
}

// realtimeVMI is a low-latency VMI: dedicated pinned CPUs, isolated emulator
// thread, realtime vCPUs, NUMA passthrough and 2Mi hugepages. KubeVirt needs
// CPU request == limit == vCPU count and memory request == limit here.
func realtimeVMI() *kubevirtv1.VirtualMachineInstance {
	vmi := baseVMI()
	vmi.Spec.Domain.CPU = &kubevirtv1.CPU{
		Cores:                 2,
		DedicatedCPUPlacement: true,
		IsolateEmulatorThread: true,
		Realtime:              &kubevirtv1.Realtime{},
		NUMA:                  &kubevirtv1.NUMA{GuestMappingPassthrough: &kubevirtv1.NUMAGuestMappingPassthrough{}},
	}
	vmi.Spec.Domain.Memory = &kubevirtv1.Memory{Hugepages: &kubevirtv1.Hugepages{PageSize: "2Mi"}}
	vmi.Spec.Domain.Resources = kubevirtv1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	return vmi
}

// realtimeGates are the feature gates a real cluster lists for realtimeVMI.
// Admission itself needs none of them in v1.8.4 (NUMA is GA; dedicated CPUs,
// realtime and hugepages are not gated), but without CPUManager virt-handler
// never labels nodes cpumanager=true, so a dedicatedCpuPlacement VMI stays
// unschedulable. Listing it must not change admission.
var realtimeGates = []string{"CPUManager"}

func TestValidate(t *testing.T) {
	tests := []struct {
		name      string
		vmi       func() *kubevirtv1.VirtualMachineInstance
		gates     []string
		wantValid bool
	}{
		{name: "minimal containerDisk VMI", vmi: baseVMI, wantValid: true},
		{name: "realtime NUMA hugepages VMI", vmi: realtimeVMI, gates: realtimeGates, wantValid: true},
		{name: "realtime VMI, no gates listed (all admission checks are ungated)", vmi: realtimeVMI, wantValid: true},
		{name: "realtime VMI with GA and alpha gates listed", vmi: realtimeVMI, gates: []string{"CPUManager", "NUMA", "AlignCPUs"}, wantValid: true},

		{name: "realtime without dedicatedCpuPlacement", vmi: func() *kubevirtv1.VirtualMachineInstance {
			vmi := realtimeVMI()
			vmi.Spec.Domain.CPU.DedicatedCPUPlacement = false
			vmi.Spec.Domain.CPU.IsolateEmulatorThread = false
			return vmi
		}, gates: realtimeGates},
		{name: "realtime without NUMA guestMappingPassthrough", vmi: func() *kubevirtv1.VirtualMachineInstance {
			vmi := realtimeVMI()
			vmi.Spec.Domain.CPU.NUMA = nil
			return vmi
		}, gates: realtimeGates},
		{name: "guestMappingPassthrough without hugepages", vmi: func() *kubevirtv1.VirtualMachineInstance {
			vmi := realtimeVMI()
			vmi.Spec.Domain.Memory = nil
			return vmi
		}, gates: realtimeGates},
		{name: "isolateEmulatorThread without dedicatedCpuPlacement", vmi: func() *kubevirtv1.VirtualMachineInstance {
			vmi := baseVMI()
			vmi.Spec.Domain.CPU.IsolateEmulatorThread = true
			return vmi
		}},
		{name: "dedicatedCpuPlacement with CPU request != limit", vmi: func() *kubevirtv1.VirtualMachineInstance {
			vmi := realtimeVMI()
			vmi.Spec.Domain.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
			return vmi
		}, gates: realtimeGates},
		{name: "memory not a multiple of the hugepage size", vmi: func() *kubevirtv1.VirtualMachineInstance {
			vmi := realtimeVMI()
			vmi.Spec.Domain.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1025Mi")
			vmi.Spec.Domain.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1025Mi")
			return vmi
		}, gates: realtimeGates},
		{name: "disk without a volume", vmi: func() *kubevirtv1.VirtualMachineInstance {
			vmi := baseVMI()
			vmi.Spec.Volumes = nil
			return vmi
		}},
		// Proves featureGates reach the cluster config: downwardMetrics is
		// rejected unless the alpha DownwardMetrics gate is enabled.
		{name: "downwardMetrics device without its gate", vmi: withDownwardMetrics},
		{name: "downwardMetrics device with its gate", vmi: withDownwardMetrics, gates: []string{"DownwardMetrics"}, wantValid: true},
	}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vmi := tc.vmi()
			before := vmi.DeepCopy()
			causes := Validate(vmi, tc.gates)
			if tc.wantValid && len(causes) != 0 {
				t.Errorf("expected VMI to be admitted, got causes:\n%s", format(causes))
			}
			if !tc.wantValid && len(causes) == 0 {
				t.Errorf("expected VMI to be rejected, it was admitted")
			}
			if !tc.wantValid {
				t.Logf("causes:\n%s", format(causes))
			}
			if !equality.Semantic.DeepEqual(vmi, before) {
				t.Errorf("Validate mutated its input")
			}
		})
	}
}

func withDownwardMetrics() *kubevirtv1.VirtualMachineInstance {
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.DownwardMetrics = &kubevirtv1.DownwardMetrics{}
	return vmi
}

func format(causes []metav1.StatusCause) string {
	s := ""
	for _, c := range causes {
		s += "  " + c.Field + ": " + c.Message + "\n"
	}
	return s
}
