package nic

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// These tests program a veth pair in network namespaces of their own: they need
// CAP_NET_ADMIN and a kernel with HTB, cls_u32, bfifo and nftables' netdev egress hook.
// Elsewhere they skip, saying why; the network lab (make netlab) runs them on Debian's
// kernel.

// lab is a veth pair across two fresh network namespaces: up is the uplink, in the
// namespace of the test's (locked) thread, peer its far end.
type lab struct {
	up, peer netlink.Link
	upNS     netns.NsHandle
	peerNS   netns.NsHandle
}

const (
	upAddr   = "192.0.2.1/24"
	peerAddr = "192.0.2.2/24"
)

var fastMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x05}

// newLab locks the test's goroutine to its thread for good (the thread ends with it) and
// moves the thread into a new network namespace holding the uplink.
func newLab(t *testing.T) *lab {
	t.Helper()
	runtime.LockOSThread()
	upNS, err := netns.New()
	if err != nil {
		t.Skipf("cannot create a network namespace (%v): these tests need CAP_NET_ADMIN; make netlab runs them", err)
	}
	t.Cleanup(func() { upNS.Close() })
	peerNS, err := netns.New() // moves the thread; back to upNS below
	if err != nil {
		t.Fatalf("second network namespace: %v", err)
	}
	t.Cleanup(func() { peerNS.Close() })
	if err := netns.Set(upNS); err != nil {
		t.Fatalf("entering the uplink's namespace: %v", err)
	}
	l := &lab{upNS: upNS, peerNS: peerNS}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0", HardwareAddr: fastMAC}, PeerName: "peer0", PeerNamespace: netlink.NsFd(peerNS)}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Skipf("cannot create a veth pair (%v): make netlab runs these tests", err)
	}
	if l.up, err = netlink.LinkByName("up0"); err != nil {
		t.Fatal(err)
	}
	peer, err := netlink.NewHandleAt(peerNS, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if l.peer, err = peer.LinkByName("peer0"); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		h    *netlink.Handle
		link netlink.Link
		addr string
	}{{nil, l.up, upAddr}, {peer, l.peer, peerAddr}} {
		a, _ := netlink.ParseAddr(step.addr)
		h := step.h
		if h == nil {
			h = &netlink.Handle{}
		}
		if err := h.AddrAdd(step.link, a); err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(step.link); err != nil {
			t.Fatal(err)
		}
	}
	l.requireKernel(t)
	return l
}

// requireKernel skips the test on a kernel that lacks what the schedule needs.
func (l *lab) requireKernel(t *testing.T) {
	t.Helper()
	idx := l.up.Attrs().Index
	probe := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: idx, Handle: handle(0x100, 0), Parent: netlink.HANDLE_ROOT})
	if err := netlink.QdiscAdd(probe); err != nil {
		t.Skipf("this kernel has no HTB (%v): make netlab runs these tests on Debian's", err)
	}
	defer func() { _ = netlink.QdiscDel(probe) }()
	class := &netlink.HtbClass{ClassAttrs: netlink.ClassAttrs{LinkIndex: idx, Handle: handle(0x100, 1), Parent: handle(0x100, 0)}, Rate: 1000, Ceil: 1000}
	if err := netlink.ClassAdd(class); err != nil {
		t.Fatalf("HTB class: %v", err)
	}
	u32 := &netlink.U32{FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: handle(0x100, 0), Priority: 1, Protocol: unix.ETH_P_ALL}, ClassId: class.Handle}
	if err := netlink.FilterAdd(u32); err != nil {
		t.Skipf("this kernel has no cls_u32 (%v): make netlab runs these tests on Debian's", err)
	}
	if err := replaceFIFO(idx, class.Handle, handle(0x101, 0), 3000); err != nil {
		t.Skipf("this kernel has no bfifo (%v): make netlab runs these tests on Debian's", err)
	}
	c, err := nftables.New()
	if err == nil {
		table := c.AddTable(&nftables.Table{Family: nftables.TableFamilyNetdev, Name: "probe"})
		c.AddChain(&nftables.Chain{Name: "egress", Table: table, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookEgress,
			Priority: nftables.ChainPriorityFilter, Device: l.up.Attrs().Name})
		c.DelTable(table)
		err = c.Flush()
	}
	if err != nil {
		t.Skipf("this kernel has no nftables netdev egress hook (%v): make netlab runs these tests on Debian's", err)
	}
}

