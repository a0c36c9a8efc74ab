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
// the same input always gives the same node. Candidates are predicted in the policy's
// order and the first that fits wins, so a decision costs one prediction in the common
// case and one per candidate only when nothing fits. A crawler is sized once per node
// class (distinct Params), not per node, and the messages of Reason are built only when
// nothing fits (docs/contention-model.md, "Performance").
package placement

import (
	"fmt"
	"sort"
	"strings"
	"sync"
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
	// HeldExclusiveMilli is what Guaranteed pods other than crawlers hold in exclusive CPUs.
	HeldExclusiveMilli int64
	// Params is the contention profile of the node's class.
	Params model.Params
	// Correction is the node's calibration from probes (package calibration), which
	// multiplies every prediction there; 0 means 1.
	Correction float64
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
	classOf := map[model.Params]int{}
	for i, n := range p.nodes {
		p.index[n.Name] = i
		p.cpuManager[i] = n.Labels[kubevirtv1.CPUManager] == "true" && n.Labels[kubevirtv1.RealtimeLabel] == "true"
		c, ok := classOf[n.Params]
		if !ok {
			c = len(classOf)
			classOf[n.Params] = c
		}
		p.class[i] = c
	}
	p.classes = len(classOf)
	for _, r := range residents {
		if i, ok := p.index[r.Node]; ok {
			p.add(i, r)
		}
	}
	return p
}

