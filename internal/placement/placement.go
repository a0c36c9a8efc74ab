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
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
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
	Spec         *isov1.CrawlerVMSpec
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	Policy       isov1.PlacementPolicy
	// Current is the node the crawler is on now, "" if none.
	Current string
	// Avoid is a node the crawler must leave: a probe refuted its SLO there. "" for none.
	Avoid string
}

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
func Workload(key string, spec *isov1.CrawlerVMSpec, s sizing.Result) model.Workload {
	w := model.Workload{
		Key:       key,
		RPS:       spec.RPS,
		Tolerance: spec.ErrorBudget.Tolerance.Duration,
		Objective: spec.ErrorBudget.ObjectivePercent(),
		VCPUs:     s.VCPUs,
		Dedicated: s.Dedicated(),
		HostCPUs:  s.HostCPUs,
	}
	if nic := spec.RTNIC; nic != nil {
		w.NIC = &model.NICFlow{Deadline: nic.Deadline.Duration, MinBandwidthBitsPerSecond: nic.MinBandwidth.Value()}
	}
	return w
}

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

func (u *usage) remove(s sizing.Result) {
	if s.Dedicated() {
		u.exclusiveMilli -= int64(s.HostCPUs) * 1000
	} else {
		u.sharedMilli -= s.CPURequestMilli
	}
	u.memory -= s.MemoryBytes
	u.hugepages -= s.HugepagesBytes
}

// Planner places crawlers one after another on a fixed set of nodes, keeping what it has
// placed: the operator builds one per decision, isochronctl plan one per plan.
type Planner struct {
	nodes     []Node
	used      []usage
	residents [][]Resident // per node
	where     map[string]int
	index     map[string]int // node name -> position in nodes
	// class numbers the distinct Params of the nodes: a crawler has one size per class.
	class   []int
	classes int
	// cpuManager is set for the nodes that can host a dedicated crawler: labelled by
	// KubeVirt kubevirt.io/cpumanager=true (the static CPU Manager policy: KubeVirt
	// schedules dedicated-CPU VMIs only there) and kubevirt.io/realtime=true
	// (virt-controller requires it of every realtime VMI, as dedicated crawlers are).
	cpuManager []bool
	// pushedOver remembers, per node and until its crawlers change, the dedicated
	// crawlers without an RT-NIC that the model refused there because they would push a
	// neighbour over budget. A neighbour's prediction depends on such a crawler only
	// through its request rate (the host I/O load) and its exclusive CPUs (the shared
	// pool), and never falls as either grows; so a crawler at least as large in both is
	// refused there too, without predicting again. With pack, the fullest nodes come
	// first and refuse most crawlers; this keeps a decision from predicting them all.
	pushedOver [][]footprint
	// loads are the crawlers' workloads per node, with the sums their predictions share,
	// kept as crawlers come and go (model.Load).
	loads []*model.Load
	// free is each node's free CPU (freeCPUMilli); byFree lists each class's nodes by free
	// CPU, then by position: a decision walks them from the first node the crawler fits
	// on, in the policy's order, instead of visiting every node.
	free   []int64
	byFree [][]int
	// classParams are each class's Params.
	classParams []model.Params
	// rejected and preds are Place's scratch.
	rejected []rejectedCandidate
	preds    []model.Prediction
	// sharedKeys is set when residents on two nodes share a key: decisions then leave
	// every resident with the crawler's key out, node by node, without the loads' help.
	sharedKeys bool
}

// footprint is what a dedicated crawler without an RT-NIC weighs on its neighbours.
type footprint struct{ rps, hostCPUs int32 }

func (f footprint) covers(g footprint) bool { return f.rps >= g.rps && f.hostCPUs >= g.hostCPUs }

