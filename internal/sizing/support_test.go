package sizing

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"isochron.io/isochron/internal/model"
)

func TestSupportRequests(t *testing.T) {
	nodeVMs := DefaultSupport() // e2e/local/kubevirt-nodes: 300m for container disks, no console log
	nodeVMs.ContainerDisk.Limits.CPUMilli, nodeVMs.ConsoleLogDisabled = 300, true
	for name, tc := range map[string]struct {
		cfg       SupportConfig
		dedicated bool
		disks     int
		want      Resources
	}{
		"KubeVirt's defaults, shared: the requests":  {DefaultSupport(), false, 2, Resources{2*1 + 5, 2*1_000_000 + 35_000_000}},
		"KubeVirt's defaults, dedicated: the limits": {DefaultSupport(), true, 2, Resources{2*10 + 15, 2*40_000_000 + 60_000_000}},
		"one container disk":                         {DefaultSupport(), true, 1, Resources{10 + 15, 40_000_000 + 60_000_000}},
		"the node VMs' configuration, dedicated":     {nodeVMs, true, 2, Resources{600, 80_000_000}},
		"the node VMs' configuration, shared":        {nodeVMs, false, 2, Resources{2, 2_000_000}},
		"no container disk and no console log":       {SupportConfig{ConsoleLogDisabled: true, ContainerDisk: DefaultContainerDisk}, true, 0, Resources{}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.cfg.Requests(tc.dedicated, tc.disks)); diff != "" {
				t.Errorf("Requests (-want +got):\n%s", diff)
			}
		})
	}
}

// Size carries the demand's support containers into the result, which counts them in
// the pod's CPU and memory.
func TestSizeCountsSupportContainers(t *testing.T) {
	for _, dedicated := range []bool{true, false} {
		d := demand(100, dedicated, "1Gi")
		bare, err := Size(d, model.DefaultParams())
		if err != nil {
			t.Fatal(err)
		}
		d.Support = Resources{CPUMilli: 35, MemoryBytes: 140_000_000}
		s, err := Size(d, model.DefaultParams())
		if err != nil {
			t.Fatal(err)
		}
		if s.SupportCPUMilli != 35 || s.SupportMemoryBytes != 140_000_000 ||
			s.PodCPUMilli() != bare.PodCPUMilli()+35 || s.PodMemoryBytes() != bare.PodMemoryBytes()+140_000_000 {
			t.Errorf("dedicated %v: %+v (pod CPU %dm, memory %d); without support %dm, %d", dedicated, s, s.PodCPUMilli(), s.PodMemoryBytes(), bare.PodCPUMilli(), bare.PodMemoryBytes())
		}
	}
}
