package placement

import (
	"time"

	"isochron.io/isochron/internal/model"
)

// NodeSummary is what a node holds, for the operator's metrics.
type NodeSummary struct {
	Node string
	// ExclusiveMilli is the CPU held exclusively: dedicated crawlers' host CPUs and
	// other Guaranteed pods' pinned CPUs.
	ExclusiveMilli int64
	// FreeMilli is the allocatable CPU left for another exclusive reservation (shared
	// crawlers' requests also come out of it).
	FreeMilli int64
	// Crawlers is the number of crawlers placed on the node.
	Crawlers int
	// WorstPredicted is the largest interval error the model predicts for any of them
	// (0 without crawlers).
	WorstPredicted time.Duration
}

// Summarize is each node's usage and worst prediction, sorted by node name.
func Summarize(nodes []Node, residents []Resident) []NodeSummary {
	p := NewPlanner(nodes, residents)
	out := make([]NodeSummary, len(nodes))
	var ws []model.Workload
	for i := range p.nodes {
		n, u := &p.nodes[i], &p.used[i]
		s := NodeSummary{
			Node:           n.Name,
			ExclusiveMilli: n.HeldExclusiveMilli + u.exclusiveMilli,
			FreeMilli:      max(0, n.CPUMilli-n.HeldExclusiveMilli-u.exclusiveMilli-u.sharedMilli),
			Crawlers:       len(p.residents[i]),
		}
		ws = ws[:0]
		for _, r := range p.residents[i] {
			ws = append(ws, r.Workload)
		}
		if len(ws) > 0 {
			for _, pred := range model.Evaluate(model.Node{CPUs: n.CapacityCPUs, Params: n.Params}, ws) {
				s.WorstPredicted = max(s.WorstPredicted, pred.Error)
			}
		}
		out[i] = s
	}
	return out
}