// state is what the uplink's egress carries, one line per object, as the tests state it.
func (l *lab) state(t *testing.T) []string {
	t.Helper()
	qs, err := qdiscs(l.up.Attrs().Index)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, q := range qs {
		s := fmt.Sprintf("qdisc %s %s", q.kind, HandleString(q.handle))
		switch q.kind {
		case "htb":
			s += fmt.Sprintf(" default %x", q.defcls)
		case "bfifo":
			s += fmt.Sprintf(" parent %s limit %d", HandleString(q.parent), q.limit)
		}
		lines = append(lines, s)
	}
	classes, err := netlink.ClassList(l.up, handle(Major, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		if c, ok := c.(*netlink.HtbClass); ok {
			lines = append(lines, fmt.Sprintf("class %s parent %s rate %s ceil %s prio %d", HandleString(c.Handle), HandleString(c.Parent),
				bps(int64(c.Rate)*8), bps(int64(c.Ceil)*8), c.Prio))
		}
	}
	filters, err := netlink.FilterList(l.up, handle(Major, 0))
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		t.Fatal(err)
	}
	for _, f := range filters {
		if u, ok := f.(*netlink.U32); ok && u.Handle&0xfff != 0 && u.Sel != nil && len(u.Sel.Keys) == 2 {
			k := u.Sel.Keys
			mac := net.HardwareAddr{byte(k[0].Val >> 24), byte(k[0].Val >> 16), byte(k[0].Val >> 8), byte(k[0].Val), byte(k[1].Val >> 24), byte(k[1].Val >> 16)}
			lines = append(lines, fmt.Sprintf("filter u32 %x src %s -> %s", u.Handle, mac, HandleString(u.ClassId)))
		}
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	if chain, err := findChain(c, l.up.Attrs().Name); err != nil {
		t.Fatal(err)
	} else if chain != nil {
		rules, err := c.GetRules(chain.Table, chain)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			lines = append(lines, "nft "+string(r.UserData))
		}
	}
	objs, err := c.GetNamedObjects(&nftables.Table{Family: nftables.TableFamilyNetdev, Name: Table})
	if err != nil && !errors.Is(err, unix.ENOENT) {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o, ok := o.(*nftables.NamedObj); ok {
			if lim, ok := o.Obj.(*expr.Limit); ok {
				lines = append(lines, fmt.Sprintf("nft limit %s over %v %d B/s burst %d B", o.Name, lim.Over, lim.Rate, lim.Burst))
			}
		}
	}
	slices.Sort(lines)
	return lines
}

