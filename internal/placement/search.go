package placement

import (
	"sort"

	"k8s.io/apimachinery/pkg/labels"

	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/sizing"
)

// Place chooses a node for req among nodes, given the crawlers already placed.
func Place(req Request, nodes []Node, residents []Resident) Decision {
	return NewPlanner(nodes, residents).Place(req)
}

type candidate struct {
	i int
	s sizing.Result
	// w is the crawler as the model sees it at size s.
	w    *model.Candidate
	free int64
	// walk is the classWalk that found it, -1 for none.
	walk int
}

// sized is a crawler's size on one node class, and its workload at that size, computed
// once per decision.
type sized struct {
	done bool
	s    sizing.Result
	w    *model.Candidate
	err  error
}

// decision is what one Place call knows of its crawler.
type decision struct {
	req       Request
	self      int // the node holding the crawler's own reservation, -1 for none
	sel       labels.Selector
	moveTo    labels.Selector // req.MoveTo, nil for none
	dedicated bool
	sizes     []sized
	// avoid is req.Avoid by node.
	avoid map[string]string
}

func (p *Planner) newDecision(req Request) *decision {
	d := &decision{req: req, self: -1, dedicated: req.Demand.Dedicated, sizes: make([]sized, p.classes)}
	if i, ok := p.where[req.Key]; ok {
		d.self = i
	}
	d.sel, d.moveTo = selectors(req)
	if len(req.Avoid) > 0 {
		d.avoid = make(map[string]string, len(req.Avoid))
		for _, a := range req.Avoid {
			if _, ok := d.avoid[a.Node]; !ok {
				d.avoid[a.Node] = a.Why
			}
		}
	}
	return d
}

// size is the crawler's size on class c.
func (p *Planner) size(d *decision, c int) *sized {
	sz := &d.sizes[c]
	if !sz.done {
		if d.req.Size != nil {
			sz.s = *d.req.Size
		} else {
			sz.s, sz.err = sizing.Size(d.req.Demand, p.classParams[c])
		}
		sz.w = model.NewCandidate(Workload(d.req.Key, d.req.Demand, sz.s), p.classParams[c])
		sz.done = true
	}
	return sz
}

// allowed reports whether the crawler may run on node i at all (constraint).
func (p *Planner) allowed(d *decision, i int) bool {
	return constraint(d, &p.nodes[i]) == fitsNode
}

// candidateAt is node i as a candidate: false when the crawler may not run there, has no
// size there or does not fit its CPUs, hugepages or memory.
func (p *Planner) candidateAt(d *decision, i int) (candidate, bool) {
	if !p.allowed(d, i) {
		return candidate{}, false
	}
	sz := p.size(d, p.class[i])
	if sz.err != nil {
		return candidate{}, false
	}
	n := &p.nodes[i]
	u := p.used[i]
	if i == d.self {
		u.remove(p.ownSizing(i, d.req.Key))
	}
	if short, _ := shortfall(n, &u, sz.s); short != shortNone {
		return candidate{}, false
	}
	u.add(sz.s)
	return candidate{i: i, s: sz.s, w: sz.w, free: n.freeCPUMilli(&u)}, true
}

// classWalk yields a class's candidates in the policy's order, from byFree: for pack from
// the first node with the CPUs the crawler needs upwards, for spread from the freest
// node down, nodes with the same free CPUs by position. On one class the crawler has one
// size, so the order of free CPUs before and after placing it is the same.
type classWalk struct {
	list   []int
	spread bool
	// pos is the next position; for spread, run ends the run of nodes with the same free
	// CPUs that pos walks up through, and below is where the next run down ends.
	pos, run, below int
}

func (p *Planner) newClassWalk(c int, s sizing.Result, spread bool) classWalk {
	need := s.PodCPUMilli()
	l := p.byFree[c]
	first := sort.Search(len(l), func(k int) bool { return p.free[l[k]] >= need }) // none before fits
	if spread {
		l = l[first:]
		return classWalk{list: l, spread: true, pos: len(l), run: len(l), below: len(l)}
	}
	return classWalk{list: l, pos: first}
}

// next is the position of the next node, -1 when there is none.
func (p *Planner) nextOf(w *classWalk) int {
	if !w.spread {
		if w.pos >= len(w.list) {
			return -1
		}
		w.pos++
		return w.list[w.pos-1]
	}
	if w.pos >= w.run {
		if w.below == 0 {
			return -1
		}
		f := p.free[w.list[w.below-1]]
		start := sort.Search(w.below, func(k int) bool { return p.free[w.list[k]] >= f })
		w.pos, w.run, w.below = start, w.below, start
	}
	w.pos++
	return w.list[w.pos-1]
}

