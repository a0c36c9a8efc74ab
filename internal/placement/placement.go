// Package placement chooses the node for a crawler VM. It is pure: it sees the node
// inventory and the crawlers already placed as plain values and returns a decision.
//
// A node is a candidate when the crawler may run there (cordon, selector, taints, the CPU
// Manager label for dedicated crawlers) and its exclusive CPUs, hugepages and memory stay
// within allocatable, counting the crawlers already placed and the exclusive CPUs other
// Guaranteed pods hold. On a candidate, the contention model (internal/model) predicts
// the interval error of every crawler there with the new one added; the node fits only
// if all of them stay within their budgets. Among the nodes that fit the policy chooses:
// pack takes the node with the fewest CPUs left (fewest nodes in use), spread the one with
// the most; a crawler already on a node that still fits stays there; names break ties, so
// the same input always gives the same node. Candidates are tried in the policy's order
// and the first that fits wins. The planner keeps, per node, its usage and its crawlers'
// model state (model.Load), and per node class the nodes ordered by free CPU, all
// updated when a crawler is added or removed: a decision walks the nodes from the first
// with room, in order, instead of visiting them all; passes over a node where a lower
// bound on the crawler's own error is already over its budget; and predicts every
// crawler on the first other candidate, stopping at the first over budget. A crawler is
// sized once per node class (distinct Params), not per node, and the messages of Reason
// are built only when nothing fits (docs/contention-model.md, "Performance").
package placement

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/sizing"
)

// Node is what placement needs to know of a node.
type Node struct {
	Name   string
	Labels map[string]string
	Taints []corev1.Taint
	// Unschedulable is set for cordoned nodes.
	Unschedulable bool
	// NotReady is set while the node's Ready condition is not True: its kubelet does not
	// report, or reports it unfit (kube-scheduler keeps pods off such a node by the
	// node lifecycle controller's taints).
	NotReady bool
	// CPUMilli, MemoryBytes and HugepagesBytes are the node's allocatable resources
	// (hugepages of 2Mi).
	CPUMilli       int64
	MemoryBytes    int64
	HugepagesBytes int64
	// CapacityCPUs is the node's CPU capacity, host threads included: the model's CPUs.
	CapacityCPUs float64
	// Held is what the node's pods other than crawlers' virt-launchers request.
	Held Held
	// Params is the contention profile of the node's class.
	Params model.Params
	// Correction is the node's calibration from probes (package calibration), which
	// multiplies every prediction there; 0 means 1.
	Correction float64
}

// Held is what pods request of a node, counted as kube-scheduler's NodeResourcesFit
// counts it (every non-terminated pod's requests, init containers and overhead
// included), for the pods isochron does not count through reservations: everything but
// crawlers' virt-launchers, probe pods included.
type Held struct {
	// CPUMilli is their CPU requests; ExclusiveMilli the part of it the static CPU
	// Manager pins (whole CPUs of Guaranteed pods).
	CPUMilli, ExclusiveMilli int64
	// MemoryBytes and HugepagesBytes are their memory and 2Mi hugepages requests.
	MemoryBytes, HugepagesBytes int64
}

// Plus is what h and o hold together.
func (h Held) Plus(o Held) Held {
	return Held{CPUMilli: h.CPUMilli + o.CPUMilli, ExclusiveMilli: h.ExclusiveMilli + o.ExclusiveMilli,
		MemoryBytes: h.MemoryBytes + o.MemoryBytes, HugepagesBytes: h.HugepagesBytes + o.HugepagesBytes}
}

// Minus is what h holds without o.
func (h Held) Minus(o Held) Held {
	return Held{CPUMilli: h.CPUMilli - o.CPUMilli, ExclusiveMilli: h.ExclusiveMilli - o.ExclusiveMilli,
		MemoryBytes: h.MemoryBytes - o.MemoryBytes, HugepagesBytes: h.HugepagesBytes - o.HugepagesBytes}
}

// Resident is a crawler already placed on a node.
type Resident struct {
	// Key is namespace/name.
	Key      string
	Node     string
	Sizing   sizing.Result
	Workload model.Workload
}

// Request is the crawler to place.
type Request struct {
	// Key is namespace/name; a resident with the same key is the crawler itself and is
	// not counted against the nodes.
	Key          string
	Demand       sizing.Demand
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// Spread asks for the freest node (policy spread); the default packs (policy pack).
	Spread bool
	// Current is the node the crawler is on now, "" if none.
	Current string
	// Avoid are nodes the crawler must not go to, each with why: a probe refuted its SLO
	// there, the node is being drained.
	Avoid []Avoid
	// MoveTo, when set, are the labels of the node someone asked the crawler to move to
	// (a migration's addedNodeSelector: kubectl isochron move --to): only such a node
	// fits, besides the crawler's own selector, and every other is refused as not the one
	// asked for.
	MoveTo map[string]string
	// Size, when set, is the crawler's size on every node, whatever its class: a live
	// migration moves the VM as it is, and the model judges that size on the target.
	Size *sizing.Result
}

// Avoid is a node a crawler must not go to, and why (in words, for its messages).
type Avoid struct{ Node, Why string }

// Decision is the outcome of placing one crawler.
type Decision struct {
	// Node is the chosen node, "" when nothing fits.
	Node string
	// Sizing is the crawler's size on the chosen node (unplaced: on the first node that
	// passed the constraints, or on the built-in profile).
	Sizing sizing.Result
	// Predicted is the crawler's predicted interval error there, Cause its dominant term,
	// Correction the node's calibration it includes (1 for none).
	Predicted  time.Duration
	Cause      string
	Correction float64
	// Reason is why nothing fits: each node's binding constraint, grouped.
	Reason string
	// FreeCPUMilli is what is left on the chosen node after placing the crawler.
	FreeCPUMilli int64
	// Neighbours are the predictions, with the crawler placed, of the crawlers already
	// on the chosen node.
	Neighbours []model.Prediction
}

// evaluate is the contention model's prediction of every crawler in ws on n, sorted by
// key: without messages (model.Evaluate) for deciding, with them (model.Predict) for
// reporting.
func (n *Node) evaluate(ws []model.Workload, messages bool) []model.Prediction {
	m := model.Node{CPUs: n.CapacityCPUs, Params: n.Params, Correction: n.Correction}
	if messages {
		return model.Predict(m, ws)
	}
	return model.Evaluate(m, ws)
}

// Placed reports whether a node was chosen.
func (d Decision) Placed() bool { return d.Node != "" }

// Workload is the model's view of a crawler of the given size.
func Workload(key string, d sizing.Demand, s sizing.Result) model.Workload {
	return model.Workload{
		Key:       key,
		RPS:       d.RPS,
		Tolerance: d.Tolerance,
		Objective: d.Objective,
		VCPUs:     s.VCPUs,
		Dedicated: s.Dedicated(),
		HostCPUs:  s.HostCPUs,
		NIC:       d.NIC,
	}
}