func mustPlan(t *testing.T, link int64, flows ...Flow) Schedule {
	t.Helper()
	s, err := Plan(link, flows)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestApplyReconciles(t *testing.T) {
	l := newLab(t)
	fast := Flow{Key: "bms/fast", MAC: fastMAC, Deadline: 5 * ms, MinBandwidth: mbit}
	slow := flow("bms/slow", 0x0a, 10*ms, 2*mbit)

	steps := []struct {
		name    string
		flows   []Flow
		changed bool
		want    []string
	}{
		{
			name:    "two flows on a fresh veth: the kernel's noqueue replaced",
			flows:   []Flow{slow, fast},
			changed: true,
			want: []string{
				"class 15c0:1 parent root rate 10 Mbit/s ceil 10 Mbit/s prio 0",
				"class 15c0:10 parent 15c0:1 rate 1 Mbit/s ceil 10 Mbit/s prio 0",
				"class 15c0:11 parent 15c0:1 rate 2 Mbit/s ceil 10 Mbit/s prio 1",
				"class 15c0:2 parent 15c0:1 rate 7 Mbit/s ceil 10 Mbit/s prio 4",
				"filter u32 80000010 src 02:00:00:00:00:05 -> 15c0:10",
				"filter u32 80000011 src 02:00:00:00:00:0a -> 15c0:11",
				"nft isochron bms/fast ip 02:00:00:00:00:05 dscp EF",
				"nft isochron bms/fast ip 02:00:00:00:00:05 over 125000 B/s burst 6072 B dscp CS0",
				"nft isochron bms/fast ip6 02:00:00:00:00:05 dscp EF",
				"nft isochron bms/fast ip6 02:00:00:00:00:05 over 125000 B/s burst 6072 B dscp CS0",
				"nft isochron bms/slow ip 02:00:00:00:00:0a dscp AF41",
				"nft isochron bms/slow ip 02:00:00:00:00:0a over 250000 B/s burst 6072 B dscp CS0",
				"nft isochron bms/slow ip6 02:00:00:00:00:0a dscp AF41",
				"nft isochron bms/slow ip6 02:00:00:00:00:0a over 250000 B/s burst 6072 B dscp CS0",
				"nft limit police-up0-020000000005 over true 125000 B/s burst 6072 B",
				"nft limit police-up0-02000000000a over true 250000 B/s burst 6072 B",
				"qdisc bfifo 2002:0 parent 15c0:2 limit 15000",
				"qdisc bfifo 2010:0 parent 15c0:10 limit 6072",
				"qdisc bfifo 2011:0 parent 15c0:11 limit 6072",
				"qdisc htb 15c0:0 default 2",
			},
		},
		{
			name:  "the same flows again: nothing changes",
			flows: []Flow{fast, slow},
		},
		{
			name:    "bms/fast leaves: bms/slow takes 15c0:10, 15c0:11 and its filter and FIFO go",
			flows:   []Flow{slow},
			changed: true,
			want: []string{
				"class 15c0:1 parent root rate 10 Mbit/s ceil 10 Mbit/s prio 0",
				"class 15c0:10 parent 15c0:1 rate 2 Mbit/s ceil 10 Mbit/s prio 1",
				"class 15c0:2 parent 15c0:1 rate 8 Mbit/s ceil 10 Mbit/s prio 4",
				"filter u32 80000010 src 02:00:00:00:00:0a -> 15c0:10",
				"nft isochron bms/slow ip 02:00:00:00:00:0a dscp AF41",
				"nft isochron bms/slow ip 02:00:00:00:00:0a over 250000 B/s burst 6072 B dscp CS0",
				"nft isochron bms/slow ip6 02:00:00:00:00:0a dscp AF41",
				"nft isochron bms/slow ip6 02:00:00:00:00:0a over 250000 B/s burst 6072 B dscp CS0",
				"nft limit police-up0-02000000000a over true 250000 B/s burst 6072 B",
				"qdisc bfifo 2002:0 parent 15c0:2 limit 15000",
				"qdisc bfifo 2010:0 parent 15c0:10 limit 6072",
				"qdisc htb 15c0:0 default 2",
			},
		},
		{
			name:    "bms/slow raised one class: its priority and mark change",
			flows:   []Flow{raised(slow, 1)},
			changed: true,
			want: []string{
				"class 15c0:1 parent root rate 10 Mbit/s ceil 10 Mbit/s prio 0",
				"class 15c0:10 parent 15c0:1 rate 2 Mbit/s ceil 10 Mbit/s prio 0",
				"class 15c0:2 parent 15c0:1 rate 8 Mbit/s ceil 10 Mbit/s prio 4",
				"filter u32 80000010 src 02:00:00:00:00:0a -> 15c0:10",
				"nft isochron bms/slow ip 02:00:00:00:00:0a dscp EF",
				"nft isochron bms/slow ip 02:00:00:00:00:0a over 250000 B/s burst 6072 B dscp CS0",
				"nft isochron bms/slow ip6 02:00:00:00:00:0a dscp EF",
				"nft isochron bms/slow ip6 02:00:00:00:00:0a over 250000 B/s burst 6072 B dscp CS0",
				"nft limit police-up0-02000000000a over true 250000 B/s burst 6072 B",
				"qdisc bfifo 2002:0 parent 15c0:2 limit 15000",
				"qdisc bfifo 2010:0 parent 15c0:10 limit 6072",
				"qdisc htb 15c0:0 default 2",
			},
		},
	}
	for _, step := range steps {
		changes, err := Apply(l.up, mustPlan(t, 10*mbit, step.flows...))
		if err != nil {
			t.Fatalf("%s: Apply: %v", step.name, err)
		}
		if step.changed != (len(changes) > 0) {
			t.Errorf("%s: Apply changed %q", step.name, changes)
		}
		if step.want == nil {
			continue
		}
		if diff := cmp.Diff(step.want, l.state(t)); diff != "" {
			t.Errorf("%s: the uplink (-want +got):\n%s", step.name, diff)
		}
	}

	if got, err := Programmed(); err != nil || !slices.Equal(got, []string{"up0"}) {
		t.Errorf("Programmed() = %q, %v; want [up0]", got, err)
	}
	changes, err := Remove(l.up)
	if err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if diff := cmp.Diff([]string{"qdisc noqueue 0:0"}, l.state(t)); diff != "" {
		t.Errorf("after Remove (%q), the uplink (-want +got):\n%s", changes, diff)
	}
	if got, err := Programmed(); err != nil || len(got) != 0 {
		t.Errorf("after Remove, Programmed() = %q, %v; want none", got, err)
	}
	if changes, err := Remove(l.up); err != nil || len(changes) > 0 {
		t.Errorf("Remove again = %q, %v; want nothing to do", changes, err)
	}
}

func TestApplyLeavesForeignRoot(t *testing.T) {
	l := newLab(t)
	// Someone's own HTB, with another handle: the same kind is not enough.
	theirs := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: l.up.Attrs().Index, Handle: handle(1, 0), Parent: netlink.HANDLE_ROOT})
	theirs.Defcls = 0x30
	if err := netlink.QdiscAdd(theirs); err != nil {
		t.Fatal(err)
	}
	_, err := Apply(l.up, mustPlan(t, 10*mbit))
	want := "uplink up0: its root qdisc is htb 1:0, not isochron's (htb 15c0:0)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Apply error = %v, want one containing %q", err, want)
	}
	if diff := cmp.Diff([]string{"qdisc htb 1:0 default 30"}, l.state(t)); diff != "" {
		t.Errorf("the uplink (-want +got):\n%s", diff)
	}
	if changes, err := Remove(l.up); err != nil || len(changes) > 0 {
		t.Errorf("Remove = %q, %v; want nothing to do", changes, err)
	}
}

