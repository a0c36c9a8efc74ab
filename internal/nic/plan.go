package nic

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"isochron.io/isochron/internal/rtnet"
)

// Major is the major number of isochron's qdisc on an uplink (tc's "15c0:"): a root HTB
// qdisc with this handle is isochron's, any other root qdisc is not (except the kernel's
// default, handle 0:, which Apply replaces and Remove gives back).
const Major = 0x15c0

// The minor numbers of isochron's classes: the root class (the link), the best-effort
// class, and the flows' from firstFlowMinor up, in key order. Each flow's u32 filter has
// its class's minor as node number, and u32 node numbers are 12 bits: MaxFlows.
const (
	rootMinor       = 0x1
	bestEffortMinor = 0x2
	firstFlowMinor  = 0x10
	lastFlowMinor   = 0xfff
	// rootParent is the parent of the root class as the kernel has it: TC_H_ROOT.
	rootParent = 0xffffffff
	// leafMajor is added to a class's minor to give its leaf qdisc's major (0x2002...
	// 0x2fff): below the kernel's automatic handles (0x8000 up) and apart from Major.
	leafMajor = 0x2000
)

// MaxFlows is the number of RT flows one uplink can schedule.
const MaxFlows = lastFlowMinor - firstFlowMinor + 1

const (
	// maxFrame is the largest Ethernet frame as the qdiscs count it.
	maxFrame = rtnet.MaxFrameBytes
	// BestEffortQueue is the delay the best-effort class's FIFO holds at the link rate:
	// the default txqueuelen of 1000 frames of 1500 B at 1 Gbit/s, the queue the RTvNIC
	// study's NIC had.
	BestEffortQueue = 12 * time.Millisecond
	// minQueue is the smallest leaf FIFO, in bytes: a few frames.
	minQueue = 4 * maxFrame
	// minRate is the smallest rate HTB is given (it refuses 0): a flow without a minimum
	// bandwidth only borrows.
	minRate = 8_000
	// bestEffortShare is the floor of the best-effort class's rate, as a fraction of the
	// link (1/100): best effort is never starved outright.
	bestEffortShare = 100
	// maxQuantum is HTB's largest sensible quantum (it warns above it).
	maxQuantum = 200_000
)

// Flow is one RT-NIC whose traffic leaves the node by the uplink.
type Flow struct {
	// Key is the CrawlerVM's namespace/name.
	Key string
	// MAC is the RT-NIC's address: the host classifies the flow's frames by it.
	MAC net.HardwareAddr
	// Deadline is the flow's maximum transfer delay; it chooses the flow's class
	// (rtnet.ForDeadline). 0 means none: the last RT class.
	Deadline time.Duration
	// MinBandwidth is the bandwidth the flow is guaranteed, in bits/s.
	MinBandwidth int64
	// Raise is how many classes the feedback raised the flow above its deadline's.
	Raise int
}

// Schedule is an uplink's schedule, whole: what Apply makes the link's egress.
type Schedule struct {
	// LinkRate is the rate the schedule shapes the uplink to, in bits/s.
	LinkRate int64
	// Root is the class of the whole link.
	Root Class
	// BestEffort is the default class: everything no flow owns.
	BestEffort Class
	// Flows are the RT flows' classes, by key.
	Flows []FlowClass
}

// FlowClass is a flow with its place in the schedule.
type FlowClass struct {
	Flow Flow
	// RT is the flow's class of the RT network (deadline-monotonic, raised): its HTB
	// priority is RT.Rank and its packets are marked RT.DSCP.
	RT rtnet.Class
	// Class is the flow's HTB class.
	Class Class
}

// Class is one HTB class and its leaf FIFO.
type Class struct {
	// ID is the class's handle (major:minor); Parent its parent's.
	ID, Parent uint32
	// Rate is what HTB guarantees the class, Ceil what it may reach by borrowing, bits/s.
	Rate, Ceil int64
	// Burst and Cburst are the class's buckets at Rate and Ceil, in bytes.
	Burst, Cburst uint32
	// Quantum is what the class sends per round when it borrows beside classes of the
	// same priority, in bytes.
	Quantum uint32
	// Prio is HTB's priority: a class within its rate is served before every class of a
	// larger Prio. An RT flow's is its class's rank, best effort's rtnet.BestEffortRank.
	Prio uint32
	// Queue is the leaf FIFO's limit in bytes (bfifo); 0 for the root class, which has
	// none.
	Queue uint32
}

// Leaf is the handle of the class's leaf qdisc.
func (c Class) Leaf() uint32 { return handle(leafMajor+minor(c.ID), 0) }

