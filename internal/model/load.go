package model

import (
	"math"
	"slices"
	"strings"
	"time"
)

// Load is the workloads on one node, kept up to date as they come and go: placement's
// view of a node while it places crawlers one after another. Predicting the node with
// one more workload (Admit) starts from the sums the workloads already there share
// (request rate, exclusive CPUs, shared vCPUs by busy probability) instead of recounting
// them, and reuses each workload's headroom, which depends on nothing else; Excludes
// rules a newcomer out without predicting at all when a lower bound on its own error is
// over its budget. The predictions are Evaluate's, bit for bit: the sums are of whole
// numbers, so the order they are counted in does not matter, and the terms are computed
// by the same code.
type Load struct {
	node Node
	// p is node.Params with their defaults.
	p Params
	// ws are the workloads, in the order added; heads[i] is the headroom of ws[i].
	ws    []Workload
	heads []headroomFigures
	// nics is how many of ws have an RT-NIC.
	nics int
	// sums counts ws: init and count, not finish.
	sums nodeState
	// floor is what Excludes needs, built on its first call after a change.
	floor floorState
	// state, buf and preds are Admit's scratch.
	state nodeState
	buf   []Workload
	preds []Prediction
}

// NewLoad is node n without workloads.
func NewLoad(n Node) *Load {
	l := &Load{node: n, p: n.Params.WithDefaults()}
	l.sums.init(n, l.p)
	return l
}

// Add puts w on the node.
func (l *Load) Add(w Workload) {
	l.ws = append(l.ws, w)
	l.heads = append(l.heads, headroom(&w, l.p))
	if w.NIC != nil {
		l.nics++
	}
	l.sums.count(&w)
	sortGroups(l.sums.entities) // kept sorted, so that with's sort only places x's and the I/O threads'
	l.floor.valid = false
}

// Remove takes the workload key off the node, and reports whether it was there.
func (l *Load) Remove(key string) bool {
	for i := range l.ws {
		if l.ws[i].Key != key {
			continue
		}
		w := l.ws[i]
		l.ws = append(l.ws[:i], l.ws[i+1:]...)
		l.heads = append(l.heads[:i], l.heads[i+1:]...)
		if w.NIC != nil {
			l.nics--
		}
		s := &l.sums
		s.totalRPS -= math.Max(0, float64(w.RPS))
		if w.Dedicated {
			s.exclusive -= float64(hostCPUsOf(&w))
		}
		if !w.Dedicated && w.VCPUs > 0 {
			u, n := vcpuUtil(&w, l.p), float64(w.VCPUs)
			for j := range s.entities {
				if s.entities[j].util == u {
					s.entities[j].count -= n
					s.runnable -= n
					if s.entities[j].count == 0 { // an empty group would still count in contention
						s.entities = append(s.entities[:j], s.entities[j+1:]...)
					}
					break
				}
			}
		}
		l.floor.valid = false
		return true
	}
	return false
}

// Workloads are the node's workloads in the order added. The slice is the Load's own:
// do not change it.
func (l *Load) Workloads() []Workload { return l.ws }

// Evaluate is Evaluate of the node's workloads.
func (l *Load) Evaluate() []Prediction { return Evaluate(l.node, l.ws) }

// Candidate is a workload about to be tried on the nodes of one class (one Params), with
// its headroom there, computed once for them all.
type Candidate struct {
	W    Workload
	p    Params
	head headroomFigures
}

// NewCandidate prepares w for the nodes whose Params are p.
func NewCandidate(w Workload, p Params) *Candidate {
	c := &Candidate{W: w, p: p.WithDefaults()}
	c.head = headroom(&c.W, c.p)
	return c
}

func (l *Load) headroomOf(x *Candidate) headroomFigures {
	if x.p == l.p {
		return x.head
	}
	return headroom(&x.W, l.p)
}

// with is the node's state with x added after its workloads, as newNodeState would build
// it from them.
func (l *Load) with(x *Workload) *nodeState {
	s := &l.state
	entities, io, nic := append(s.entities[:0], l.sums.entities...), s.io[:0], s.nic
	*s = l.sums
	s.entities, s.io, s.nic = entities, io, nic // the scratch, reused
	s.count(x)
	var ws []Workload // without an RT-NIC on the node, newNICState needs none of them
	if l.nics > 0 || x.NIC != nil {
		l.buf = append(append(l.buf[:0], l.ws...), *x)
		ws = l.buf
	}
	s.finish(ws)
	return s
}

