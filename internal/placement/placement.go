// Package placement chooses the node for a crawler VM. It is pure: it sees the node
// inventory and the crawlers already placed as plain values and returns a decision.
//
// This is the capacity layer: a node is a candidate when the crawler may run there
// (selector, taints, CPU Manager label) and its exclusive CPUs, hugepages and memory are
// not oversubscribed by the crawlers already placed. Among the candidates the policy
// chooses: pack takes the fullest node, spread the emptiest, and a crawler already on a
// node that still fits stays there. Names break ties, so the same input always gives the
// same node. The contention model (docs/contention-model.md) adds its prediction on top
// of this filter.
package placement

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/sizing"
)

// CPUManagerLabel marks nodes whose kubelet runs the static CPU Manager policy; KubeVirt
// sets it and schedules dedicated-CPU VMIs only there.
const CPUManagerLabel = "kubevirt.io/cpumanager"

// Node is what placement needs to know of a node.
type Node struct {
	Name   string
	Labels map[string]string
	Taints []corev1.Taint
	// Unschedulable is set for cordoned nodes.
	Unschedulable bool
	// CPUMilli, MemoryBytes and HugepagesBytes are the node's allocatable resources
	// (hugepages of 2Mi).
	CPUMilli       int64
	MemoryBytes    int64
	HugepagesBytes int64
}

// Resident is a crawler already placed on a node.
type Resident struct {
	// Key is namespace/name.
	Key    string
	Node   string
	Sizing sizing.Result
}

// Request is the crawler to place.
type Request struct {
	// Key is namespace/name; a resident with the same key is the crawler itself and is
	// not counted against the nodes.
	Key          string
	Sizing       sizing.Result
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	Policy       isov1.PlacementPolicy
	// Current is the node the crawler is on now, "" if none.
	Current string
}

// Decision is the outcome of placing one crawler.
type Decision struct {
	// Node is the chosen node, "" when nothing fits.
	Node string
	// Reason is why nothing fits: one line naming the binding constraint of each node.
	Reason string
	// FreeCPUMilli is what is left on the chosen node after placing the crawler.
	FreeCPUMilli int64
}

// Placed reports whether a node was chosen.
func (d Decision) Placed() bool { return d.Node != "" }

type usage struct{ exclusiveMilli, sharedMilli, memory, hugepages int64 }

func (u *usage) add(s sizing.Result) {
	if s.Dedicated() {
		u.exclusiveMilli += int64(s.HostCPUs) * 1000
	} else {
		u.sharedMilli += s.CPURequestMilli
	}
	u.memory += s.MemoryBytes
	u.hugepages += s.HugepagesBytes
}

// Place chooses a node for req among nodes, given the crawlers already placed.
func Place(req Request, nodes []Node, residents []Resident) Decision {
	used := map[string]*usage{}
	for _, r := range residents {
		if r.Key == req.Key {
			continue
		}
		u := used[r.Node]
		if u == nil {
			u = &usage{}
			used[r.Node] = u
		}
		u.add(r.Sizing)
	}

	type fit struct {
		node string
		free int64
	}
	var fits []fit
	rejections := map[string][]string{} // reason -> nodes
	for _, n := range nodes {
		u := used[n.Name]
		if u == nil {
			u = &usage{}
		}
		reason := reject(req, n, u)
		if reason != "" {
			rejections[reason] = append(rejections[reason], n.Name)
			continue
		}
		after := *u
		after.add(req.Sizing)
		fits = append(fits, fit{node: n.Name, free: n.CPUMilli - after.exclusiveMilli - after.sharedMilli})
	}
	if len(fits) == 0 {
		return Decision{Reason: explain(len(nodes), rejections)}
	}
	for _, f := range fits {
		if f.node == req.Current {
			return Decision{Node: f.node, FreeCPUMilli: f.free}
		}
	}
	sort.Slice(fits, func(i, j int) bool {
		if fits[i].free != fits[j].free {
			if req.Policy == isov1.PlacementPolicySpread {
				return fits[i].free > fits[j].free
			}
			return fits[i].free < fits[j].free
		}
		return fits[i].node < fits[j].node
	})
	return Decision{Node: fits[0].node, FreeCPUMilli: fits[0].free}
}

// reject returns why req cannot go on n, or "" when it can.
func reject(req Request, n Node, u *usage) string {
	switch {
	case n.Unschedulable:
		return "node is cordoned"
	case !labels.SelectorFromSet(req.NodeSelector).Matches(labels.Set(n.Labels)):
		return "spec.placement.nodeSelector does not match"
	case untolerated(n.Taints, req.Tolerations) != "":
		return fmt.Sprintf("taint %s not tolerated by spec.placement.tolerations", untolerated(n.Taints, req.Tolerations))
	case req.Sizing.Dedicated() && n.Labels[CPUManagerLabel] != "true":
		return fmt.Sprintf("no static CPU Manager (label %s=true) for cpuPlacement dedicated", CPUManagerLabel)
	}
	s := req.Sizing
	if s.Dedicated() {
		// Exclusive CPUs come out of the shared pool, so shared requests count too.
		free := n.CPUMilli - u.exclusiveMilli - u.sharedMilli
		if need := int64(s.HostCPUs) * 1000; need > free {
			return fmt.Sprintf("needs %d exclusive CPUs, %s free", s.HostCPUs, cpus(free))
		}
	} else if free := n.CPUMilli - u.exclusiveMilli - u.sharedMilli; s.CPURequestMilli > free {
		return fmt.Sprintf("needs %s CPU, %s free", cpus(s.CPURequestMilli), cpus(free))
	}
	if free := n.HugepagesBytes - u.hugepages; s.HugepagesBytes > free {
		return fmt.Sprintf("needs %s of 2Mi hugepages, %s free", mib(s.HugepagesBytes), mib(free))
	}
	// Memory backed by hugepages is accounted there, not in the node's memory.
	if free := n.MemoryBytes - (u.memory - u.hugepages); s.HugepagesBytes == 0 && s.MemoryBytes > free {
		return fmt.Sprintf("needs %s of memory, %s free", mib(s.MemoryBytes), mib(free))
	}
	return ""
}

func untolerated(taints []corev1.Taint, tolerations []corev1.Toleration) string {
	for i := range taints {
		t := &taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		tolerated := false
		for j := range tolerations {
			if tolerations[j].ToleratesTaint(t) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
		}
	}
	return ""
}

func explain(total int, rejections map[string][]string) string {
	if total == 0 {
		return "no nodes"
	}
	reasons := make([]string, 0, len(rejections))
	for r := range rejections {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	parts := make([]string, 0, len(reasons))
	for _, r := range reasons {
		ns := rejections[r]
		sort.Strings(ns)
		parts = append(parts, fmt.Sprintf("%s: %s", strings.Join(ns, ", "), r))
	}
	return fmt.Sprintf("0/%d nodes fit: %s", total, strings.Join(parts, "; "))
}

func cpus(milli int64) string {
	if milli%1000 == 0 {
		return fmt.Sprintf("%d", milli/1000)
	}
	return fmt.Sprintf("%dm", milli)
}

func mib(b int64) string { return fmt.Sprintf("%dMi", b>>20) }