func (p *Planner) add(i int, r Resident) {
	p.pushedOver[i] = p.pushedOver[i][:0]
	p.used[i].add(r.Sizing)
	p.residents[i] = append(p.residents[i], r)
	p.where[r.Key] = i
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
	ws := make([]model.Workload, 0, len(p.residents[i]))
	for _, r := range p.residents[i] {
		ws = append(ws, r.Workload)
	}
	for _, pred := range p.nodes[i].evaluate(ws, messages) {
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
	w    *model.Workload
	free int64
	// current is set when the candidate is the node the crawler is on now.
	current bool
}

// candidates recycles Place's candidate lists: one per node and decision would otherwise
// be most of what a plan allocates outside the model.
var candidates = sync.Pool{New: func() any { return new([]candidate) }}

// sized is a crawler's size on one node class, and its workload at that size, computed
// once per decision.
type sized struct {
	done bool
	s    sizing.Result
	w    model.Workload
	err  error
}

// Place chooses a node for req; it does not record the decision (see Commit).
//
// It runs in two passes. The first decides without building any message: constraints,
// one sizing per node class, capacity, then predictions in the policy's order until a
// candidate fits. Only when none does, the second pass (explain) says why, node by node.
func (p *Planner) Place(req Request) Decision {
	self := -1
	if i, ok := p.where[req.Key]; ok {
		self = i
	}
	var sel labels.Selector
	if len(req.NodeSelector) > 0 {
		sel = labels.SelectorFromSet(req.NodeSelector)
	}
	dedicated := req.Spec.CPUPlacement != isov1.CPUPlacementShared
	sizes := make([]sized, p.classes)
	var firstSize *sizing.Result
	buf := candidates.Get().(*[]candidate)
	defer candidates.Put(buf)
	cands := (*buf)[:0]
	defer func() { *buf = cands[:0] }()
	for i := range p.nodes {
		n := &p.nodes[i]
		if n.Unschedulable || n.Name == req.Avoid || (dedicated && !p.cpuManager[i]) ||
			(sel != nil && !sel.Matches(labels.Set(n.Labels))) || !tolerated(n.Taints, req.Tolerations) {
			continue // constraints(req, n) != ""
		}
		sz := &sizes[p.class[i]]
		if !sz.done {
			sz.s, sz.err = sizing.Size(req.Spec, n.Params)
			sz.w = Workload(req.Key, req.Spec, sz.s)
			sz.done = true
		}
		if sz.err != nil {
			continue
		}
		if firstSize == nil {
			firstSize = &sz.s
		}
		u := p.used[i]
		if i == self {
			u.remove(p.ownSizing(i, req.Key))
		}
		if short, _ := shortfall(n, &u, sz.s); short != shortNone {
			continue
		}
		u.add(sz.s)
		cands = append(cands, candidate{
			i: i, s: sz.s, w: &sz.w, free: n.CPUMilli - n.HeldExclusiveMilli - u.exclusiveMilli - u.sharedMilli,
			current: req.Current != "" && n.Name == req.Current,
		})
	}
	// The policy's order: the current node first, then by free CPUs (fewest for pack,
	// most for spread), then by name, which is the nodes' order. It is total, so taking
	// candidates off a heap visits them exactly as a full sort would, without sorting
	// the thousand candidates of which the first few usually fit.
	spread := req.Policy == isov1.PlacementPolicySpread
	order := candidateHeap{cands: cands, less: func(a, b *candidate) bool {
		if a.current != b.current {
			return a.current
		}
		if a.free != b.free {
			if spread {
				return a.free > b.free
			}
			return a.free < b.free
		}
		return a.i < b.i
	}}
	order.init()
	var rejected []rejectedCandidate
	var scratch []model.Workload
	plain := dedicated && req.Spec.RTNIC == nil
	for len(order.cands) > 0 {
		c := order.pop()
		fp := footprint{rps: req.Spec.RPS, hostCPUs: c.s.HostCPUs}
		if plain && c.i != self && p.pushes(c.i, fp) {
			rejected = append(rejected, rejectedCandidate{c: c})
			continue
		}
		d, r := p.predict(req, c, &scratch)
		if r == nil {
			return d
		}
		if plain && c.i != self && onlyNeighbours(req.Key, r.preds) {
			p.pushedOver[c.i] = append(p.pushedOver[c.i], fp)
		}
		rejected = append(rejected, *r)
	}
	d := Decision{Reason: p.explain(req, self, rejected)}
	if firstSize != nil {
		d.Sizing = *firstSize
	} else if s, err := sizing.Size(req.Spec, model.Params{}); err == nil {
		d.Sizing = s // no candidate class: the size on the built-in profile
	}
	return d
}

// candidateHeap is a binary min-heap of candidates under less.
type candidateHeap struct {
	cands []candidate
	less  func(a, b *candidate) bool
}

func (h *candidateHeap) init() {
	for i := len(h.cands)/2 - 1; i >= 0; i-- {
		h.down(i)
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
// the candidates the model turned down, with their predictions.
func (p *Planner) explain(req Request, self int, rejected []rejectedCandidate) string {
	rejections := map[string][]string{}
	reject := func(node, reason string) { rejections[reason] = append(rejections[reason], node) }
	for i := range p.nodes {
		n := &p.nodes[i]
		if reason := constraints(req, n); reason != "" {
			reject(n.Name, reason)
			continue
		}
		s, err := sizing.Size(req.Spec, n.Params)
		if err != nil {
			reject(n.Name, err.Error())
			continue
		}
		u := p.used[i]
		if i == self {
			u.remove(p.ownSizing(i, req.Key))
		}
		if reason := capacity(n, &u, s); reason != "" {
			reject(n.Name, reason)
		}
	}
	for _, r := range rejected {
		ws := p.workloads(make([]model.Workload, 0, len(p.residents[r.c.i])+1), req, r.c)
		if r.preds == nil { // skipped by pushedOver: predict now, to name the neighbour
			r.preds = p.nodes[r.c.i].evaluate(ws, false)
		}
		reject(p.nodes[r.c.i].Name, overBudget(req.Key, ws, r.preds))
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

// rejectedCandidate is a candidate on which the model predicts some crawler over budget.
type rejectedCandidate struct {
	c     candidate
	preds []model.Prediction
}

// workloads are the crawlers on candidate c with req added, appended to buf[:0].
func (p *Planner) workloads(buf []model.Workload, req Request, c candidate) []model.Workload {
	buf = buf[:0]
	for _, r := range p.residents[c.i] {
		if r.Key != req.Key {
			buf = append(buf, r.Workload)
		}
	}
	return append(buf, *c.w)
}

// predict runs the model on candidate c with req added; r is set when it does not fit.
// scratch holds the workloads between calls.
func (p *Planner) predict(req Request, c candidate, scratch *[]model.Workload) (Decision, *rejectedCandidate) {
	n := &p.nodes[c.i]
	*scratch = p.workloads(*scratch, req, c)
	preds := n.evaluate(*scratch, false)
	for _, pr := range preds {
		if !pr.Within {
			return Decision{}, &rejectedCandidate{c: c, preds: preds}
		}
	}
	d := Decision{Node: n.Name, Sizing: c.s, FreeCPUMilli: c.free}
	for _, pr := range preds {
		if pr.Key == req.Key {
			d.Predicted, d.Cause, d.Correction = pr.Error, pr.Cause, pr.Correction
		} else {
			d.Neighbours = append(d.Neighbours, pr)
		}
	}
	return d, nil
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

// onlyNeighbours reports whether every crawler over budget is a neighbour of key.
func onlyNeighbours(key string, preds []model.Prediction) bool {
	for _, pr := range preds {
		if !pr.Within && pr.Key == key {
			return false
		}
	}
	return true
}

// overBudget says which crawlers the predictions put over budget.
func overBudget(key string, ws []model.Workload, preds []model.Prediction) string {
	var over []string
	for _, pr := range preds {
		if !pr.Within {
			who := "neighbour " + pr.Key
			if pr.Key == key {
				who = "itself"
			}
			over = append(over, who+" predicted "+model.FormatError(pr.Error)+" ("+pr.Cause+") over its "+model.FormatError(toleranceOf(ws, pr.Key))+" tolerance")
		}
	}
	if len(over) > 2 {
		return fmt.Sprintf("%s, %s and %d more over budget", over[0], over[1], len(over)-2)
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

// constraints returns why req may not run on n at all, or "".
func constraints(req Request, n *Node) string {
	switch {
	case n.Name == req.Avoid:
		return "a probe refuted the crawler's SLO there"
	case n.Unschedulable:
		return "node is cordoned"
	case !labels.SelectorFromSet(req.NodeSelector).Matches(labels.Set(n.Labels)):
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
	// Exclusive CPUs come out of the shared pool, so shared requests count too.
	free := n.CPUMilli - n.HeldExclusiveMilli - u.exclusiveMilli - u.sharedMilli
	if s.Dedicated() {
		if need := int64(s.HostCPUs) * 1000; need > free {
			return shortCPU, free
		}
	} else if s.CPURequestMilli > free {
		return shortCPU, free
	}
	if free := n.HugepagesBytes - u.hugepages; s.HugepagesBytes > free {
		return shortHugepages, free
	}
	// Memory backed by hugepages is accounted there, not in the node's memory.
	if free := n.MemoryBytes - (u.memory - u.hugepages); s.HugepagesBytes == 0 && s.MemoryBytes > free {
		return shortMemory, free
	}
	return shortNone, 0
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
	reasons := make([]string, 0, len(rejections))
	for r := range rejections {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if a, b := len(rejections[reasons[i]]), len(rejections[reasons[j]]); a != b {
			return a > b
		}
		return reasons[i] < reasons[j]
	})
	parts := make([]string, 0, min(len(reasons), maxReasons)+1)
	rest := 0
	for i, r := range reasons {
		if i >= maxReasons {
			rest += len(rejections[r])
			continue
		}
		ns := rejections[r]
		sort.Strings(ns)
		if len(ns) > 5 {
			ns = append(ns[:5:5], fmt.Sprintf("and %d more", len(rejections[r])-5))
		}
		parts = append(parts, fmt.Sprintf("%s: %s", strings.Join(ns, ", "), r))
	}
	if rest > 0 {
		parts = append(parts, fmt.Sprintf("%d more nodes for other reasons", rest))
	}
	return fmt.Sprintf("0/%d nodes fit: %s", total, strings.Join(parts, "; "))
}

func mib(b int64) string { return fmt.Sprintf("%dMi", b>>20) }