// NewPlanner starts from nodes and the crawlers already on them.
func NewPlanner(nodes []Node, residents []Resident) *Planner {
	p := &Planner{nodes: append([]Node(nil), nodes...), where: map[string]int{}}
	sort.Slice(p.nodes, func(i, j int) bool { return p.nodes[i].Name < p.nodes[j].Name })
	p.used = make([]usage, len(p.nodes))
	p.residents = make([][]Resident, len(p.nodes))
	p.pushedOver = make([][]footprint, len(p.nodes))
	p.index = make(map[string]int, len(p.nodes))
	p.class = make([]int, len(p.nodes))
	p.cpuManager = make([]bool, len(p.nodes))
	p.loads = make([]*model.Load, len(p.nodes))
	p.free = make([]int64, len(p.nodes))
	classOf := map[model.Params]int{}
	for i, n := range p.nodes {
		p.index[n.Name] = i
		p.cpuManager[i] = n.Labels[kubevirtv1.CPUManager] == "true" && n.Labels[kubevirtv1.RealtimeLabel] == "true"
		c, ok := classOf[n.Params]
		if !ok {
			c = len(classOf)
			classOf[n.Params] = c
			p.classParams = append(p.classParams, n.Params)
		}
		p.class[i] = c
		p.loads[i] = model.NewLoad(model.Node{CPUs: n.CapacityCPUs, Params: n.Params, Correction: n.Correction})
	}
	p.classes = len(classOf)
	for _, r := range residents {
		if i, ok := p.index[r.Node]; ok {
			p.add(i, r)
		}
	}
	p.byFree = make([][]int, p.classes)
	for i := range p.nodes {
		p.free[i] = p.nodes[i].freeCPUMilli(&p.used[i])
		p.byFree[p.class[i]] = append(p.byFree[p.class[i]], i)
	}
	for _, l := range p.byFree {
		sort.Slice(l, func(a, b int) bool { return p.freeBefore(l[a], l[b]) })
	}
	return p
}

// freeBefore is byFree's order: by free CPU, then by position.
func (p *Planner) freeBefore(i, j int) bool {
	if p.free[i] != p.free[j] {
		return p.free[i] < p.free[j]
	}
	return i < j
}

// reorder moves node i to its place in byFree after its usage changed (before NewPlanner
// builds byFree, there is nothing to move).
func (p *Planner) reorder(i int) {
	if p.byFree == nil {
		return
	}
	l := p.byFree[p.class[i]]
	at := sort.Search(len(l), func(k int) bool { return !p.freeBefore(l[k], i) })
	l = append(l[:at], l[at+1:]...)
	p.free[i] = p.nodes[i].freeCPUMilli(&p.used[i])
	at = sort.Search(len(l), func(k int) bool { return !p.freeBefore(l[k], i) })
	l = append(l, 0)
	copy(l[at+1:], l[at:])
	l[at] = i
	p.byFree[p.class[i]] = l
}

func (p *Planner) add(i int, r Resident) {
	p.pushedOver[i] = p.pushedOver[i][:0]
	p.used[i].add(r.Sizing)
	p.residents[i] = append(p.residents[i], r)
	p.loads[i].Add(r.Workload)
	if j, ok := p.where[r.Key]; ok && j != i {
		p.sharedKeys = true
	}
	p.where[r.Key] = i
	p.reorder(i)
}

// Commit records a placed crawler, so later decisions count it.
func (p *Planner) Commit(req Request, d Decision) {
	if !d.Placed() {
		return
	}
	p.forget(req.Key)
	if i, ok := p.index[d.Node]; ok {
		p.add(i, Resident{Key: req.Key, Node: d.Node, Sizing: d.Sizing, Workload: Workload(req.Key, req.Spec, d.Sizing)})
	}
}

// Prediction is the model's prediction for the crawler key on the node the planner holds
// it on, with every crawler there; false when it holds no such crawler.
func (p *Planner) Prediction(key string) (model.Prediction, bool) { return p.prediction(key, false) }

// Explain is the model's message for the crawler key where the planner holds it (the
// dominant term, its figures and what to do), "" when it holds no such crawler.
func (p *Planner) Explain(key string) string {
	pred, _ := p.prediction(key, true)
	return pred.Message
}

