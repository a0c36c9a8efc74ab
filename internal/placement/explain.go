package placement

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"isochron.io/isochron/internal/model"
)

// explain is why req fits no node: each node's binding constraint, grouped. rejected are
// the candidates the model turned down, with their predictions when Place made them.
func (p *Planner) explain(d *decision, rejected []rejectedCandidate) string {
	req := d.req
	rejections := map[string][]string{}
	reject := func(node, reason string) { rejections[reason] = append(rejections[reason], node) }
	// Nodes of one class short of the same resource by the same amount share a reason.
	type shortOf struct {
		class int
		short short
		free  int64
	}
	shorts := map[shortOf]string{}
	for i := range p.nodes {
		n := &p.nodes[i]
		if m := constraint(d, n); m != fitsNode {
			reject(n.Name, m.reason(d, n))
			continue
		}
		sz := p.size(d, p.class[i])
		if sz.err != nil {
			reject(n.Name, sz.err.Error())
			continue
		}
		u := p.used[i]
		if i == d.self {
			u.remove(p.ownSizing(i, req.Key))
		}
		if short, free := shortfall(n, &u, sz.s); short != shortNone {
			k := shortOf{p.class[i], short, free}
			reason, ok := shorts[k]
			if !ok {
				reason = capacity(n, &u, sz.s)
				shorts[k] = reason
			}
			reject(n.Name, reason)
		}
	}
	for _, r := range rejected {
		i, preds := r.c.i, r.preds
		var ws []model.Workload
		if i == d.self || p.sharedKeys {
			ws = p.workloads(req.Key, r.c)
			if preds == nil {
				preds = p.nodes[i].evaluate(ws, false)
			}
		} else {
			ws = p.loads[i].Workloads()
			if preds == nil { // skipped by pushedOver or Excludes: predict now, to name who is over
				p.preds = p.loads[i].EvaluateWith(r.c.w, p.preds)
				preds = p.preds
			}
		}
		tolerance := func(key string) time.Duration {
			if key == req.Key {
				return r.c.w.W.Tolerance
			}
			return toleranceOf(ws, key)
		}
		reject(p.nodes[i].Name, overBudget(req.Key, preds, tolerance))
	}
	return explain(len(p.nodes), rejections)
}

// rejectedCandidate is a candidate on which the model predicts some crawler over budget;
// preds are its predictions, nil when Place did not make them.
type rejectedCandidate struct {
	c     candidate
	preds []model.Prediction
}

// explain says why no node fits: the reasons shared by most nodes first, at most
// maxReasons of them (a condition message is for people, and the API bounds its size).
func explain(total int, rejections map[string][]string) string {
	if total == 0 {
		return "no nodes"
	}
	const maxReasons = 8
	type reason struct {
		text  string
		nodes []string
	}
	reasons := make([]reason, 0, len(rejections))
	for r, ns := range rejections {
		reasons = append(reasons, reason{r, ns})
	}
	sort.Slice(reasons, func(i, j int) bool {
		if a, b := len(reasons[i].nodes), len(reasons[j].nodes); a != b {
			return a > b
		}
		return reasons[i].text < reasons[j].text
	})
	parts := make([]string, 0, min(len(reasons), maxReasons)+1)
	rest := 0
	for i, r := range reasons {
		if i >= maxReasons {
			rest += len(r.nodes)
			continue
		}
		ns := r.nodes
		sort.Strings(ns)
		if len(ns) > 5 {
			ns = append(ns[:5:5], fmt.Sprintf("and %d more", len(r.nodes)-5))
		}
		parts = append(parts, fmt.Sprintf("%s: %s", strings.Join(ns, ", "), r.text))
	}
	if rest > 0 {
		parts = append(parts, fmt.Sprintf("%d more nodes for other reasons", rest))
	}
	return fmt.Sprintf("0/%d nodes fit: %s", total, strings.Join(parts, "; "))
}

func mib(b int64) string { return fmt.Sprintf("%dMi", b>>20) }