// TestApplyClassifiesAndMarks sends a flow's packets unmarked over the uplink: they leave
// by the flow's class, marked EF.
func TestApplyClassifiesAndMarks(t *testing.T) {
	l := newLab(t)
	s := mustPlan(t, 10*mbit, Flow{Key: "bms/fast", MAC: fastMAC, Deadline: 5 * ms, MinBandwidth: mbit})
	if _, err := Apply(l.up, s); err != nil {
		t.Fatal(err)
	}

	// The receiver lives in the peer's namespace: the socket stays there once made.
	if err := netns.Set(l.peerNS); err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("192.0.2.2"), Port: 9000})
	if setErr := netns.Set(l.upNS); setErr != nil {
		t.Fatal(setErr)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1) })
	if err != nil {
		t.Fatal(err)
	}
	send, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP("192.0.2.2"), Port: 9000})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()

	const n = 20
	for i := range n {
		if _, err := fmt.Fprintf(send, "packet %d", i); err != nil {
			t.Fatal(err)
		}
	}
	buf, oob := make([]byte, 2048), make([]byte, 128)
	for i := range n {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, oobn, _, _, err := conn.ReadMsgUDP(buf, oob)
		if err != nil {
			t.Fatalf("packet %d of %d: %v", i+1, n, err)
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) == 0 || msgs[0].Header.Type != unix.IP_TOS {
			t.Fatalf("packet %d: no IP_TOS (%v)", i+1, err)
		}
		if dscp := msgs[0].Data[0] >> 2; dscp != 46 {
			t.Errorf("packet %d arrived with DSCP %d, want EF (46)", i+1, dscp)
		}
	}
	counters, err := Stats(l.up, s)
	if err != nil {
		t.Fatal(err)
	}
	if got := counters.Flows["bms/fast"].Packets; got < n {
		t.Errorf("class of bms/fast sent %d packets, want at least %d", got, n)
	}
	if got := counters.BestEffort.Packets; got >= n {
		t.Errorf("best-effort class sent %d packets: the flow's were not classified by its MAC", got)
	}
}

