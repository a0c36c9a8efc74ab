package admission

import (
	"os"
	"testing"

	"kubevirt.io/api/migrations/v1alpha1"
	"sigs.k8s.io/yaml"
)

// The MigrationPolicy isochron ships selects every VMI it renders (KubeVirt matches each
// key=value of the selector against the VMI's labels: migrationpolicy.go
// countMatchingLabels) and turns off what costs a real-time guest its timing.
func TestMigrationPolicySelectsIsochronsVMIs(t *testing.T) {
	b, err := os.ReadFile("../../../config/kubevirt/migrationpolicy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := &v1alpha1.MigrationPolicy{}
	if err := yaml.UnmarshalStrict(b, p); err != nil {
		t.Fatal(err)
	}
	for name, v := range variants() {
		_, vm := v.render(t)
		labels := vm.Spec.Template.ObjectMeta.Labels
		if p.Spec.Selectors == nil || len(p.Spec.Selectors.VirtualMachineInstanceSelector) == 0 {
			t.Fatal("the policy selects no VMI labels: it would match every VMI of the cluster")
		}
		for k, want := range p.Spec.Selectors.VirtualMachineInstanceSelector {
			if labels[k] != want {
				t.Errorf("%s: the VMI's label %s is %q, the policy selects %q", name, k, labels[k], want)
			}
		}
	}
	for field, v := range map[string]*bool{"allowAutoConverge": p.Spec.AllowAutoConverge, "allowPostCopy": p.Spec.AllowPostCopy, "allowWorkloadDisruption": p.Spec.AllowWorkloadDisruption} {
		if v == nil || *v {
			t.Errorf("spec.%s = %v, want false, set explicitly", field, v)
		}
	}
}

// KubeVirt v1.8 migrates with eight multifd threads unless the VMI sets a CPU limit
// (virt-handler migration-source.go configureParallelMigrationThreads): the threads would
// compete with a dedicated crawler's vCPUs and emulator thread. Every dedicated VMI
// isochron renders has one (it is Guaranteed).
func TestDedicatedVMIsMigrateWithoutMultifd(t *testing.T) {
	for name, v := range variants() {
		_, vm := v.render(t)
		spec := vm.Spec.Template.Spec
		if !spec.Domain.CPU.DedicatedCPUPlacement {
			continue
		}
		if l, ok := spec.Domain.Resources.Limits["cpu"]; !ok || l.IsZero() {
			t.Errorf("%s: dedicated VMI without a CPU limit: KubeVirt v1.8 would migrate it with multifd", name)
		}
	}
}
