package placement

import (
	"sort"

	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/sizing"
)

// usage is what the crawlers on a node hold of it: exclusive CPUs, shared-pool requests
// (shared crawlers' and every launcher's support containers'), memory (their launcher
// pods' requests: sizing.Result.PodMemoryBytes) and hugepages.
type usage struct{ exclusiveMilli, sharedMilli, memory, hugepages int64 }

func (u *usage) add(s sizing.Result) {
	if s.Dedicated() {
		u.exclusiveMilli += int64(s.HostCPUs) * 1000
	} else {
		u.sharedMilli += s.CPURequestMilli
	}
	u.sharedMilli += s.SupportCPUMilli
	u.memory += s.PodMemoryBytes()
	u.hugepages += s.HugepagesBytes
}

func (u *usage) remove(s sizing.Result) {
	if s.Dedicated() {
		u.exclusiveMilli -= int64(s.HostCPUs) * 1000
	} else {
		u.sharedMilli -= s.CPURequestMilli
	}
	u.sharedMilli -= s.SupportCPUMilli
	u.memory -= s.PodMemoryBytes()
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
	p.loads = make([]*model.Load, len(p.nodes))
	p.free = make([]int64, len(p.nodes))
	classOf := map[model.Params]int{}
	for i, n := range p.nodes {
		p.index[n.Name] = i
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
		p.add(i, ResidentOf(req, d))
	}
}

// ResidentOf is the reservation decision d, which placed req, holds: the one Commit
// counts, and the ledger too.
func ResidentOf(req Request, d Decision) Resident {
	return Resident{Key: req.Key, Node: d.Node, Sizing: d.Sizing, Workload: Workload(req.Key, req.Demand, d.Sizing)}
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
	for _, pred := range p.nodes[i].evaluate(p.workloadsOn(i, nil), messages) {
		if pred.Key == key {
			return pred, true
		}
	}
	return model.Prediction{}, false
}

// workloadsOn appends the workloads of node i's crawlers to ws, by key: the one order a
// node's crawlers are predicted in (a refreshed prediction, the plan's final ones), so that
// the same crawlers give the same figures to the last bit whatever order they came in.
func (p *Planner) workloadsOn(i int, ws []model.Workload) []model.Workload {
	start := len(ws)
	for _, r := range p.residents[i] {
		ws = append(ws, r.Workload)
	}
	sort.Slice(ws[start:], func(a, b int) bool { return ws[start+a].Key < ws[start+b].Key })
	return ws
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
