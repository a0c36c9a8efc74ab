package placement

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/sizing"
)

const gi = int64(1) << 30

func rtNode(name string, cpus int64) Node {
	return Node{
		Name:           name,
		Labels:         map[string]string{CPUManagerLabel: "true", "kubernetes.io/hostname": name},
		CPUMilli:       cpus * 1000,
		MemoryBytes:    64 * gi,
		HugepagesBytes: 16 * gi,
	}
}

func dedicated(vcpus int32, memGi int64) sizing.Result {
	return sizing.Result{VCPUs: vcpus, HostCPUs: vcpus + 1, CPURequestMilli: int64(vcpus) * 1000,
		MemoryBytes: memGi * gi, HugepagesBytes: memGi * gi}
}

func shared(milli int64) sizing.Result {
	return sizing.Result{VCPUs: 1, CPURequestMilli: milli, MemoryBytes: gi}
}

func TestPlace(t *testing.T) {
	cases := map[string]struct {
		req       Request
		nodes     []Node
		residents []Resident
		want      Decision
	}{
		"pack takes the fullest node that fits": {
			req:       Request{Key: "bms/new", Sizing: dedicated(2, 1), Policy: isov1.PlacementPolicyPack},
			nodes:     []Node{rtNode("a", 16), rtNode("b", 16)},
			residents: []Resident{{Key: "bms/old", Node: "b", Sizing: dedicated(4, 1)}},
			want:      Decision{Node: "b", FreeCPUMilli: 8000},
		},
		"spread takes the emptiest node": {
			req:       Request{Key: "bms/new", Sizing: dedicated(2, 1), Policy: isov1.PlacementPolicySpread},
			nodes:     []Node{rtNode("a", 16), rtNode("b", 16)},
			residents: []Resident{{Key: "bms/old", Node: "b", Sizing: dedicated(4, 1)}},
			want:      Decision{Node: "a", FreeCPUMilli: 13000},
		},
		"ties break by node name": {
			req:   Request{Key: "bms/new", Sizing: dedicated(1, 1)},
			nodes: []Node{rtNode("c", 8), rtNode("a", 8), rtNode("b", 8)},
			want:  Decision{Node: "a", FreeCPUMilli: 6000},
		},
		"a crawler stays on its node while it fits": {
			req:   Request{Key: "bms/new", Sizing: dedicated(1, 1), Current: "b"},
			nodes: []Node{rtNode("a", 8), rtNode("b", 8)},
			want:  Decision{Node: "b", FreeCPUMilli: 6000},
		},
		"the crawler's own reservation does not count against it": {
			req:       Request{Key: "bms/me", Sizing: dedicated(3, 1), Current: "a"},
			nodes:     []Node{rtNode("a", 4)},
			residents: []Resident{{Key: "bms/me", Node: "a", Sizing: dedicated(3, 1)}},
			want:      Decision{Node: "a", FreeCPUMilli: 0},
		},
		"exclusive CPUs are never oversubscribed": {
			req:       Request{Key: "bms/new", Sizing: dedicated(2, 1)},
			nodes:     []Node{rtNode("a", 8)},
			residents: []Resident{{Key: "bms/old", Node: "a", Sizing: dedicated(5, 1)}},
			want:      Decision{Reason: "0/1 nodes fit: a: needs 3 exclusive CPUs, 2 free"},
		},
		"shared requests leave fewer exclusive CPUs": {
			req:       Request{Key: "bms/new", Sizing: dedicated(2, 1)},
			nodes:     []Node{rtNode("a", 4)},
			residents: []Resident{{Key: "bms/old", Node: "a", Sizing: shared(1500)}},
			want:      Decision{Reason: "0/1 nodes fit: a: needs 3 exclusive CPUs, 2500m free"},
		},
		"dedicated needs the CPU Manager label": {
			req:   Request{Key: "bms/new", Sizing: dedicated(1, 1)},
			nodes: []Node{{Name: "plain", CPUMilli: 8000, MemoryBytes: 8 * gi, HugepagesBytes: 8 * gi}},
			want:  Decision{Reason: "0/1 nodes fit: plain: no static CPU Manager (label kubevirt.io/cpumanager=true) for cpuPlacement dedicated"},
		},
		"shared runs without the CPU Manager label": {
			req:   Request{Key: "bms/new", Sizing: shared(500)},
			nodes: []Node{{Name: "plain", CPUMilli: 8000, MemoryBytes: 8 * gi}},
			want:  Decision{Node: "plain", FreeCPUMilli: 7500},
		},
		"hugepages are checked": {
			req:       Request{Key: "bms/new", Sizing: dedicated(1, 4)},
			nodes:     []Node{rtNode("a", 16)},
			residents: []Resident{{Key: "bms/old", Node: "a", Sizing: dedicated(1, 14)}},
			want:      Decision{Reason: "0/1 nodes fit: a: needs 4096Mi of 2Mi hugepages, 2048Mi free"},
		},
		"node selector and taints and cordons filter, and every reason is named": {
			req: Request{Key: "bms/new", Sizing: dedicated(1, 1),
				NodeSelector: map[string]string{"zone": "x"},
				Tolerations:  []corev1.Toleration{{Key: "rt", Operator: corev1.TolerationOpExists}}},
			nodes: func() []Node {
				a, b, c, d := rtNode("a", 8), rtNode("b", 8), rtNode("c", 8), rtNode("d", 8)
				b.Labels["zone"], c.Labels["zone"], d.Labels["zone"] = "x", "x", "x"
				c.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}
				d.Unschedulable = true
				b.Taints = []corev1.Taint{{Key: "rt", Value: "yes", Effect: corev1.TaintEffectNoSchedule}}
				return []Node{a, b, c, d}
			}(),
			want: Decision{Node: "b", FreeCPUMilli: 6000},
		},
		"nothing fits: reasons grouped by node": {
			req: Request{Key: "bms/new", Sizing: dedicated(1, 1), NodeSelector: map[string]string{"zone": "x"}},
			nodes: func() []Node {
				a, b, c := rtNode("a", 8), rtNode("b", 8), rtNode("c", 8)
				c.Labels["zone"] = "x"
				c.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}
				return []Node{a, b, c}
			}(),
			want: Decision{Reason: "0/3 nodes fit: a, b: spec.placement.nodeSelector does not match; c: taint gpu=:NoSchedule not tolerated by spec.placement.tolerations"},
		},
		"no nodes at all": {
			req:  Request{Key: "bms/new", Sizing: dedicated(1, 1)},
			want: Decision{Reason: "no nodes"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Place(tc.req, tc.nodes, tc.residents)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Place() (-want +got):\n%s", diff)
			}
		})
	}
}

// Placing crawlers one after another, as the operator does, never oversubscribes a node.
func TestPlaceSequentiallyNeverOversubscribes(t *testing.T) {
	nodes := []Node{rtNode("a", 16), rtNode("b", 12), rtNode("c", 8)}
	var residents []Resident
	for i := 0; i < 40; i++ {
		req := Request{Key: fmt.Sprintf("bms/c%d", i), Sizing: dedicated(int32(1+i%4), 1)}
		d := Place(req, nodes, residents)
		if d.Placed() {
			residents = append(residents, Resident{Key: req.Key, Node: d.Node, Sizing: req.Sizing})
		}
	}
	for _, n := range nodes {
		var cpus, pages int64
		for _, r := range residents {
			if r.Node == n.Name {
				cpus += int64(r.Sizing.HostCPUs) * 1000
				pages += r.Sizing.HugepagesBytes
			}
		}
		if cpus > n.CPUMilli || pages > n.HugepagesBytes {
			t.Errorf("node %s oversubscribed: %dm of %dm CPU, %d of %d hugepage bytes", n.Name, cpus, n.CPUMilli, pages, n.HugepagesBytes)
		}
	}
	if len(residents) == 0 {
		t.Fatal("nothing placed")
	}
}