// Admit predicts the node's workloads with x added, x first, and stops at the first one
// over budget. When none is, it returns the predictions of all of them sorted by key,
// as Evaluate of the workloads and x would; otherwise nil, and selfOver says whether x
// itself is over.
func (l *Load) Admit(x *Candidate) (preds []Prediction, selfOver bool) {
	s := l.with(&x.W)
	k := len(l.ws)
	self := s.predict(k, &x.W, l.headroomOf(x), false)
	if !self.Within {
		return nil, true
	}
	if cap(l.preds) < k+1 {
		l.preds = make([]Prediction, k+1, 2*(k+1))
	}
	out := l.preds[:k+1]
	out[k] = self
	for i := range l.ws {
		pr := s.predict(i, &l.ws[i], l.heads[i], false)
		if !pr.Within {
			return nil, false
		}
		out[i] = pr
	}
	preds = append([]Prediction(nil), out...)
	sortByKey(preds)
	return preds, false
}

// EvaluateWith is Evaluate of the node's workloads and x, appended to buf[:0].
func (l *Load) EvaluateWith(x *Candidate, buf []Prediction) []Prediction {
	s := l.with(&x.W)
	k := len(l.ws)
	out := buf[:0]
	for i := range l.ws {
		out = append(out, s.predict(i, &l.ws[i], l.heads[i], false))
	}
	out = append(out, s.predict(k, &x.W, l.headroomOf(x), false))
	sortByKey(out)
	return out
}

// sortByKey is predict's order: by key, stable.
func sortByKey(preds []Prediction) {
	slices.SortStableFunc(preds, func(a, b Prediction) int { return strings.Compare(a.Key, b.Key) })
}

// floorState is the node's shared pool as Excludes sees it: the entities of its
// workloads' shared vCPUs and its host I/O threads at the node's load, busiest first.
type floorState struct {
	valid bool
	// pool is the shared pool's CPUs, runnable its entities.
	pool, runnable float64
	// all are the entities; io are they without one host I/O thread (what an I/O
	// thread waits behind), empty when the I/O path is isolated.
	all, io busiest
}

// busiest are entities busiest first, with the products of their idle probabilities:
// cum[j] is the number of entities in ents[:j], idle[j] the product of 1-u over them.
type busiest struct {
	ents      []group
	cum, idle []float64
}

func (b *busiest) build(ents []group) {
	b.ents = ents
	b.cum, b.idle = append(b.cum[:0], 0), append(b.idle[:0], 1)
	for j, g := range ents {
		b.cum = append(b.cum, b.cum[j]+g.count)
		b.idle = append(b.idle, b.idle[j]*math.Pow(1-g.util, g.count))
	}
}

func (l *Load) floorState() *floorState {
	f := &l.floor
	if f.valid {
		return f
	}
	s, p := &l.sums, l.p
	f.pool = s.cpus - s.exclusive
	if p.HostIOIsolated {
		f.pool -= p.HostReservedCPUs
	}
	all, io := append(f.all.ents[:0], s.entities...), f.io.ents[:0]
	f.runnable = s.runnable
	if !p.HostIOIsolated {
		ioUtil := math.Min(1, s.totalRPS*p.HostIOCostPerRequest.Seconds()/p.HostReservedCPUs)
		threads := math.Ceil(p.HostReservedCPUs)
		all, f.runnable = addEntities(all, f.runnable, ioUtil, threads)
		sortGroups(all)
		io, _ = addEntities(append(io, s.entities...), 0, ioUtil, threads-1)
		sortGroups(io)
	}
	f.all.build(all)
	f.io.build(io)
	f.valid = true
	return f
}

// idleOf is the product of the idle probabilities of the c busiest entities (of all of
// them when there are fewer).
func (b *busiest) idleOf(c float64) float64 {
	j := 0
	for j < len(b.ents) && b.cum[j+1] <= c {
		j++
	}
	prod := b.idle[j]
	if j < len(b.ents) && c > b.cum[j] {
		prod *= math.Pow(1-b.ents[j].util, c-b.cum[j])
	}
	return prod
}

