package placement

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/sizing"
)

// overBudget says which crawlers the predictions put over budget; tolerance is each
// one's budget.
func overBudget(key string, preds []model.Prediction, tolerance func(key string) time.Duration) string {
	var over []string // the first two, in words
	n := 0
	for _, pr := range preds {
		if pr.Within {
			continue
		}
		if n++; n > 2 {
			continue
		}
		who := "neighbour " + pr.Key
		if pr.Key == key {
			who = "itself"
		}
		over = append(over, who+" predicted "+model.FormatError(pr.Error)+" ("+pr.Cause+") over its "+model.FormatError(tolerance(pr.Key))+" tolerance")
	}
	if n > 2 {
		return fmt.Sprintf("%s, %s and %d more over budget", over[0], over[1], n-2)
	}
	return strings.Join(over, ", ")
}

func toleranceOf(ws []model.Workload, key string) time.Duration {
	for _, w := range ws {
		if w.Key == key {
			return w.Tolerance
		}
	}
	return 0
}

// misfit is the rule that keeps a crawler off a node whatever the node holds, or fitsNode.
type misfit int

const (
	fitsNode misfit = iota
	misfitNotAskedFor
	misfitAvoided
	misfitCordoned
	misfitNotReady
	misfitSelector
	misfitTaint
	misfitNoKubeVirt
	misfitNoCPUManager
	misfitNoRealtime
)

// constraint is the first rule that keeps the crawler of d off node n: the one check the
// search (Planner.allowed) and the explanation of an unplaced crawler (reason) share.
func constraint(d *decision, n *Node) misfit {
	switch {
	// First: a node the move did not ask for is refused as that, whatever else it is (the
	// crawler's own node included), so that a move to a node that cannot be found says so.
	case d.moveTo != nil && !d.moveTo.Matches(labels.Set(n.Labels)):
		return misfitNotAskedFor
	case d.avoid[n.Name] != "":
		return misfitAvoided
	case n.Unschedulable:
		return misfitCordoned
	case n.NotReady:
		return misfitNotReady
	case d.sel != nil && !d.sel.Matches(labels.Set(n.Labels)):
		return misfitSelector
	case untoleratedTaint(n.Taints, d.req.Tolerations) != nil:
		return misfitTaint
	// KubeVirt runs VMs only where its virt-handler runs and is ready: every launcher pod
	// requires kubevirt.io/schedulable=true, which virt-handler sets on its node (and
	// virt-controller clears when its heartbeat stops).
	case n.Labels[kubevirtv1.NodeSchedulable] != "true":
		return misfitNoKubeVirt
	// KubeVirt schedules dedicated-CPU VMIs only on nodes labelled kubevirt.io/cpumanager
	// (the static CPU Manager policy), and virt-controller requires kubevirt.io/realtime
	// of every realtime VMI, as dedicated crawlers are.
	case d.dedicated && n.Labels[kubevirtv1.CPUManager] != "true":
		return misfitNoCPUManager
	case d.dedicated && n.Labels[kubevirtv1.RealtimeLabel] != "true":
		return misfitNoRealtime
	}
	return fitsNode
}

// Admits says whether the crawler of req may run on node n, whatever the node holds: its
// selector, tolerations, cordon, readiness and KubeVirt's labels allow it. Only such a
// node can help a crawler that waits: what is freed elsewhere wakes nobody.
func Admits(n *Node, req Request) bool {
	d := &decision{req: req, dedicated: req.Demand.Dedicated}
	d.sel, d.moveTo = selectors(req)
	for _, a := range req.Avoid {
		if a.Node == n.Name {
			return false
		}
	}
	return constraint(d, n) == fitsNode
}

// selectors are the label selectors of req's node selector and of the node a move asks
// for, each nil when empty.
func selectors(req Request) (sel, moveTo labels.Selector) {
	if len(req.NodeSelector) > 0 {
		sel = labels.SelectorFromSet(req.NodeSelector)
	}
	if len(req.MoveTo) > 0 {
		moveTo = labels.SelectorFromSet(req.MoveTo)
	}
	return sel, moveTo
}

