package nic

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables/expr"
)

const (
	ms   = time.Millisecond
	mbit = 1_000_000
	gbit = 1_000_000_000
)

// flow is an RT flow whose MAC ends in n.
func flow(key string, n byte, deadline time.Duration, bandwidth int64) Flow {
	return Flow{Key: key, MAC: net.HardwareAddr{0x02, 0, 0, 0, 0, n}, Deadline: deadline, MinBandwidth: bandwidth}
}

func raised(f Flow, raise int) Flow {
	f.Raise = raise
	return f
}

// row is a class of a schedule as a test states it.
type row struct {
	ID, Key    string // Key: the flow's, "" for the root and best effort
	Rate, Ceil int64
	Prio       uint32
	Queue      uint32
	DSCP       string
}

func rows(s Schedule) []row {
	r := []row{
		{ID: HandleString(s.Root.ID), Rate: s.Root.Rate, Ceil: s.Root.Ceil, Prio: s.Root.Prio, Queue: s.Root.Queue},
		{ID: HandleString(s.BestEffort.ID), Rate: s.BestEffort.Rate, Ceil: s.BestEffort.Ceil, Prio: s.BestEffort.Prio, Queue: s.BestEffort.Queue, DSCP: "CS0"},
	}
	for _, f := range s.Flows {
		r = append(r, row{ID: HandleString(f.Class.ID), Key: f.Flow.Key, Rate: f.Class.Rate, Ceil: f.Class.Ceil, Prio: f.Class.Prio, Queue: f.Class.Queue, DSCP: f.RT.DSCP.Name})
	}
	return r
}