// waitAtLeast is a lower bound on contention's wait, in seconds, of an entity among n
// runnable on m CPUs whose c busiest others are at least as busy as those of b: with
// P = 1 − idle of them, c·G·(1 − tail/P). It also returns c and P's lower bound.
func waitAtLeast(b *busiest, n, m, tail float64, g time.Duration) (sec, c, P float64) {
	switch {
	case n <= m:
		return 0, 0, 0
	case m <= 0:
		return math.Inf(1), 0, 1
	}
	c = math.Min(math.Ceil(n/m)-1, n-1)
	if P = 1 - b.idleOf(c); P > tail {
		sec = c * g.Seconds() * (1 - tail/P)
	}
	return sec, c, P
}

// Excludes reports whether Admit would find x itself over its budget on the node, from
// a lower bound on its error that predicts nothing: x's headroom; the wait for a CPU of
// its vCPUs among the node's shared entities as they are (x's own, and the busier host
// I/O threads x would bring, left out); and the host I/O queue at the node's request
// rate with x's, as if the I/O path lost none of its CPUs to contention, with an upper
// bound on the M/D/1 decay rate in place of the bisection. Adding a workload never
// lowers any of these terms, nor the vacation the bound leaves out. A false answer says
// nothing: Admit decides. The bound must clear the budget by a microsecond (and a
// millionth of it), far more than the rounding by which the exact terms, computed
// differently, may fall short of the bound's, so that rounding never decides.
func (l *Load) Excludes(x *Candidate) bool {
	w, p := &x.W, l.p
	tol := w.Tolerance
	margin := time.Microsecond + tol/1_000_000
	if x.p != p || tol < 0 || tol >= Unbounded-margin {
		return false
	}
	_, tail := objectiveOf(w.Objective)
	f := l.floorState()
	// The shared pool with x: its runnable entities and CPUs are exact.
	n, m := f.runnable, f.pool
	if w.Dedicated {
		m = l.sums.cpus - (l.sums.exclusive + float64(hostCPUsOf(w)))
		if p.HostIOIsolated {
			m -= p.HostReservedCPUs
		}
	} else if w.VCPUs > 0 {
		n += float64(w.VCPUs)
	}
	var own float64
	switch {
	case w.Dedicated && m < 0: // newNodeState's dedicatedOver
		own = math.Inf(1)
	case !w.Dedicated && w.VCPUs > 0:
		own, _, _ = waitAtLeast(&f.all, n, m, tail, p.SchedulerGranularity)
	}
	totalRPS := l.sums.totalRPS + math.Max(0, float64(w.RPS))
	load := totalRPS * p.HostIOCostPerRequest.Seconds() / p.HostReservedCPUs
	// The host I/O path: its threads' wait for a CPU (the vacation) and the share of
	// its CPUs it keeps (avail, here an upper bound), as hostIOAt computes them.
	var vacation float64
	avail := 1.0
	if totalRPS > 0 && !p.HostIOIsolated {
		var c, P float64
		vacation, c, P = waitAtLeast(&f.io, n, m, tail, p.SchedulerGranularity)
		if c > 0 {
			avail = 1 - P*c/(c+1)
		}
	}
	var queue float64
	switch eff := load / avail; {
	case math.IsInf(vacation, 1) || eff >= 1: // unbounded wait or queue
		queue = math.Inf(1)
	case eff > tail && eff < 1-1e-6: // closer to 1 the bound is no tighter than rounding
		service := p.HostIOCostPerRequest.Seconds() / (p.HostReservedCPUs * avail)
		queue = service / mdOneRateAbove(eff) * math.Log(eff/tail) * (1 - 1e-8)
	}
	own += vacation
	total := min(Unbounded, seconds(x.head.sec)+seconds(own)+seconds(queue))
	if c := l.sums.correction; c != 1 {
		total = min(Unbounded, time.Duration(math.Round(float64(total)*c)))
	}
	return total > tol+margin
}

// mdOneRateAbove is an upper bound on the root x > 0 of rho(eˣ−1) = x (mdOneWait's decay
// rate), for 0 < rho < 1: since eˣ−1 ≥ x + x²/2 + x³/6, x²/6 + x/2 ≤ (1−rho)/rho, written
// to lose no precision as rho nears 1.
func mdOneRateAbove(rho float64) float64 {
	b := 2 * (1 - rho) / (3 * rho)
	return 3 * b / (math.Sqrt(0.25+b) + 0.5)
}
