package placement

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Equal says whether n and o are the same node holding the same: what a planner built on
// one still holds for the other. Written out, not reflected: the operator compares every
// node at each batch of decisions.
func (n *Node) Equal(o *Node) bool {
	return n.Name == o.Name && n.Unschedulable == o.Unschedulable && n.NotReady == o.NotReady &&
		n.CPUMilli == o.CPUMilli && n.MemoryBytes == o.MemoryBytes && n.HugepagesBytes == o.HugepagesBytes &&
		n.CapacityCPUs == o.CapacityCPUs && n.Held == o.Held && n.Params == o.Params && n.Correction == o.Correction &&
		maps.Equal(n.Labels, o.Labels) && slices.EqualFunc(n.Taints, o.Taints, taintEqual)
}

// NodesEqual says whether a and b are the same nodes, in the same order (Node.Equal).
func NodesEqual(a, b []Node) bool {
	return slices.EqualFunc(a, b, func(x, y Node) bool { return x.Equal(&y) })
}

func taintEqual(a, b corev1.Taint) bool {
	return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect && a.TimeAdded.Equal(b.TimeAdded)
}
