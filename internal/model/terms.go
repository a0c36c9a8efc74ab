package model

import (
	"math"
	"time"
)

// nodeState is what every workload's prediction shares: the shared pool, the host I/O
// path's load and the RT-NIC schedule.
type nodeState struct {
	p Params
	// cpus is the node's CPUs; poolCPUs what is left for the shared pool after exclusive
	// CPUs (and the host I/O path's, when isolated).
	cpus, poolCPUs float64
	// exclusive is the CPUs dedicated workloads hold; dedicatedOver is set when they and an
	// isolated host I/O path need more than the node has.
	exclusive     float64
	dedicatedOver bool
	// entities are the busy probabilities of everything runnable on the shared pool (one
	// per shared vCPU, one per host I/O thread when not isolated), grouped by value,
	// largest first; runnable is their number.
	entities []group
	runnable float64
	// totalRPS is the node's total request rate; ioLoad the host I/O path's utilisation
	// (totalRPS × cost / reserved CPUs) and ioUtil one I/O thread's busy probability.
	totalRPS, ioLoad, ioUtil float64
	// nic is the RT-NIC schedule of nicWs, the workloads counted, built on the first
	// prediction of a workload with an RT-NIC (nicBuilt): without one, a workload's
	// prediction does not depend on it.
	nic      nicState
	nicWs    []Workload
	nicBuilt bool
	// io caches the host I/O figures per objective (they depend on nothing else).
	io []hostIOAtTail
	// correction is the node's calibration (Node.Correction), 1 for none.
	correction float64
}

func newNodeState(n Node, ws []Workload) *nodeState {
	s := &nodeState{}
	s.init(n, n.Params.WithDefaults())
	for i := range ws {
		s.count(&ws[i])
	}
	s.finish(ws)
	return s
}

// init starts the state of node n, whose Params with their defaults are p, with no
// workload counted.
func (s *nodeState) init(n Node, p Params) {
	*s = nodeState{p: p, cpus: n.CPUs, correction: 1, entities: s.entities[:0], io: s.io[:0],
		nic: nicState{figures: s.nic.figures[:0], flows: s.nic.flows[:0]}}
	if n.Correction > 0 && !math.IsInf(n.Correction, 0) {
		s.correction = n.Correction
	}
	if !(s.cpus > 0) || math.IsInf(s.cpus, 0) {
		s.cpus = 0
	}
}

// count adds w's request rate, exclusive CPUs and shared vCPUs to the state. The sums
// are of whole numbers, so they do not depend on the order workloads are counted in.
func (s *nodeState) count(w *Workload) {
	s.totalRPS += math.Max(0, float64(w.RPS))
	if w.Dedicated {
		s.exclusive += float64(hostCPUsOf(w))
	}
	if !w.Dedicated && w.VCPUs > 0 {
		s.entities, s.runnable = addEntities(s.entities, s.runnable, vcpuUtil(w, s.p), float64(w.VCPUs))
	}
}

// finish derives what the predictions share from the counted sums: the host I/O load,
// the shared pool and its entities (the host I/O threads added, sorted busiest first)
// and the RT-NIC schedule of ws, the workloads counted, in their order.
func (s *nodeState) finish(ws []Workload) {
	p := s.p
	s.ioLoad = s.totalRPS * p.HostIOCostPerRequest.Seconds() / p.HostReservedCPUs
	s.ioUtil = math.Min(1, s.ioLoad)

	s.poolCPUs = s.cpus - s.exclusive
	if p.HostIOIsolated {
		s.poolCPUs -= p.HostReservedCPUs
	}
	s.dedicatedOver = s.poolCPUs < 0
	if !p.HostIOIsolated {
		s.entities, s.runnable = addEntities(s.entities, s.runnable, s.ioUtil, math.Ceil(p.HostReservedCPUs))
	}
	sortGroups(s.entities)
	s.nic = nicState{capacity: float64(p.NICCapacityBitsPerSecond), linkRate: float64(p.LinkRateBitsPerSecond),
		figures: s.nic.figures[:0], flows: s.nic.flows[:0]}
	s.nicWs, s.nicBuilt = ws, false
}

// nicFlow is the RT-NIC figures of w, ws[i] of the workloads counted.
func (s *nodeState) nicFlow(i int, w *Workload) nicFigures {
	if w.NIC == nil {
		return nicFigures{feasible: true, cause: CauseNICDeadline}
	}
	if !s.nicBuilt {
		s.nic.build(s.p, s.nicWs)
		s.nicBuilt = true
	}
	return s.nic.flow(i)
}

// addEntities adds n runnable entities of busy probability u to the groups gs, of which
// there are runnable. There are a few distinct values per node: a linear search beats a
// map at these sizes and allocates nothing more.
func addEntities(gs []group, runnable, u, n float64) ([]group, float64) {
	for i := range gs {
		if gs[i].util == u {
			gs[i].count += n
			return gs, runnable + n
		}
	}
	return append(gs, group{util: u, count: n}), runnable + n
}

