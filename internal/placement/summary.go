package placement

import (
	"sort"
	"time"

	"isochron.io/isochron/internal/model"
)

// NodeSummary is what a node holds: for the operator's metrics and isochronctl plan.
type NodeSummary struct {
	Node string
	// AllocatableMilli is the node's allocatable CPU.
	AllocatableMilli int64
	// UsedMilli is what the crawlers placed there take of it: dedicated crawlers' host
	// CPUs and shared crawlers' CPU requests.
	UsedMilli int64
	// ExclusiveMilli is the CPU held exclusively: dedicated crawlers' host CPUs and
	// other Guaranteed pods' pinned CPUs.
	ExclusiveMilli int64
	// FreeMilli is the allocatable CPU left for another exclusive reservation (shared
	// crawlers' requests also come out of it).
	FreeMilli int64
	// Crawlers are the keys (namespace/name) of the crawlers placed on the node, sorted.
	Crawlers []string
	// WorstPredicted is the largest interval error the model predicts for any of them
	// (0 without crawlers).
	WorstPredicted time.Duration
}

// Summarize is each node's usage and worst prediction, sorted by node name.
func Summarize(nodes []Node, residents []Resident) []NodeSummary {
	s, _ := NewPlanner(nodes, residents).summarize()
	return s
}

// summarize is each node's usage, sorted by node name, and every crawler's prediction
// with all the crawlers the planner holds in place, by key.
func (p *Planner) summarize() ([]NodeSummary, map[string]model.Prediction) {
	out := make([]NodeSummary, len(p.nodes))
	preds := make(map[string]model.Prediction, len(p.where))
	var ws []model.Workload
	for i := range p.nodes {
		n, u := &p.nodes[i], &p.used[i]
		s := NodeSummary{
			Node:             n.Name,
			AllocatableMilli: n.CPUMilli,
			UsedMilli:        u.exclusiveMilli + u.sharedMilli,
			ExclusiveMilli:   n.Held.ExclusiveMilli + u.exclusiveMilli,
			FreeMilli:        max(0, n.freeCPUMilli(u)),
			Crawlers:         make([]string, 0, len(p.residents[i])),
		}
		ws = p.workloadsOn(i, ws[:0])
		for _, pred := range n.evaluate(ws, false) {
			preds[pred.Key] = pred
			s.Crawlers = append(s.Crawlers, pred.Key)
			s.WorstPredicted = max(s.WorstPredicted, pred.Error)
		}
		sort.Strings(s.Crawlers)
		out[i] = s
	}
	return out, preds
}
