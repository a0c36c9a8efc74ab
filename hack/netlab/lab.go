package main

import (
	"net"
	"net/netip"
	"time"

	"isochron.io/isochron/internal/nic"
	"isochron.io/isochron/internal/rtnet"
)

// The lab is the RTvNIC study's setting in two steps (docs/dev/netlab.md, "Scaling"). First a
// link 100 times slower than the study's 1 Gbit/s, with its deadlines and real frame
// sizes: QEMU's software emulation cannot saturate 1 Gbit/s, and at 10 Mbit/s the
// non-preemptive best-effort frame on the wire (1.2 ms) is a real part of a 5 ms
// deadline, as the contention model's NIC term has it. Then every time stretched by
// scale (the rate divided by it, deadlines and periods multiplied, frames unchanged): the
// network's delays and the model's prediction scale exactly, while the emulated VM's own
// timing noise, a few milliseconds, does not.
// agentRate is the link rate the agent's schedule shapes the uplink to, as the NIC agent
// does (rtnet.ShapedRate): below the line rate, so that the queue forms in HTB's classes
// and not in the NIC's FIFO, which the uplink's qdisc cannot reorder (docs/dev/netlab.md,
// "The shaping rate").
var agentRate = rtnet.ShapedRate(lineRate)

const (
	scale = 10

	// lineRate is the wire's rate: the emulated NIC's line rate.
	lineRate = 10_000_000 / scale
	// wireQueue is the NIC's FIFO, in frames: 10 best-effort frames, 12 ms at 10 Mbit/s
	// as the default txqueuelen of 1000 frames is at the study's 1 Gbit/s.
	wireQueue = 10

	// beFrame is a best-effort frame (1500 B of IP, the Ethernet header); beRate is what
	// the best-effort sender offers: more than the line carries.
	beFrame = 1514
	beRate  = lineRate * 12 / 10

	// rtFrame is an RT request's frame (472 B of UDP payload).
	rtFrame = 514
	// headers are the Ethernet, IPv4 and UDP headers before a datagram's payload.
	headers = 14 + 20 + 8
)

// flow is one sender of the lab: its namespace, address and what it sends.
type flow struct {
	// Name is the flow's label in the table.
	Name string
	// Key is its CrawlerVM's key for the agent's plan; "" for best effort.
	Key string
	// Deadline and MinBandwidth are its RT-NIC's, Raise the classes its deadline's class
	// is raised by; Period is its sending period and Frame its frames' size in bytes
	// (best effort: paced at Rate bits/s instead).
	Deadline     time.Duration
	MinBandwidth int64
	Raise        int
	Period       time.Duration
	Frame        int
	Rate         int64
	// TOS is what the sender (the guest) marks its packets with.
	TOS  byte
	MAC  net.HardwareAddr
	Addr netip.Addr
	Port int
}

// rt is true for the RT flows.
func (f flow) rt() bool { return f.Key != "" }

// rtFlow is one of the study's RT flows, with its deadline and minimum bandwidth at the
// study's scale, in the lab's: the deadline multiplied by scale, the bandwidth divided by
// it, one request per deadline. rtnet's classes are bounded by absolute deadlines, so the
// flow is raised into the class of the study's deadline (the feedback's knob, Raise):
// the 5 ms flow in EF, the 10 ms flow in AF41, as in the study.
func rtFlow(name string, deadline time.Duration, bandwidth int64, n byte) flow {
	return flow{
		Name: name, Key: "lab/" + name,
		Deadline: deadline * scale, MinBandwidth: bandwidth / scale, Period: deadline * scale, Frame: rtFrame,
		Raise: rtnet.ForDeadline(deadline*scale, 0).Rank - rtnet.ForDeadline(deadline, 0).Rank,
		MAC:   net.HardwareAddr{0x02, 0, 0, 0, 0, n}, Addr: netip.AddrFrom4([4]byte{10, 9, 0, n}), Port: 5000 + int(n),
	}
}

// flows are the lab's senders: the study's two RT flows (named by the study's deadlines),
// unmarked by their guests, each sending one request per deadline within its guaranteed
// bandwidth, and a best-effort sender that offers more than the line and marks itself EF,
// as a VM trying to jump the queue would.
var flows = []flow{
	rtFlow("rt-5ms", 5*time.Millisecond, 1_000_000, 5),
	rtFlow("rt-10ms", 10*time.Millisecond, 500_000, 10),
	{
		Name: "best-effort", Frame: beFrame, Rate: beRate, TOS: 46 << 2,
		MAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x20}, Addr: netip.MustParseAddr("10.9.0.32"), Port: 5999,
	},
}

// The receiver, at the far end of the wire.
var (
	farMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	farAddr = netip.MustParseAddr("10.9.0.1")
)

// agentFlows are the RT flows as the NIC agent gives them to nic.Plan.
func agentFlows() []nic.Flow {
	var fs []nic.Flow
	for _, f := range flows {
		if f.rt() {
			fs = append(fs, nic.Flow{Key: f.Key, MAC: f.MAC, Deadline: f.Deadline, MinBandwidth: f.MinBandwidth, Raise: f.Raise})
		}
	}
	return fs
}