// A guest that sends more than its RT-NIC reserved keeps its class's DSCP for its
// reserved bandwidth only: the excess leaves the host marked best effort (CS0), so that
// switches beyond the host do not give it the priority of the reservation. The flow
// reserves 1 Mbit/s and sends about 4 Mbit/s of 1000-byte datagrams for two seconds.
// nftables' limit holds a second of its rate besides its burst, so the reservation's
// marks carry rate x (time + 1 s) + burst.
func TestMarksArePolicedToTheReservedBandwidth(t *testing.T) {
	l := newLab(t)
	const reserved = mbit
	s := mustPlan(t, 10*mbit, Flow{Key: "bms/greedy", MAC: fastMAC, Deadline: 5 * ms, MinBandwidth: reserved})
	if _, err := Apply(l.up, s); err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(l.peerNS); err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("192.0.2.2"), Port: 9001})
	if setErr := netns.Set(l.upNS); setErr != nil {
		t.Fatal(setErr)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadBuffer(4 << 20)
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1) })
	if err != nil {
		t.Fatal(err)
	}
	send, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP("192.0.2.2"), Port: 9001})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()

	payload := make([]byte, 1000)
	const frame = 1000 + 8 + 20 + 14 // UDP, IPv4 and Ethernet headers: what the policer counts
	start := time.Now()
	sent := 0
	for time.Since(start) < 2*time.Second {
		for range 5 { // 5 datagrams every 10 ms: about 4 Mbit/s
			if _, err := send.Write(payload); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		time.Sleep(10 * time.Millisecond) // paces the traffic; waits for nothing
	}
	elapsed := time.Since(start)

	marks := map[byte]int{}
	buf, oob := make([]byte, 2048), make([]byte, 128)
	for range sent {
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, oobn, _, _, err := conn.ReadMsgUDP(buf, oob)
		if err != nil {
			break // a datagram the FIFO dropped: the counts below say what arrived
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) == 0 || msgs[0].Header.Type != unix.IP_TOS {
			t.Fatalf("no IP_TOS (%v)", err)
		}
		marks[msgs[0].Data[0]>>2]++
	}
	ef, cs0 := marks[46], marks[0]
	t.Logf("sent %d datagrams in %s (%.1f Mbit/s); arrived EF %d, CS0 %d, other %v", sent, elapsed.Round(time.Millisecond),
		float64(sent*frame*8)/elapsed.Seconds()/1e6, ef, cs0, marks)
	if ef+cs0 != len(marks) && len(marks) > 2 {
		t.Errorf("marks other than EF and CS0: %v", marks)
	}
	// Within the reservation and its bucket (one datagram of slack), and at least half of
	// what the reservation carries in the time.
	pol := policerOf("up0", s.Flows[0])
	most := (float64(reserved)/8*(elapsed.Seconds()+1) + float64(pol.burstBytes)) / frame
	least := float64(reserved) / 8 * elapsed.Seconds() / frame / 2
	if float64(ef) > most+1 || float64(ef) < least {
		t.Errorf("%d datagrams kept EF; the reservation and its bucket carry %.0f in %s (at least %.0f expected)", ef, most, elapsed.Round(time.Millisecond), least)
	}
	if cs0 == 0 {
		t.Error("no datagram over the reservation was re-marked best effort")
	}
}