func (p *Planner) prediction(key string, messages bool) (model.Prediction, bool) {
	i, ok := p.where[key]
	if !ok {
		return model.Prediction{}, false
	}
	for _, pred := range p.nodes[i].evaluate(p.loads[i].Workloads(), messages) {
		if pred.Key == key {
			return pred, true
		}
	}
	return model.Prediction{}, false
}

// forget removes a crawler's own reservation: it is being placed again.
func (p *Planner) forget(key string) {
	i, ok := p.where[key]
	if !ok {
		return
	}
	rs := p.residents[i]
	p.pushedOver[i] = p.pushedOver[i][:0]
	for j := range rs {
		if rs[j].Key == key {
			p.used[i].remove(rs[j].Sizing)
			p.residents[i] = append(rs[:j:j], rs[j+1:]...)
			p.loads[i].Remove(key)
			p.reorder(i)
			break
		}
	}
	delete(p.where, key)
}

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
	dedicated bool
	sizes     []sized
}

func (p *Planner) newDecision(req Request) *decision {
	d := &decision{req: req, self: -1, dedicated: req.Spec.CPUPlacement != isov1.CPUPlacementShared, sizes: make([]sized, p.classes)}
	if i, ok := p.where[req.Key]; ok {
		d.self = i
	}
	if len(req.NodeSelector) > 0 {
		d.sel = labels.SelectorFromSet(req.NodeSelector)
	}
	return d
}

// size is the crawler's size on class c.
func (p *Planner) size(d *decision, c int) *sized {
	sz := &d.sizes[c]
	if !sz.done {
		sz.s, sz.err = sizing.Size(d.req.Spec, p.classParams[c])
		sz.w = model.NewCandidate(Workload(d.req.Key, d.req.Spec, sz.s), p.classParams[c])
		sz.done = true
	}
	return sz
}

// allowed reports whether the crawler may run on node i at all: constraints(req, n) == "".
func (p *Planner) allowed(d *decision, i int) bool {
	n := &p.nodes[i]
	return !(n.Unschedulable || n.Name == d.req.Avoid || (d.dedicated && !p.cpuManager[i]) ||
		(d.sel != nil && !d.sel.Matches(labels.Set(n.Labels))) || !tolerated(n.Taints, d.req.Tolerations))
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
	need := s.CPURequestMilli
	if s.Dedicated() {
		need = int64(s.HostCPUs) * 1000
	}
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
	spread := req.Policy == isov1.PlacementPolicySpread
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
	plain := d.dedicated && req.Spec.RTNIC == nil
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
		fp := footprint{rps: req.Spec.RPS, hostCPUs: c.s.HostCPUs}
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
	if s, err := sizing.Size(req.Spec, model.Params{}); err == nil {
		dec.Sizing = s // no candidate class: the size on the built-in profile
	}
	return dec
}

// candidateHeap is a binary min-heap of candidates under less.
type candidateHeap struct {
	cands []candidate
	less  func(a, b *candidate) bool
}

func (h *candidateHeap) push(c candidate) {
	h.cands = append(h.cands, c)
	for i := len(h.cands) - 1; i > 0; {
		up := (i - 1) / 2
		if !h.less(&h.cands[i], &h.cands[up]) {
			return
		}
		h.cands[i], h.cands[up] = h.cands[up], h.cands[i]
		i = up
	}
}

func (h *candidateHeap) pop() candidate {
	top := h.cands[0]
	last := len(h.cands) - 1
	h.cands[0] = h.cands[last]
	h.cands = h.cands[:last]
	h.down(0)
	return top
}