func TestPlan(t *testing.T) {
	cases := map[string]struct {
		link  int64
		flows []Flow
		want  []row
	}{
		"the RTvNIC study's two flows: EF and AF41 by deadline, best effort gets the rest": {
			link:  gbit,
			flows: []Flow{flow("bms/slow", 2, 10*ms, 100*mbit), flow("bms/fast", 1, 5*ms, 50*mbit)},
			want: []row{
				{ID: "15c0:1", Rate: gbit, Ceil: gbit},
				{ID: "15c0:2", Rate: 850 * mbit, Ceil: gbit, Prio: 4, Queue: 1_500_000, DSCP: "CS0"},
				// By key: bms/fast first. Its FIFO holds 5 ms at 50 Mbit/s.
				{ID: "15c0:10", Key: "bms/fast", Rate: 50 * mbit, Ceil: gbit, Prio: 0, Queue: 31_250, DSCP: "EF"},
				{ID: "15c0:11", Key: "bms/slow", Rate: 100 * mbit, Ceil: gbit, Prio: 1, Queue: 125_000, DSCP: "AF41"},
			},
		},
		"no flows: the link and best effort": {
			link: 10 * mbit,
			want: []row{
				{ID: "15c0:1", Rate: 10 * mbit, Ceil: 10 * mbit},
				{ID: "15c0:2", Rate: 10 * mbit, Ceil: 10 * mbit, Prio: 4, Queue: 15_000, DSCP: "CS0"},
			},
		},
		"a raise moves a flow one class up, its rate unchanged": {
			link:  gbit,
			flows: []Flow{raised(flow("bms/a", 1, 50*ms, 10*mbit), 1)},
			want: []row{
				{ID: "15c0:1", Rate: gbit, Ceil: gbit},
				{ID: "15c0:2", Rate: 990 * mbit, Ceil: gbit, Prio: 4, Queue: 1_500_000, DSCP: "CS0"},
				{ID: "15c0:10", Key: "bms/a", Rate: 10 * mbit, Ceil: gbit, Prio: 1, Queue: 62_500, DSCP: "AF41"},
			},
		},
		"flows that take the whole link leave best effort 1/100 of it": {
			link:  100 * mbit,
			flows: []Flow{flow("bms/a", 1, 5*ms, 60*mbit), flow("bms/b", 2, 20*ms, 40*mbit)},
			want: []row{
				{ID: "15c0:1", Rate: 100 * mbit, Ceil: 100 * mbit},
				{ID: "15c0:2", Rate: mbit, Ceil: 100 * mbit, Prio: 4, Queue: 150_000, DSCP: "CS0"},
				{ID: "15c0:10", Key: "bms/a", Rate: 60 * mbit, Ceil: 100 * mbit, Prio: 0, Queue: 37_500, DSCP: "EF"},
				{ID: "15c0:11", Key: "bms/b", Rate: 40 * mbit, Ceil: 100 * mbit, Prio: 1, Queue: 100_000, DSCP: "AF41"},
			},
		},
		"a flow without bandwidth or deadline borrows in the last RT class, with a few frames of FIFO": {
			link:  10 * mbit,
			flows: []Flow{flow("bms/a", 1, 0, 0)},
			want: []row{
				{ID: "15c0:1", Rate: 10 * mbit, Ceil: 10 * mbit},
				{ID: "15c0:2", Rate: 10 * mbit, Ceil: 10 * mbit, Prio: 4, Queue: 15_000, DSCP: "CS0"},
				{ID: "15c0:10", Key: "bms/a", Rate: 8_000, Ceil: 10 * mbit, Prio: 3, Queue: 6_072, DSCP: "AF21"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := Plan(tc.link, tc.flows)
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			if diff := cmp.Diff(tc.want, rows(s)); diff != "" {
				t.Errorf("classes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlanBuckets pins down the HTB parameters derived from the rates: buckets of
// BurstTime at the rate (at least a frame), quantum rate/8/10 within [1518, 200000].
func TestPlanBuckets(t *testing.T) {
	s, err := Plan(gbit, []Flow{flow("bms/a", 1, 5*ms, 10*mbit)})
	if err != nil {
		t.Fatal(err)
	}
	want := Schedule{
		LinkRate:   gbit,
		Root:       Class{ID: 0x15c00001, Parent: 0xffffffff, Rate: gbit, Ceil: gbit, Burst: 12_500, Cburst: 12_500, Quantum: 200_000},
		BestEffort: Class{ID: 0x15c00002, Parent: 0x15c00001, Rate: 990 * mbit, Ceil: gbit, Burst: 12_375, Cburst: 12_500, Quantum: 200_000, Prio: 4, Queue: 1_500_000},
		Flows: []FlowClass{{
			Flow:  flow("bms/a", 1, 5*ms, 10*mbit),
			Class: Class{ID: 0x15c00010, Parent: 0x15c00001, Rate: 10 * mbit, Ceil: gbit, Burst: 1518, Cburst: 12_500, Quantum: 125_000, Prio: 0, Queue: 6_250},
		}},
	}
	want.Flows[0].RT = s.Flows[0].RT // rtnet's, checked by TestPlan
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("Plan (-want +got):\n%s", diff)
	}
	if got := HandleString(s.Flows[0].Class.Leaf()); got != "2010:0" {
		t.Errorf("leaf qdisc of 15c0:10 = %s, want 2010:0", got)
	}
}

func TestPlanIsOrderFree(t *testing.T) {
	a := []Flow{flow("bms/c", 3, 5*ms, mbit), flow("bms/a", 1, 10*ms, mbit), flow("bms/b", 2, 50*ms, mbit)}
	b := []Flow{a[2], a[0], a[1]}
	sa, errA := Plan(gbit, a)
	sb, errB := Plan(gbit, b)
	if errA != nil || errB != nil {
		t.Fatalf("Plan: %v, %v", errA, errB)
	}
	if diff := cmp.Diff(sa, sb); diff != "" {
		t.Errorf("the order of the flows changed the schedule (-first +second):\n%s", diff)
	}
	if a[0].Key != "bms/c" {
		t.Errorf("Plan reordered its argument")
	}
}

func TestPlanRefuses(t *testing.T) {
	many := make([]Flow, MaxFlows+1)
	for i := range many {
		many[i] = Flow{Key: fmt.Sprintf("bms/%05d", i), MAC: net.HardwareAddr{0x02, 0, 0, 0, byte(i >> 8), byte(i)}}
	}
	cases := map[string]struct {
		link  int64
		flows []Flow
		want  string // a part of the error
	}{
		"minimum bandwidths over the link": {
			link:  100 * mbit,
			flows: []Flow{flow("bms/a", 1, 5*ms, 60*mbit), flow("bms/b", 2, 5*ms, 50*mbit)},
			want:  "add up to more than the link's 100 Mbit/s (110 Mbit/s with bms/b): lower a flow's minimum bandwidth",
		},
		"no link rate": {
			link: 0,
			want: "link rate 0 bits/s: it must be positive",
		},
		"more flows than classes": {
			link:  gbit,
			flows: many,
			want:  "4081 RT flows on one uplink: it schedules at most 4080",
		},
		"one flow twice": {
			link:  gbit,
			flows: []Flow{flow("bms/a", 1, 5*ms, mbit), flow("bms/a", 2, 5*ms, mbit)},
			want:  "flow bms/a is given twice",
		},
		"two flows, one MAC": {
			link:  gbit,
			flows: []Flow{flow("bms/a", 1, 5*ms, mbit), flow("bms/b", 1, 5*ms, mbit)},
			want:  "flows bms/a and bms/b share the MAC 02:00:00:00:00:01",
		},
		"a multicast MAC": {
			link:  gbit,
			flows: []Flow{{Key: "bms/a", MAC: net.HardwareAddr{0x01, 0, 0x5e, 0, 0, 1}}},
			want:  "flow bms/a: MAC 01:00:5e:00:00:01 is a multicast address",
		},
		"no MAC": {
			link:  gbit,
			flows: []Flow{{Key: "bms/a"}},
			want:  "flow bms/a: MAC \"\" is not a 48-bit Ethernet address",
		},
		"a negative bandwidth": {
			link:  gbit,
			flows: []Flow{flow("bms/a", 1, 5*ms, -1)},
			want:  "flow bms/a: minimum bandwidth -1 bits/s is negative",
		},
		"no key": {
			link:  gbit,
			flows: []Flow{flow("", 1, 5*ms, mbit)},
			want:  "a flow has no key",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Plan(tc.link, tc.flows)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Plan error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestMarkRules(t *testing.T) {
	s, err := Plan(gbit, []Flow{flow("bms/slow", 2, 10*ms, mbit), flow("bms/fast", 1, 5*ms, mbit)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range markRules("eth1", s) {
		got = append(got, r.id)
	}
	// Per flow and family, the packets over its reserved bandwidth (1 Mbit/s, a bucket
	// of its FIFO) first, re-marked best effort, then the rest with its class's DSCP.
	want := []string{
		"isochron bms/fast ip 02:00:00:00:00:01 over 125000 B/s burst 6072 B dscp CS0",
		"isochron bms/fast ip 02:00:00:00:00:01 dscp EF",
		"isochron bms/fast ip6 02:00:00:00:00:01 over 125000 B/s burst 6072 B dscp CS0",
		"isochron bms/fast ip6 02:00:00:00:00:01 dscp EF",
		"isochron bms/slow ip 02:00:00:00:00:02 over 125000 B/s burst 6072 B dscp CS0",
		"isochron bms/slow ip 02:00:00:00:00:02 dscp AF41",
		"isochron bms/slow ip6 02:00:00:00:00:02 over 125000 B/s burst 6072 B dscp CS0",
		"isochron bms/slow ip6 02:00:00:00:00:02 dscp AF41",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
}

// TestDSCPBits applies the marking rules' bitwise expressions to the first 16 bits of an
// IPv4 and an IPv6 header that are all ones: the DSCP becomes the class's; version,
// header length, ECN and flow label stay.
func TestDSCPBits(t *testing.T) {
	s, err := Plan(gbit, []Flow{flow("bms/ef", 1, 5*ms, mbit), flow("bms/af41", 2, 10*ms, mbit),
		flow("bms/af31", 3, 50*ms, mbit), flow("bms/af21", 4, time.Second, mbit)})
	if err != nil {
		t.Fatal(err)
	}
	dscp := map[string]byte{}
	for _, f := range s.Flows {
		dscp[f.Flow.Key] = byte(f.RT.DSCP.Value)
	}
	for _, r := range markRules("eth1", s) {
		f := strings.Fields(r.id)
		key, family := f[1], f[2]
		d := dscp[key]
		if f[len(f)-1] == "CS0" {
			d = 0 // the traffic over the flow's reserved bandwidth: best effort
			var e expr.Any
			for _, x := range r.exprs {
				if _, ok := x.(*expr.Objref); ok {
					e = x
				}
			}
			if e == nil {
				t.Errorf("%s: re-marks without a policer", r.id)
			}
		}
		var b *expr.Bitwise
		for _, e := range r.exprs {
			if e, ok := e.(*expr.Bitwise); ok {
				b = e
			}
		}
		if b == nil || b.Len != 2 {
			t.Fatalf("%s: no bitwise expression on 16 bits", r.id)
		}
		in := []byte{0xff, 0xff}
		out := make([]byte, len(in))
		for i := range in {
			out[i] = in[i]&b.Mask[i] ^ b.Xor[i]
		}
		want := map[string][]byte{
			"ip":  {0xff, d<<2 | 0x03}, // version and header length, TOS
			"ip6": {0xf0 | d>>2, d<<6 | 0x3f},
		}[family]
		if !bytes.Equal(out, want) {
			t.Errorf("%s: %#x becomes %#x, want %#x", r.id, in, out, want)
		}
	}
}