// sortGroups sorts groups of distinct busy probabilities, busiest first (an insertion
// sort: there are a few).
func sortGroups(gs []group) {
	for i := 1; i < len(gs); i++ {
		for j := i; j > 0 && gs[j].util > gs[j-1].util; j-- {
			gs[j], gs[j-1] = gs[j-1], gs[j]
		}
	}
}

func hostCPUsOf(w *Workload) int32 {
	if w.HostCPUs > 0 {
		return w.HostCPUs
	}
	return HostCPUs(max(w.VCPUs, 0), false)
}

// vcpuUtil is the probability a shared vCPU of w is busy: its mean utilisation.
func vcpuUtil(w *Workload, p Params) float64 {
	if w.VCPUs <= 0 {
		return 0
	}
	return math.Min(1, meanCPUs(w.RPS, p)/float64(w.VCPUs))
}

// headroom is the crawler's own vCPUs against its demand, in seconds.
//
// With r = peak demand at the tolerance window / vCPUs and s = CPUPerRequest:
//   - r < 1: the processor-sharing wait at the peak load, s·r/(1−r), capped at the
//     overload penalty;
//   - r ≥ 1: the overload penalty plus the overload episode w*, the longest window over
//     which the objective-percentile demand still exceeds the vCPUs (λc·F(w*) = V);
//   - mean demand ≥ vCPUs: unbounded.
type headroomFigures struct {
	mean, peak, r float64
	vcpus         int32
	sec           float64
}

func headroom(w *Workload, p Params) headroomFigures {
	lam := meanCPUs(w.RPS, p)
	h := headroomFigures{mean: lam, vcpus: w.VCPUs}
	if lam == 0 {
		return h
	}
	h.peak = lam * peakFactor(w.Tolerance, w.Objective, p)
	if w.VCPUs <= 0 {
		h.sec = math.Inf(1)
		return h
	}
	v := float64(w.VCPUs)
	h.r = h.peak / v
	pen := p.OverloadPenalty.Seconds()
	switch {
	case lam >= v:
		h.sec = math.Inf(1)
	case h.r < 1:
		s := p.CPUPerRequest.Seconds()
		h.sec = math.Min(pen, s*h.r/(1-h.r))
	default:
		// F(w) = 1 + a·(1s/w)^β ≤ V/λc  ⇔  w ≥ (a / (V/λc − 1))^(1/β) seconds.
		a := (p.PeakFactor1s - 1) * zScale(w.Objective)
		episode := math.Pow(a/(v/lam-1), 1/p.PeakExponent)
		h.sec = pen + math.Max(episode, w.Tolerance.Seconds())
	}
	return h
}

// contention is the wait for a CPU of one runnable entity of the shared pool whose own
// busy probability is self, in seconds, at the tail probability tail.
//
// n entities share m CPUs. If n ≤ m nothing waits. Otherwise the fullest CPUs hold c+1
// entities, c = ⌈n/m⌉−1, and since the scheduler migrates vCPUs over a run, every entity
// is taken to sit on one of them at the tail: it finds its CPU taken with probability
// P = 1 − Π(1−u) over the c busiest other entities, and then waits up to c timeslices.
// Its wait at the tail is c·G·(1 − tail/P) when P > tail, else 0.
type contentionFigures struct {
	n, m, c, P float64
	sec        float64
}

// group is a number of runnable entities with the same busy probability.
type group struct{ util, count float64 }

func (s *nodeState) contention(self, tail float64) contentionFigures {
	f := contentionFigures{n: s.runnable, m: s.poolCPUs}
	if f.n <= f.m {
		return f
	}
	if f.m <= 0 {
		f.P, f.sec = 1, math.Inf(1)
		return f
	}
	f.c = math.Min(math.Ceil(f.n/f.m)-1, f.n-1)
	// The c busiest entities other than this one: skip one entity of its own group.
	prod, skipped, left := 1.0, false, f.c
	for _, g := range s.entities {
		if left <= 0 {
			break
		}
		n := g.count
		if !skipped && g.util == self {
			skipped, n = true, n-1
		}
		take := math.Min(n, left)
		prod *= math.Pow(1-g.util, take)
		left -= take
	}
	f.P = 1 - prod
	if f.P > tail {
		f.sec = f.c * s.p.SchedulerGranularity.Seconds() * (1 - tail/f.P)
	}
	return f
}

