package main

import (
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"isochron.io/isochron/controllers/nicagent"
)

func TestUplinkOf(t *testing.T) {
	cases := map[string]struct {
		ports []port
		want  string
		err   string
	}{
		"the one port that is no pod's or VM's": {ports: []port{{"veth1a2b", "veth"}, {"tap0", "tuntap"}, {"eth1", "device"}}, want: "eth1"},
		"a bond":                                {ports: []port{{"bond0", "bond"}, {"veth1", "veth"}}, want: "bond0"},
		"none":                                  {ports: []port{{"veth1", "veth"}}, err: "bridge br-rt has no port but VMs' and pods'"},
		"two":                                   {ports: []port{{"eth1", "device"}, {"eth2", "device"}}, err: "several uplink candidates (eth1, eth2)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := uplinkOf("br-rt", tc.ports)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("uplinkOf = %q, %v; want error %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("uplinkOf = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestHostProgramsALink: Apply puts isochron's schedule on a link, Programmed lists it,
// Stats reads its flows' counters, Apply of no flows takes it off; Port finds no uplink
// on a bridge of veths alone. In a network namespace of its own; skipped where the
// kernel cannot (make netlab runs package nic's tests on Debian's kernel).
func TestHostProgramsALink(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Skipf("no network namespaces: %v", err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Skipf("cannot create a network namespace (%v): this test needs CAP_NET_ADMIN", err)
	}
	defer func() { _ = netns.Set(orig); _ = ns.Close() }()

	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "uplink0"}, PeerName: "uplink0-peer"}); err != nil {
		t.Skipf("cannot create a veth pair: %v", err)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-rt"}}
	if err := netlink.LinkAdd(br); err != nil {
		t.Skipf("cannot create a bridge: %v", err)
	}
	for _, name := range []string{"uplink0", "uplink0-peer", "br-rt"} {
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	h := newHost()
	if _, err := h.Port("br-rt"); err == nil || !strings.Contains(err.Error(), "no port but") {
		t.Errorf("Port(br-rt) of a bridge without ports: %v", err)
	}

	mac, _ := net.ParseMAC("02:0f:00:00:00:01")
	flows := []nicagent.Flow{{Key: "bms/a", MAC: mac, Deadline: 5 * time.Millisecond, MinBandwidth: 10_000_000}}
	if err := h.Apply("uplink0", 100_000_000, flows); err != nil {
		t.Skipf("this kernel cannot take the schedule (%v): make netlab runs it on Debian's", err)
	}
	if got, err := h.Programmed(); err != nil || !slices.Contains(got, "uplink0") {
		t.Errorf("Programmed() = %v, %v; want uplink0 in it", got, err)
	}
	stats, err := h.Stats("uplink0")
	if _, ok := stats["bms/a"]; err != nil || !ok {
		t.Errorf("Stats(uplink0) = %v, %v; want bms/a's counters", stats, err)
	}
	if err := h.Apply("uplink0", 100_000_000, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.Programmed(); slices.Contains(got, "uplink0") {
		t.Errorf("Programmed() = %v after the last flow left", got)
	}
	if err := h.Apply("missing0", 100_000_000, flows); err == nil || !strings.Contains(err.Error(), "no interface missing0") {
		t.Errorf("Apply on a missing link: %v", err)
	}
}