// reason says misfit m of node n for the crawler of d in words.
func (m misfit) reason(d *decision, n *Node) string {
	switch m {
	case misfitNotAskedFor:
		return fmt.Sprintf("not the node the move asks for (%s)", labels.Set(d.req.MoveTo))
	case misfitAvoided:
		return d.avoid[n.Name]
	case misfitCordoned:
		return "node is cordoned"
	case misfitNotReady:
		return "node is not ready"
	case misfitSelector:
		return "spec.placement.nodeSelector does not match"
	case misfitTaint:
		t := untoleratedTaint(n.Taints, d.req.Tolerations)
		return fmt.Sprintf("taint %s=%s:%s not tolerated by spec.placement.tolerations", t.Key, t.Value, t.Effect)
	case misfitNoKubeVirt:
		return fmt.Sprintf("KubeVirt runs no VMs here (label %s=true: no ready virt-handler)", kubevirtv1.NodeSchedulable)
	case misfitNoCPUManager:
		return fmt.Sprintf("no static CPU Manager (label %s=true) for cpuPlacement dedicated", kubevirtv1.CPUManager)
	case misfitNoRealtime:
		return fmt.Sprintf("no realtime support (label %s=true) for the realtime guest of cpuPlacement dedicated", kubevirtv1.RealtimeLabel)
	}
	return ""
}

// capacity returns which resource of n cannot hold s on top of u, or "".
func capacity(n *Node, u *usage, s sizing.Result) string {
	switch short, free := shortfall(n, u, s); short {
	case shortCPU:
		support := ""
		if s.SupportCPUMilli > 0 {
			support = fmt.Sprintf(" and %s for KubeVirt's support containers", format.CPU(s.SupportCPUMilli))
		}
		if s.Dedicated() {
			return fmt.Sprintf("needs %d exclusive CPUs%s, %s free", s.HostCPUs, support, format.CPU(free))
		}
		return fmt.Sprintf("needs %s CPU%s, %s free", format.CPU(s.CPURequestMilli), support, format.CPU(free))
	case shortHugepages:
		return fmt.Sprintf("needs %s of 2Mi hugepages, %s free", mib(s.HugepagesBytes), mib(free))
	case shortMemory:
		return fmt.Sprintf("needs %s of memory, %s free", mib(s.PodMemoryBytes()), mib(free))
	}
	return ""
}

type short int

const (
	shortNone short = iota
	shortCPU
	shortHugepages
	shortMemory
)

// shortfall is the first resource of n that cannot hold s on top of u, and what is free
// of it; capacity says it in words.
func shortfall(n *Node, u *usage, s sizing.Result) (short, int64) {
	free := n.freeCPUMilli(u)
	if s.PodCPUMilli() > free {
		return shortCPU, free
	}
	if free := n.HugepagesBytes - n.Held.HugepagesBytes - u.hugepages; s.HugepagesBytes > free {
		return shortHugepages, free
	}
	// Guest memory backed by hugepages is accounted there; the launcher's overhead is
	// node memory either way.
	if free := n.MemoryBytes - n.Held.MemoryBytes - u.memory; s.PodMemoryBytes() > free {
		return shortMemory, free
	}
	return shortNone, 0
}

// freeCPUMilli is the node's allocatable CPU less what its pods and the crawlers on it in
// u request. Exclusive CPUs come out of the shared pool, so shared requests count too.
func (n *Node) freeCPUMilli(u *usage) int64 {
	return n.CPUMilli - n.Held.CPUMilli - u.exclusiveMilli - u.sharedMilli
}

// Tolerates says whether toleration tol tolerates taint t, as kube-scheduler judges it
// (corev1.Toleration.ToleratesTaint) with its TaintTolerationComparisonOperators feature
// off, its default: a toleration with Lt or Gt tolerates nothing. Written out here
// because that method's signature changes between Kubernetes releases, and this
// package is also built against the release KubeVirt's own code is (test/kubevirt).
func Tolerates(tol *corev1.Toleration, t *corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Key != "" && tol.Key != t.Key {
		return false
	}
	switch tol.Operator {
	case "", corev1.TolerationOpEqual:
		return tol.Value == t.Value
	case corev1.TolerationOpExists:
		return true
	default:
		return false
	}
}

// untoleratedTaint is the first taint that keeps pods off and tolerations do not
// tolerate, nil for none.
func untoleratedTaint(taints []corev1.Taint, tolerations []corev1.Toleration) *corev1.Taint {
	for i := range taints {
		t := &taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		tolerated := false
		for j := range tolerations {
			if Tolerates(&tolerations[j], t) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return t
		}
	}
	return nil
}
