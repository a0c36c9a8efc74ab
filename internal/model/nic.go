package model

import (
	"math"
	"time"

	"isochron.io/isochron/internal/rtnet"
)

// nicState is the RT-NIC schedule of a node as the NIC agent programs it on the uplink:
// strict priority by class, each flow in the class of its deadline (rtnet.ForDeadline,
// deadline-monotonic: the RTvNIC study's EDF in a few classes), within each flow's
// guaranteed bandwidth, best-effort traffic last.
//
// Bandwidth: the flows' minimum bandwidths must fit the NIC capacity, or no flow's
// guarantee holds (every RT-NIC workload is infeasible, "nic-bandwidth").
//
// Deadline: a packet of flow i can find ahead of it everything that flows of its class
// or an earlier one may send within its deadline, plus one best-effort packet already on
// the wire (non-preemptive) and the best-effort class's HTB bucket, which HTB may release
// before it (rtnet.BucketBytes), all at the rate the agent shapes the link to:
//
//	d_i = (Σ_{j: class_j ≤ class_i} b_j(D_i) + L_BE + 8·bucket(C)) / C,  C = rtnet.ShapedRate(C_link)
//	b_j(D) = max(RequestBits × ⌈rps_j × D⌉, minBandwidth_j × D)
//
// b_j(D) is flow j's burst over a window D: its requests in that window, or what its
// guaranteed rate lets it send, whichever is larger. Infeasible ("nic-deadline") if
// d_i > D_i.
type nicState struct {
	sumBandwidth, capacity, linkRate float64
	over                             bool
	figures                          []nicFigures // by workload index
	flows                            []nicFlow    // build's scratch
}

// nicFlow is a flow with a deadline, for the schedule.
type nicFlow struct {
	idx           int
	rank          int
	deadline, rps float64
	bandwidth     float64
}

type nicFigures struct {
	has      bool
	delay    time.Duration
	feasible bool
	cause    string
	// backlogBits is what may queue ahead; flows how many flows share the priority.
	backlogBits float64
	flows       int
	deadline    time.Duration
}

// build schedules the RT-NICs of ws, reusing s's slices.
func (s *nicState) build(p Params, ws []Workload) {
	*s = nicState{
		// The agent cannot guarantee more than the rate it shapes the link to.
		capacity: float64(min(p.NICCapacityBitsPerSecond, rtnet.ShapedRate(p.LinkRateBitsPerSecond))),
		linkRate: float64(rtnet.ShapedRate(p.LinkRateBitsPerSecond)),
		figures:  s.figures[:0],
		flows:    s.flows[:0],
	}
	has := false
	for i := range ws {
		if ws[i].NIC != nil {
			has = true
			break
		}
	}
	if !has {
		s.figures = nil
		return // no RT-NIC on the node: nothing to schedule (and nothing to allocate)
	}
	for range ws {
		s.figures = append(s.figures, nicFigures{})
	}
	flows := s.flows
	defer func() { s.flows = flows[:0] }()
	for i := range ws {
		w := &ws[i]
		if w.NIC == nil {
			continue
		}
		bw := math.Max(0, float64(w.NIC.MinBandwidthBitsPerSecond))
		s.sumBandwidth += bw
		s.figures[i] = nicFigures{has: true, feasible: true, cause: CauseNICDeadline, deadline: w.NIC.Deadline}
		if w.NIC.Deadline > 0 {
			flows = append(flows, nicFlow{idx: i, rank: rtnet.ForDeadline(w.NIC.Deadline, w.NIC.Raise).Rank, deadline: w.NIC.Deadline.Seconds(),
				rps: math.Max(0, float64(w.RPS)), bandwidth: bw})
		}
	}
	s.over = s.sumBandwidth > s.capacity
	if s.over {
		for i := range s.figures {
			if s.figures[i].has {
				s.figures[i].delay, s.figures[i].feasible, s.figures[i].cause = Unbounded, false, CauseNICBandwidth
			}
		}
		return
	}
	// An insertion sort by class, then by what the sum adds (so that the sum does not
	// depend on the order of ws): a few flows, and no allocation.
	for a := 1; a < len(flows); a++ {
		for b := a; b > 0 && flows[b].before(flows[b-1]); b-- {
			flows[b], flows[b-1] = flows[b-1], flows[b]
		}
	}
	reqBits := float64(p.RequestBits)
	be := float64(p.BestEffortPacketBits) + 8*float64(rtnet.BucketBytes(rtnet.ShapedRate(p.LinkRateBitsPerSecond)))
	for a := range flows {
		d := flows[a].deadline
		backlog, n := 0.0, 0
		for b := range flows {
			if flows[b].rank > flows[a].rank {
				break
			}
			backlog += math.Max(reqBits*math.Ceil(flows[b].rps*d), flows[b].bandwidth*d)
			n++
		}
		delay := (backlog + be) / s.linkRate
		f := &s.figures[flows[a].idx]
		f.delay, f.backlogBits, f.flows = seconds(delay), backlog, n
		f.feasible = delay <= d
	}
}

// before orders flows by class, then by deadline, rate and bandwidth.
func (f nicFlow) before(g nicFlow) bool {
	switch {
	case f.rank != g.rank:
		return f.rank < g.rank
	case f.deadline != g.deadline:
		return f.deadline < g.deadline
	case f.rps != g.rps:
		return f.rps < g.rps
	}
	return f.bandwidth < g.bandwidth
}

func (s *nicState) flow(i int) nicFigures {
	if s.figures == nil {
		return nicFigures{feasible: true, cause: CauseNICDeadline}
	}
	f := s.figures[i]
	if !f.has {
		f.feasible, f.cause = true, CauseNICDeadline
	}
	return f
}