// hostIO is the host I/O path's delays, in seconds: the wait for a CPU when its threads
// compete in the shared pool (a server vacation, counted under contention) and the
// queueing at its effective load.
//
// The path's load is ρ = totalRPS × HostIOCostPerRequest / HostReservedCPUs. When it is
// not isolated it loses the share a·= P·c/(c+1) of its CPUs to co-runners (it waits with
// probability P and then shares fairly with c of them), so ρeff = ρ/a and the service time
// per request is seff = cost/(reserved·a). The queue is M/D/1 (deterministic per-request
// work, Poisson-like arrivals from many crawlers); its waiting time at the tail is the
// Cramér–Lundberg approximation seff/x · ln(ρeff/tail), x solving ρeff(eˣ−1) = x. By the
// Fuhrmann–Cooper decomposition the vacation adds its own wait to that.
type hostIOFigures struct {
	load, avail, effLoad float64
	vacation             contentionFigures
	queueSec             float64
}

type hostIOAtTail struct {
	tail float64
	h    hostIOFigures
}

func (s *nodeState) hostIO(tail float64) hostIOFigures {
	for i := range s.io {
		if s.io[i].tail == tail {
			return s.io[i].h
		}
	}
	h := s.hostIOAt(tail)
	s.io = append(s.io, hostIOAtTail{tail: tail, h: h})
	return h
}

func (s *nodeState) hostIOAt(tail float64) hostIOFigures {
	h := hostIOFigures{load: s.ioLoad, avail: 1}
	if s.totalRPS == 0 {
		return h
	}
	if !s.p.HostIOIsolated {
		h.vacation = s.contention(s.ioUtil, tail)
		if math.IsInf(h.vacation.sec, 1) { // no CPU at all: counted as contention
			h.avail, h.effLoad = 0, math.Inf(1)
			return h
		}
		if h.vacation.c > 0 {
			h.avail = 1 - h.vacation.P*h.vacation.c/(h.vacation.c+1)
		}
	}
	h.effLoad = h.load / h.avail
	if h.effLoad >= 1 {
		h.queueSec = math.Inf(1)
		return h
	}
	service := s.p.HostIOCostPerRequest.Seconds() / (s.p.HostReservedCPUs * h.avail)
	h.queueSec = mdOneWait(h.effLoad, service, tail)
	return h
}

// mdOneWait is the waiting time of an M/D/1 queue with load rho and service time s that
// a share tail of requests exceed: P(W > t) ≈ rho·e^(−θt), θ = x/s, rho(eˣ−1) = x.
func mdOneWait(rho, s, tail float64) float64 {
	if rho <= tail || rho <= 0 {
		return 0
	}
	if rho >= 1 {
		return math.Inf(1)
	}
	g := func(x float64) float64 { return rho*math.Expm1(x) - x }
	lo, hi := 0.0, 1.0
	for g(hi) < 0 {
		lo, hi = hi, 2*hi
	}
	// g < 0 on (0, x*) and > 0 beyond: bisect a fixed number of times (deterministic).
	for range 64 {
		mid := (lo + hi) / 2
		if g(mid) < 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return s / hi * math.Log(rho/tail)
}

// predict combines the terms for one workload, ws[i] of the workloads the state counts;
// head is its headroom (headroom(w, s.p), which depends on nothing else).
func (s *nodeState) predict(i int, w *Workload, head headroomFigures, messages bool) Prediction {
	p := s.p
	objective, tail := objectiveOf(w.Objective)

	var own contentionFigures
	switch {
	case w.Dedicated && s.dedicatedOver:
		own = contentionFigures{n: s.runnable, m: s.poolCPUs, P: 1, sec: math.Inf(1)}
	case !w.Dedicated && w.VCPUs > 0:
		own = s.contention(vcpuUtil(w, p), tail)
	}
	io := s.hostIO(tail)
	nic := s.nicFlow(i, w)

	t := Terms{
		Headroom:   seconds(head.sec),
		Contention: seconds(own.sec + io.vacation.sec),
		HostIO:     seconds(io.queueSec),
		NIC:        nic.delay,
	}
	raw := min(Unbounded, t.Headroom+t.Contention+t.HostIO+t.NIC)
	total := raw
	if s.correction != 1 {
		total = min(Unbounded, time.Duration(math.Round(float64(raw)*s.correction)))
	}

	// The largest term names the cause; ties go to the first in this order.
	cause, largest := CauseNICBandwidth, time.Duration(-1)
	for _, c := range []struct {
		name string
		d    time.Duration
	}{
		{nic.cause, t.NIC},
		{CauseHostIO, t.HostIO},
		{CauseCPUContention, t.Contention},
		{CauseVCPUHeadroom, t.Headroom},
	} {
		if c.d > largest {
			cause, largest = c.name, c.d
		}
	}
	within := total <= w.Tolerance && nic.feasible
	if total <= w.Tolerance && !nic.feasible {
		cause = nic.cause // the error fits; the RT-NIC is what fails
	}
	pr := Prediction{Key: w.Key, Error: total, Uncorrected: raw, Correction: s.correction, Cause: cause, Within: within, Terms: t}
	if messages {
		pr.Message = s.message(w, objective, pr, head, own, io, nic)
	}
	return pr
}