// Place chooses a node for req; it does not record the decision (see Commit).
//
// It runs in two passes. The first decides without building any message: constraints,
// one sizing per node class, capacity, then predictions in the policy's order until a
// candidate fits. Only when none does, the second pass (explain) says why, node by node.
//
// The policy's order is the current node first, then by free CPUs after placing the
// crawler (fewest for pack, most for spread), then by name, which is the nodes' order.
// Each class's nodes are kept in order of free CPUs (byFree), so the candidates come off
// a heap of one walk per class (and one for the node holding the crawler's own
// reservation, whose free CPUs count it out): a decision visits the nodes from the first
// one with room, in order, and stops at the first that fits.
func (p *Planner) Place(req Request) Decision {
	d := p.newDecision(req)
	spread := req.Spread
	less := func(a, b *candidate) bool {
		if a.free != b.free {
			if spread {
				return a.free > b.free
			}
			return a.free < b.free
		}
		return a.i < b.i
	}
	cur := -1
	if req.Current != "" {
		if i, ok := p.index[req.Current]; ok {
			cur = i
		}
	}
	var walks []classWalk
	heads := candidateHeap{less: less}
	// advance pushes walk k's next candidate (k -1: none, the heap holds a lone node).
	advance := func(k int) {
		w := &walks[k]
		for i := p.nextOf(w); i >= 0; i = p.nextOf(w) {
			if i == cur || i == d.self {
				continue
			}
			if c, ok := p.candidateAt(d, i); ok {
				c.walk = k
				heads.push(c)
				return
			}
		}
	}
	for c := range p.classes {
		if sz := p.size(d, c); sz.err == nil {
			walks = append(walks, p.newClassWalk(c, sz.s, spread))
		}
	}
	for k := range walks {
		advance(k)
	}
	if d.self >= 0 && d.self != cur {
		if c, ok := p.candidateAt(d, d.self); ok {
			c.walk = -1
			heads.push(c)
		}
	}
	var first *candidate
	if cur >= 0 {
		if c, ok := p.candidateAt(d, cur); ok {
			c.walk = -1
			first = &c
		}
	}
	rejected := p.rejected[:0]
	defer func() { p.rejected = rejected[:0] }()
	plain := d.dedicated && req.Demand.NIC == nil
	for first != nil || len(heads.cands) > 0 {
		var c candidate
		if first != nil {
			c, first = *first, nil
		} else {
			c = heads.pop()
			if c.walk >= 0 {
				advance(c.walk)
			}
		}
		fp := footprint{rps: req.Demand.RPS, hostCPUs: c.s.HostCPUs}
		if plain && c.i != d.self && p.pushes(c.i, fp) {
			rejected = append(rejected, rejectedCandidate{c: c})
			continue
		}
		if c.i != d.self && !p.sharedKeys && p.loads[c.i].Excludes(c.w) {
			rejected = append(rejected, rejectedCandidate{c: c}) // the crawler itself over budget
			continue
		}
		dec, r, fits, selfOver := p.predict(d, c)
		if fits {
			return dec
		}
		if plain && c.i != d.self && !selfOver {
			p.pushedOver[c.i] = append(p.pushedOver[c.i], fp)
		}
		rejected = append(rejected, r)
	}
	dec := Decision{Reason: p.explain(d, rejected)}
	for i := range p.nodes {
		if !p.allowed(d, i) {
			continue
		}
		if sz := p.size(d, p.class[i]); sz.err == nil {
			dec.Sizing = sz.s // the size on the first node that passes the constraints
			return dec
		}
	}
	if s, err := sizing.Size(req.Demand, model.Params{}); err == nil {
		dec.Sizing = s // no candidate class: the size on the built-in profile
	}
	return dec
}
func (p *Planner) ownSizing(i int, key string) sizing.Result {
	for _, r := range p.residents[i] {
		if r.Key == key {
			return r.Sizing
		}
	}
	return sizing.Result{}
}

// workloads are the crawlers on candidate c other than key, and the crawler c.w.
func (p *Planner) workloads(key string, c candidate) []model.Workload {
	ws := make([]model.Workload, 0, len(p.residents[c.i])+1)
	for _, r := range p.residents[c.i] {
		if r.Key != key {
			ws = append(ws, r.Workload)
		}
	}
	return append(ws, c.w.W)
}

// predict runs the model on candidate c with the crawler added: fits when every crawler
// stays within budget, else r, and selfOver when the crawler itself is over. On every node but the
// one holding the crawler's own reservation, the node's Load predicts, x first and
// stopping at the first crawler over budget.
func (p *Planner) predict(d *decision, c candidate) (dec Decision, r rejectedCandidate, fits, selfOver bool) {
	var preds []model.Prediction
	if c.i == d.self || p.sharedKeys {
		preds = p.nodes[c.i].evaluate(p.workloads(d.req.Key, c), false)
		within := true
		for _, pr := range preds {
			if !pr.Within {
				within, selfOver = false, selfOver || pr.Key == d.req.Key
			}
		}
		if !within {
			return Decision{}, rejectedCandidate{c: c, preds: preds}, false, selfOver
		}
	} else if preds, selfOver = p.loads[c.i].Admit(c.w); preds == nil {
		return Decision{}, rejectedCandidate{c: c}, false, selfOver
	}
	dec = Decision{Node: p.nodes[c.i].Name, Sizing: c.s, FreeCPUMilli: c.free}
	for _, pr := range preds {
		if pr.Key == d.req.Key {
			dec.Predicted, dec.Cause, dec.Correction = pr.Error, pr.Cause, pr.Correction
		} else {
			dec.Neighbours = append(dec.Neighbours, pr)
		}
	}
	return dec, rejectedCandidate{}, true, false
}

// pushes reports whether a crawler of footprint fp is known to push a neighbour on node
// i over budget (see Planner.pushedOver).
func (p *Planner) pushes(i int, fp footprint) bool {
	for _, f := range p.pushedOver[i] {
		if fp.covers(f) {
			return true
		}
	}
	return false
}
