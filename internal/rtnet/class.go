// Package rtnet is the RT network's schedule on a node's uplink, as the RTvNIC study's
// hypervisor ran it and isochron's NIC agent programs it: each RT-NIC's traffic in a
// class chosen by its deadline (deadline-monotonic: the shorter the deadline, the earlier
// the class), within its guaranteed bandwidth, ahead of best-effort traffic, and marked
// with the class's DSCP code point on the host. The contention model's NIC term and the
// agent both take their classes from here, so what the model predicts is what the agent
// configures.
package rtnet

import "time"

// DSCP is a DiffServ code point.
type DSCP struct {
	// Name is the per-hop behaviour's name (EF, AF41...).
	Name string
	// Value is the 6-bit code point.
	Value int
}

// Class is a priority class of the uplink's schedule.
type Class struct {
	// Rank orders the classes: 0 is served first. Best-effort traffic comes after every
	// class (BestEffortRank).
	Rank int
	// DSCP marks the class's packets, so that switches beyond the host that honour
	// DiffServ keep the same order.
	DSCP DSCP
	// UpTo is the longest deadline the class takes by default (0: no bound).
	UpTo time.Duration
}

// classes are the RT classes, first served first:
//
//	deadline <= 5ms    EF   (46)  expedited forwarding: real-time control traffic
//	deadline <= 20ms   AF41 (34)  low-latency, low-loss interactive traffic
//	deadline <= 100ms  AF31 (26)
//	longer             AF21 (18)  still above best effort (CS0)
var classes = [...]Class{
	{Rank: 0, DSCP: DSCP{"EF", 46}, UpTo: 5 * time.Millisecond},
	{Rank: 1, DSCP: DSCP{"AF41", 34}, UpTo: 20 * time.Millisecond},
	{Rank: 2, DSCP: DSCP{"AF31", 26}, UpTo: 100 * time.Millisecond},
	{Rank: 3, DSCP: DSCP{"AF21", 18}},
}

// Classes is the number of RT classes; ranks are 0 to Classes-1.
const Classes = len(classes)

// BestEffortRank is the rank of traffic that no RT-NIC owns.
const BestEffortRank = Classes

// BestEffort is the class of everything else on the uplink (DSCP CS0).
var BestEffort = Class{Rank: BestEffortRank, DSCP: DSCP{"CS0", 0}}

// ForDeadline is the class of an RT-NIC with deadline d, raised by raise steps (the
// feedback's: each missed deadline may raise a flow one class, never above the first).
// A negative raise lowers the class, never below the last RT class. A flow without a
// deadline (d <= 0) is in the last RT class.
func ForDeadline(d time.Duration, raise int) Class {
	rank := Classes - 1
	for _, c := range classes {
		if d > 0 && c.UpTo > 0 && d <= c.UpTo {
			rank = c.Rank
			break
		}
	}
	return classes[min(Classes-1, max(0, rank-raise))]
}
