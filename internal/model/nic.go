package model

import (
	"math"
	"sort"
	"time"
)

// nicState is the RT-NIC schedule of a node: strict priority by deadline (the RTvNIC
// study's EDF and DSCP marking), within each flow's guaranteed bandwidth.
//
// Bandwidth: the flows' minimum bandwidths must fit the NIC capacity, or no flow's
// guarantee holds (every RT-NIC workload is infeasible, "nic-bandwidth").
//
// Deadline: a packet of flow i can find ahead of it everything that flows with a
// deadline no longer than its own may send within its deadline, plus one best-effort
// packet already on the wire (non-preemptive):
//
//	d_i = (Σ_{j: D_j ≤ D_i} b_j(D_i) + L_BE) / C_link
//	b_j(D) = max(RequestBits × ⌈rps_j × D⌉, minBandwidth_j × D)
//
// b_j(D) is flow j's burst over a window D: its requests in that window, or what its
// guaranteed rate lets it send, whichever is larger. Infeasible ("nic-deadline") if
// d_i > D_i.
type nicState struct {
	sumBandwidth, capacity, linkRate float64
	over                             bool
	figures                          []nicFigures // by workload index
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

func newNICState(p Params, ws []Workload) nicState {
	s := nicState{
		capacity: float64(p.NICCapacityBitsPerSecond),
		linkRate: float64(p.LinkRateBitsPerSecond),
	}
	for i := range ws {
		if ws[i].NIC != nil {
			s.figures = make([]nicFigures, len(ws))
			break
		}
	}
	if s.figures == nil {
		return s // no RT-NIC on the node: nothing to schedule (and nothing to allocate)
	}
	type flow struct {
		idx           int
		deadline, rps float64
		bandwidth     float64
	}
	var flows []flow
	for i := range ws {
		w := &ws[i]
		if w.NIC == nil {
			continue
		}
		bw := math.Max(0, float64(w.NIC.MinBandwidthBitsPerSecond))
		s.sumBandwidth += bw
		s.figures[i] = nicFigures{has: true, feasible: true, cause: CauseNICDeadline, deadline: w.NIC.Deadline}
		if w.NIC.Deadline > 0 {
			flows = append(flows, flow{idx: i, deadline: w.NIC.Deadline.Seconds(),
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
		return s
	}
	sort.SliceStable(flows, func(a, b int) bool { return flows[a].deadline < flows[b].deadline })
	reqBits, be := float64(p.RequestBits), float64(p.BestEffortPacketBits)
	for a := range flows {
		d := flows[a].deadline
		backlog, n := 0.0, 0
		for b := range flows {
			if flows[b].deadline > d {
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
	return s
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
