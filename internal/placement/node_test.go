package placement

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodesEqual(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC))
	base := func() Node {
		return Node{
			Name: "rt-1", Labels: map[string]string{"pool": "rt"}, CPUMilli: 62000, MemoryBytes: 1 << 36,
			CapacityCPUs: 64, Held: Held{CPUMilli: 500}, Correction: 1.5,
			Taints: []corev1.Taint{{Key: "rt", Effect: corev1.TaintEffectNoSchedule, TimeAdded: &at}},
		}
	}
	later := metav1.NewTime(at.Add(time.Second))
	for _, tc := range []struct {
		name   string
		change func(n *Node)
		equal  bool
	}{
		{"same", func(*Node) {}, true},
		{"taint time copied", func(n *Node) { t := metav1.NewTime(at.Time); n.Taints[0].TimeAdded = &t }, true},
		{"name", func(n *Node) { n.Name = "rt-2" }, false},
		{"cordoned", func(n *Node) { n.Unschedulable = true }, false},
		{"allocatable cpu", func(n *Node) { n.CPUMilli-- }, false},
		{"memory", func(n *Node) { n.MemoryBytes++ }, false},
		{"hugepages", func(n *Node) { n.HugepagesBytes = 2 << 20 }, false},
		{"capacity", func(n *Node) { n.CapacityCPUs = 32 }, false},
		{"held", func(n *Node) { n.Held.ExclusiveMilli = 1000 }, false},
		{"profile", func(n *Node) { n.Params.CPUPerRequest = time.Millisecond }, false},
		{"calibration", func(n *Node) { n.Correction = 2 }, false},
		{"label value", func(n *Node) { n.Labels = map[string]string{"pool": "other"} }, false},
		{"label added", func(n *Node) { n.Labels = map[string]string{"pool": "rt", "zone": "a"} }, false},
		{"taint effect", func(n *Node) { n.Taints[0].Effect = corev1.TaintEffectNoExecute }, false},
		{"taint time", func(n *Node) { n.Taints[0].TimeAdded = &later }, false},
		{"taint removed", func(n *Node) { n.Taints = nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := base(), base()
			tc.change(&b)
			if got := NodesEqual([]Node{a}, []Node{b}); got != tc.equal {
				t.Errorf("NodesEqual = %v, want %v", got, tc.equal)
			}
		})
	}
	if NodesEqual([]Node{base()}, []Node{base(), base()}) {
		t.Error("NodesEqual of one node and two: true")
	}
}
