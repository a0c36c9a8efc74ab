package placement

import "isochron.io/isochron/internal/model"

// Planned is one crawler's outcome in a plan.
type Planned struct {
	// Decision is where the crawler went, or why nothing fits, when its turn came.
	Decision
	// Final is the crawler's prediction with the whole plan in place (every crawler
	// placed after it included); zero when it was not placed.
	Final model.Prediction
}

// Plan places reqs one after another, in the order given, on nodes that hold no
// crawler yet, as the operator would place them on a fresh cluster: each decision counts
// the ones before it, and the crawlers' current nodes (Request.Current) are ignored.
// Once all are placed, every node is predicted again with its final crawlers. It
// returns the outcome of each request, in the order of reqs, and each node's summary,
// sorted by name.
func Plan(nodes []Node, reqs []Request) ([]Planned, []NodeSummary) {
	return PlanOn(nodes, nil, reqs)
}

// PlanOn is Plan on nodes that already hold residents (a live cluster's reservations):
// they keep their nodes and count in every decision and in the final predictions.
func PlanOn(nodes []Node, residents []Resident, reqs []Request) ([]Planned, []NodeSummary) {
	p := NewPlanner(nodes, residents)
	out := make([]Planned, len(reqs))
	for i, req := range reqs {
		req.Current = ""
		d := p.Place(req)
		p.Commit(req, d)
		out[i].Decision = d
	}
	summaries, final := p.summarize()
	for i := range out {
		if out[i].Placed() {
			out[i].Final = final[reqs[i].Key]
		}
	}
	return out, summaries
}
