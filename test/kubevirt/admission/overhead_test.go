package admission

import (
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/kubevirt/pkg/hypervisor/kvm"

	"isochron.io/isochron/internal/sizing"
)

// The memory placement counts for a crawler's virt-launcher pod beyond its guest
// (sizing.LauncherOverheadBytes) is what KubeVirt's own code adds to the pod's request for
// the VMI isochron renders, KubeVirt's 1Gi for VFIO with an SR-IOV RT-NIC included.
func TestLauncherOverheadIsKubeVirts(t *testing.T) {
	for name, tc := range variants() {
		t.Run(name, func(t *testing.T) {
			s, vm := tc.render(t)
			vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: vm.Spec.Template.ObjectMeta, Spec: vm.Spec.Template.Spec}
			kv := kvm.NewKvmHypervisorBackend().GetMemoryOverhead(vmi, Architecture, nil)
			want := kv.Value()
			if got := sizing.LauncherOverheadBytes(s); got != want {
				t.Errorf("LauncherOverheadBytes = %d, KubeVirt's overhead %d (%s)", got, want, kv.String())
			}
		})
	}
}