func (h *candidateHeap) down(i int) {
	c := h.cands
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(c) && h.less(&c[l], &c[least]) {
			least = l
		}
		if r < len(c) && h.less(&c[r], &c[least]) {
			least = r
		}
		if least == i {
			return
		}
		c[i], c[least] = c[least], c[i]
		i = least
	}
}

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
		if reason := constraints(req, d.sel, n); reason != "" {
			reject(n.Name, reason)
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

func (p *Planner) ownSizing(i int, key string) sizing.Result {
	for _, r := range p.residents[i] {
		if r.Key == key {
			return r.Sizing
		}
	}
	return sizing.Result{}
}

// rejectedCandidate is a candidate on which the model predicts some crawler over budget;
// preds are its predictions, nil when Place did not make them.
type rejectedCandidate struct {
	c     candidate
	preds []model.Prediction
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

// constraints returns why req may not run on n at all, or "". sel is
// req.NodeSelector's selector, nil for none.
func constraints(req Request, sel labels.Selector, n *Node) string {
	switch {
	case n.Name == req.Avoid:
		return "a probe refuted the crawler's SLO there"
	case n.Unschedulable:
		return "node is cordoned"
	case sel != nil && !sel.Matches(labels.Set(n.Labels)):
		return "spec.placement.nodeSelector does not match"
	case untolerated(n.Taints, req.Tolerations) != "":
		return fmt.Sprintf("taint %s not tolerated by spec.placement.tolerations", untolerated(n.Taints, req.Tolerations))
	case req.Spec.CPUPlacement != isov1.CPUPlacementShared && n.Labels[kubevirtv1.CPUManager] != "true":
		return fmt.Sprintf("no static CPU Manager (label %s=true) for cpuPlacement dedicated", kubevirtv1.CPUManager)
	case req.Spec.CPUPlacement != isov1.CPUPlacementShared && n.Labels[kubevirtv1.RealtimeLabel] != "true":
		return fmt.Sprintf("no realtime support (label %s=true) for the realtime guest of cpuPlacement dedicated", kubevirtv1.RealtimeLabel)
	}
	return ""
}

// capacity returns which resource of n cannot hold s on top of u, or "".
func capacity(n *Node, u *usage, s sizing.Result) string {
	switch short, free := shortfall(n, u, s); short {
	case shortCPU:
		if s.Dedicated() {
			return fmt.Sprintf("needs %d exclusive CPUs, %s free", s.HostCPUs, format.CPU(free))
		}
		return fmt.Sprintf("needs %s CPU, %s free", format.CPU(s.CPURequestMilli), format.CPU(free))
	case shortHugepages:
		return fmt.Sprintf("needs %s of 2Mi hugepages, %s free", mib(s.HugepagesBytes), mib(free))
	case shortMemory:
		return fmt.Sprintf("needs %s of memory, %s free", mib(s.MemoryBytes), mib(free))
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
	if s.Dedicated() {
		if need := int64(s.HostCPUs) * 1000; need > free {
			return shortCPU, free
		}
	} else if s.CPURequestMilli > free {
		return shortCPU, free
	}
	if free := n.HugepagesBytes - n.Held.HugepagesBytes - u.hugepages; s.HugepagesBytes > free {
		return shortHugepages, free
	}
	// Memory backed by hugepages is accounted there, not in the node's memory.
	if free := n.MemoryBytes - n.Held.MemoryBytes - (u.memory - u.hugepages); s.HugepagesBytes == 0 && s.MemoryBytes > free {
		return shortMemory, free
	}
	return shortNone, 0
}

// freeCPUMilli is the node's allocatable CPU less what its pods and the crawlers on it in
// u request. Exclusive CPUs come out of the shared pool, so shared requests count too.
func (n *Node) freeCPUMilli(u *usage) int64 {
	return n.CPUMilli - n.Held.CPUMilli - u.exclusiveMilli - u.sharedMilli
}

// tolerated reports whether tolerations tolerate every taint that keeps pods off.
func tolerated(taints []corev1.Taint, tolerations []corev1.Toleration) bool {
	for i := range taints {
		t := &taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		ok := false
		for j := range tolerations {
			if tolerations[j].ToleratesTaint(t) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
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