// Plan computes the uplink's schedule for flows on a link of linkRate bits/s: a class per
// flow guaranteed its minimum bandwidth, with its deadline class's priority and the link
// as ceiling; a best-effort class with the rest of the link (at least 1/100 of it), after
// every RT class; class ids by key. It fails when the flows cannot all be guaranteed.
func Plan(linkRate int64, flows []Flow) (Schedule, error) {
	if linkRate <= 0 {
		return Schedule{}, fmt.Errorf("link rate %d bits/s: it must be positive", linkRate)
	}
	if len(flows) > MaxFlows {
		return Schedule{}, fmt.Errorf("%d RT flows on one uplink: it schedules at most %d", len(flows), MaxFlows)
	}
	flows = slices.Clone(flows)
	slices.SortFunc(flows, func(a, b Flow) int { return strings.Compare(a.Key, b.Key) })
	var sum int64
	for i, f := range flows {
		if err := validFlow(f); err != nil {
			return Schedule{}, err
		}
		if i > 0 && flows[i-1].Key == f.Key {
			return Schedule{}, fmt.Errorf("flow %s is given twice", f.Key)
		}
		for _, g := range flows[:i] {
			if bytes.Equal(g.MAC, f.MAC) {
				return Schedule{}, fmt.Errorf("flows %s and %s share the MAC %s: the host cannot tell their frames apart", g.Key, f.Key, f.MAC)
			}
		}
		sum += f.MinBandwidth
		if sum > linkRate {
			return Schedule{}, fmt.Errorf("the RT flows' minimum bandwidths add up to more than the link's %s (%s with %s): lower a flow's minimum bandwidth or move a crawler off the node",
				bps(linkRate), bps(sum), f.Key)
		}
	}

	root := handle(Major, rootMinor)
	p := Schedule{
		LinkRate: linkRate,
		Root:     class(root, rootParent, linkRate, linkRate, 0, 0),
		BestEffort: class(handle(Major, bestEffortMinor), root, max(linkRate-sum, linkRate/bestEffortShare, minRate), linkRate,
			uint32(rtnet.BestEffortRank), queueBytes(linkRate, BestEffortQueue)),
	}
	for i, f := range flows {
		rt := rtnet.ForDeadline(f.Deadline, f.Raise)
		rate := max(f.MinBandwidth, minRate)
		// The flow's FIFO holds what its guaranteed rate drains within its deadline: a
		// deeper queue only makes the packets behind late too.
		window := f.Deadline
		if window <= 0 {
			window = BestEffortQueue
		}
		p.Flows = append(p.Flows, FlowClass{
			Flow:  f,
			RT:    rt,
			Class: class(handle(Major, uint16(firstFlowMinor+i)), root, rate, linkRate, uint32(rt.Rank), queueBytes(rate, window)),
		})
	}
	return p, nil
}

func validFlow(f Flow) error {
	switch {
	case f.Key == "":
		return errors.New("a flow has no key")
	case len(f.MAC) != 6:
		return fmt.Errorf("flow %s: MAC %q is not a 48-bit Ethernet address", f.Key, f.MAC)
	case f.MAC[0]&1 != 0:
		return fmt.Errorf("flow %s: MAC %s is a multicast address", f.Key, f.MAC)
	case bytes.Equal(f.MAC, make([]byte, 6)):
		return fmt.Errorf("flow %s: MAC %s is all zeros", f.Key, f.MAC)
	case f.MinBandwidth < 0:
		return fmt.Errorf("flow %s: minimum bandwidth %d bits/s is negative", f.Key, f.MinBandwidth)
	}
	return nil
}

// class is an HTB class with its buckets and quantum derived from its rates.
func class(id, parent uint32, rate, ceil int64, prio, queue uint32) Class {
	return Class{
		ID: id, Parent: parent,
		Rate: rate, Ceil: ceil,
		Burst: burst(rate), Cburst: burst(ceil),
		// HTB's own choice (rate / r2q with r2q 10), kept within what it accepts quietly.
		Quantum: uint32(min(max(rate/8/10, maxFrame), maxQuantum)),
		Prio:    prio,
		Queue:   queue,
	}
}

// burst is the bucket of a class at rate bits/s (rtnet.BucketBytes: rtnet.BurstTime's
// worth, at least a frame), which the model's worst case counts too.
func burst(rate int64) uint32 {
	return uint32(rtnet.BucketBytes(rate))
}

// queueBytes is what rate bits/s sends in d, at least minQueue.
func queueBytes(rate int64, d time.Duration) uint32 {
	b := float64(rate) / 8 * d.Seconds()
	return uint32(max(minQueue, min(b, 1<<30)))
}

func handle(major, minor uint16) uint32 { return uint32(major)<<16 | uint32(minor) }

func minor(h uint32) uint16 { return uint16(h) }

// HandleString is tc's spelling of a handle: "15c0:10", "root".
func HandleString(h uint32) string {
	if h == rootParent {
		return "root"
	}
	return strconv.FormatUint(uint64(h>>16), 16) + ":" + strconv.FormatUint(uint64(h&0xffff), 16)
}

// bps formats bits/s for messages: "9.5 Mbit/s".
func bps(x int64) string {
	for _, u := range []struct {
		div  float64
		unit string
	}{{1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}} {
		if float64(x) >= u.div {
			return strconv.FormatFloat(float64(x)/u.div, 'g', 4, 64) + " " + u.unit
		}
	}
	return strconv.FormatInt(x, 10) + " bit/s"
}
