package nic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// filterPrio is the priority (tc's pref) of isochron's u32 filters on its qdisc.
const filterPrio = 1

// Apply makes link's egress the schedule p: it reads what the link has and changes only
// what differs, so applying the same plan twice changes nothing the second time. It
// returns what it changed, one line each, for the log.
//
// It replaces the kernel's default root qdisc (handle 0:) with isochron's and reconciles
// isochron's own; a root qdisc that someone else put there is left alone and Apply fails.
// Classes, leaf FIFOs and filters of flows that p no longer has are removed. Apply works
// in the network namespace of the calling thread.
func Apply(link netlink.Link, p Schedule) (changes []string, err error) {
	if p.LinkRate <= 0 || p.Root.ID != handle(Major, rootMinor) {
		return nil, errors.New("applying an empty plan: compute it with Plan")
	}
	name, index := link.Attrs().Name, link.Attrs().Index
	defer func() {
		if err != nil {
			err = fmt.Errorf("uplink %s: %w", name, err)
		}
	}()
	did := func(format string, args ...any) { changes = append(changes, fmt.Sprintf(format, args...)) }

	qs, err := qdiscs(index)
	if err != nil {
		return changes, err
	}
	if err := ensureRoot(index, qs, did); err != nil {
		return changes, err
	}
	if err := ensureClasses(link, p, qs, did); err != nil {
		return changes, err
	}
	if err := ensureMarks(name, p, did); err != nil {
		return changes, err
	}
	return changes, nil
}

// ensureRoot makes isochron's HTB qdisc the link's root.
func ensureRoot(index int, qs []qdisc, did func(string, ...any)) error {
	want := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: index, Handle: handle(Major, 0), Parent: netlink.HANDLE_ROOT})
	want.Defcls = bestEffortMinor
	root, _ := rootOf(qs)
	switch {
	case isOurs(root):
		if root.defcls == want.Defcls {
			return nil
		}
		if err := netlink.QdiscChange(want); err != nil {
			return fmt.Errorf("setting the default class of qdisc %s: %w", HandleString(want.Handle), err)
		}
		did("qdisc htb %s: default class %x", HandleString(want.Handle), want.Defcls)
		return nil
	case root.kind != "" && root.handle>>16 != 0:
		return fmt.Errorf("its root qdisc is %s %s, not isochron's (htb %s): isochron only replaces the kernel's default qdisc; delete that one (tc qdisc del dev <link> root) if nothing needs it",
			root.kind, HandleString(root.handle), HandleString(want.Handle))
	}
	if err := netlink.QdiscReplace(want); err != nil {
		return fmt.Errorf("adding qdisc htb %s: %w", HandleString(want.Handle), err)
	}
	did("qdisc htb %s: added in place of the kernel's %s", HandleString(want.Handle), root.kind)
	return nil
}

func isOurs(q qdisc) bool {
	return q.kind == "htb" && q.handle == handle(Major, 0) && q.parent == netlink.HANDLE_ROOT
}

// ensureClasses reconciles the classes, their leaf FIFOs and the filters under
// isochron's qdisc: adds and changes first, so no flow is ever without its class, then
// removes what p no longer has.
func ensureClasses(link netlink.Link, p Schedule, qs []qdisc, did func(string, ...any)) error {
	index := link.Attrs().Index
	have := map[uint32]*netlink.HtbClass{}
	list, err := netlink.ClassList(link, handle(Major, 0))
	if err != nil {
		return fmt.Errorf("listing classes: %w", err)
	}
	for _, c := range list {
		if c, ok := c.(*netlink.HtbClass); ok && c.Handle>>16 == Major {
			have[c.Handle] = c
		}
	}
	classes := append([]Class{p.Root, p.BestEffort}, classesOf(p.Flows)...)
	for _, c := range classes {
		want := htbClass(index, c)
		got, ok := have[c.ID]
		switch {
		case !ok:
			if err := netlink.ClassAdd(want); err != nil {
				return fmt.Errorf("adding class %s: %w", HandleString(c.ID), err)
			}
			did("class %s: added (rate %s, ceil %s, prio %d)", HandleString(c.ID), bps(c.Rate), bps(c.Ceil), c.Prio)
		case !sameClass(got, want):
			if err := netlink.ClassChange(want); err != nil {
				return fmt.Errorf("changing class %s: %w", HandleString(c.ID), err)
			}
			did("class %s: changed (rate %s, ceil %s, prio %d)", HandleString(c.ID), bps(c.Rate), bps(c.Ceil), c.Prio)
		}
	}

	leaves := map[uint32]qdisc{}
	for _, q := range qs {
		leaves[q.parent] = q
	}
	for _, c := range classes[1:] {
		q, ok := leaves[c.ID]
		if ok && q.kind == "bfifo" && q.handle == c.Leaf() && q.limit == c.Queue {
			continue
		}
		if err := replaceFIFO(index, c.ID, c.Leaf(), c.Queue); err != nil {
			return err
		}
		did("qdisc bfifo %s under class %s: limit %d bytes", HandleString(c.Leaf()), HandleString(c.ID), c.Queue)
	}

	if err := ensureFilters(link, p.Flows, did); err != nil {
		return err
	}

	wanted := map[uint32]bool{}
	for _, c := range classes {
		wanted[c.ID] = true
	}
	for _, id := range sortedKeys(have) {
		if wanted[id] {
			continue
		}
		if err := netlink.ClassDel(have[id]); err != nil {
			return fmt.Errorf("removing class %s: %w", HandleString(id), err)
		}
		did("class %s: removed", HandleString(id))
	}
	return nil
}

func classesOf(fs []FlowClass) []Class {
	cs := make([]Class, len(fs))
	for i, f := range fs {
		cs[i] = f.Class
	}
	return cs
}

// htbClass is the netlink library's HTB class for c: rates in bytes/s, buckets in the
// kernel's scheduler ticks.
func htbClass(index int, c Class) *netlink.HtbClass {
	rate, ceil := uint64(c.Rate/8), uint64(c.Ceil/8)
	return &netlink.HtbClass{
		ClassAttrs: netlink.ClassAttrs{LinkIndex: index, Handle: c.ID, Parent: c.Parent},
		Rate:       rate,
		Ceil:       ceil,
		Buffer:     netlink.Xmittime(rate, c.Burst),
		Cbuffer:    netlink.Xmittime(ceil, c.Cburst),
		Quantum:    c.Quantum,
		Prio:       c.Prio,
	}
}

func sameClass(a, b *netlink.HtbClass) bool {
	return a.Parent == b.Parent && a.Rate == b.Rate && a.Ceil == b.Ceil && a.Buffer == b.Buffer && a.Cbuffer == b.Cbuffer &&
		a.Quantum == b.Quantum && a.Prio == b.Prio
}

// ensureFilters gives each flow a u32 filter that sends the frames with its source MAC to
// its class, and removes every other filter from isochron's qdisc.
func ensureFilters(link netlink.Link, flows []FlowClass, did func(string, ...any)) error {
	index := link.Attrs().Index
	list, err := netlink.FilterList(link, handle(Major, 0))
	if err != nil {
		return fmt.Errorf("listing filters: %w", err)
	}
	want := map[uint32]*netlink.U32{}
	for _, f := range flows {
		u := macFilter(index, f)
		want[u.Handle] = u
	}
	have := map[uint32]*netlink.U32{}
	for _, f := range list {
		a := f.Attrs()
		u, ok := f.(*netlink.U32)
		if ok && a.Handle&0xfff == 0 {
			continue // a u32 hash table, which goes with its last filter
		}
		if ok && a.Priority == filterPrio && a.Protocol == unix.ETH_P_ALL && want[a.Handle] != nil {
			have[a.Handle] = u
			continue
		}
		if err := netlink.FilterDel(f); err != nil {
			return fmt.Errorf("removing filter %s pref %d: %w", HandleString(a.Handle), a.Priority, err)
		}
		did("filter %s %x pref %d: removed", f.Type(), a.Handle, a.Priority)
	}
	for _, f := range flows {
		u := macFilter(index, f)
		got, ok := have[u.Handle]
		switch {
		case !ok:
			if err := netlink.FilterAdd(u); err != nil {
				return fmt.Errorf("adding the filter of %s: %w", f.Flow.Key, err)
			}
			did("filter u32 %x: src %s -> class %s (%s)", u.Handle, f.Flow.MAC, HandleString(u.ClassId), f.Flow.Key)
		case !sameFilter(got, u):
			// u32 keeps a filter's keys when it is replaced: a new one takes its place.
			if err := netlink.FilterDel(got); err != nil {
				return fmt.Errorf("removing the filter of %s to change it: %w", f.Flow.Key, err)
			}
			if err := netlink.FilterAdd(u); err != nil {
				return fmt.Errorf("changing the filter of %s: %w", f.Flow.Key, err)
			}
			did("filter u32 %x: src %s -> class %s (%s), changed", u.Handle, f.Flow.MAC, HandleString(u.ClassId), f.Flow.Key)
		}
	}
	return nil
}

// macFilter matches the frames whose source MAC is the flow's: u32 keys are relative to
// the network header, and on egress the Ethernet header is in front of it, its source
// address at -8 (four bytes) and -4 (two bytes), as tc's "match ether src" puts it.
// The filter's node number is the class's minor.
func macFilter(index int, f FlowClass) *netlink.U32 {
	mac := f.Flow.MAC
	return &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: index,
			Parent:    handle(Major, 0),
			Handle:    0x800<<20 | uint32(minor(f.Class.ID)),
			Priority:  filterPrio,
			Protocol:  unix.ETH_P_ALL,
		},
		ClassId: f.Class.ID,
		Sel: &nl.TcU32Sel{
			Flags: nl.TC_U32_TERMINAL,
			Keys: []nl.TcU32Key{
				{Mask: 0xffffffff, Val: binary.BigEndian.Uint32(mac[0:4]), Off: -8},
				{Mask: 0xffff0000, Val: uint32(binary.BigEndian.Uint16(mac[4:6])) << 16, Off: -4},
			},
		},
	}
}

func sameFilter(a, b *netlink.U32) bool {
	if a.ClassId != b.ClassId || a.Sel == nil || a.Sel.Flags&nl.TC_U32_TERMINAL == 0 || len(a.Sel.Keys) != len(b.Sel.Keys) {
		return false
	}
	for i, k := range a.Sel.Keys {
		w := b.Sel.Keys[i]
		if k.Mask != w.Mask || k.Val != w.Val || k.Off != w.Off || k.OffMask != w.OffMask {
			return false
		}
	}
	return true
}

// Remove takes isochron's schedule off link: its root qdisc (the kernel then attaches its
// default again) and its DSCP marking. A link without them is left as it is.
func Remove(link netlink.Link) (changes []string, err error) {
	name, index := link.Attrs().Name, link.Attrs().Index
	qs, err := qdiscs(index)
	if err != nil {
		return nil, fmt.Errorf("uplink %s: %w", name, err)
	}
	if root, ok := rootOf(qs); ok && isOurs(root) {
		q := &netlink.Htb{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: index, Handle: root.handle, Parent: netlink.HANDLE_ROOT}}
		if err := netlink.QdiscDel(q); err != nil {
			return nil, fmt.Errorf("uplink %s: removing qdisc htb %s: %w", name, HandleString(root.handle), err)
		}
		changes = append(changes, fmt.Sprintf("qdisc htb %s: removed", HandleString(root.handle)))
	}
	removed, err := removeMarks(name)
	if err != nil {
		return changes, fmt.Errorf("uplink %s: %w", name, err)
	}
	return append(changes, removed...), nil
}

// Programmed lists the links of the calling thread's network namespace whose root qdisc
// is isochron's, by name.
func Programmed() ([]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	var names []string
	for _, l := range links {
		qs, err := qdiscs(l.Attrs().Index)
		if err != nil {
			return nil, fmt.Errorf("link %s: %w", l.Attrs().Name, err)
		}
		if root, ok := rootOf(qs); ok && isOurs(root) {
			names = append(names, l.Attrs().Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// ClassStats are a class's counters since the class was created.
type ClassStats struct {
	// Bytes and Packets are what the class sent.
	Bytes, Packets uint64
	// Drops are packets its FIFO had no room for; Overlimits the times the class was
	// over its rate or ceiling when it had something to send.
	Drops, Overlimits uint64
	// Backlog is what waits in its FIFO now, in bytes and packets.
	Backlog, Queued uint64
}

// Counters are the counters of a plan's classes on a link.
type Counters struct {
	BestEffort ClassStats
	// Flows are the RT flows' classes', by key.
	Flows map[string]ClassStats
}

// Stats reads the counters of p's classes on link: what the feedback compares with each
// flow's deadline and bandwidth.
func Stats(link netlink.Link, p Schedule) (Counters, error) {
	list, err := netlink.ClassList(link, handle(Major, 0))
	if err != nil {
		return Counters{}, fmt.Errorf("uplink %s: listing classes: %w", link.Attrs().Name, err)
	}
	byID := map[uint32]ClassStats{}
	for _, c := range list {
		a := c.Attrs()
		s := ClassStats{}
		if st := a.Statistics; st != nil {
			if st.Basic != nil {
				s.Bytes, s.Packets = st.Basic.Bytes, uint64(st.Basic.Packets)
			}
			if st.Queue != nil {
				s.Drops, s.Overlimits = uint64(st.Queue.Drops), uint64(st.Queue.Overlimits)
				s.Backlog, s.Queued = uint64(st.Queue.Backlog), uint64(st.Queue.Qlen)
			}
		}
		byID[a.Handle] = s
	}
	var out Counters
	var ok bool
	if out.BestEffort, ok = byID[p.BestEffort.ID]; !ok {
		return Counters{}, fmt.Errorf("uplink %s: no best-effort class %s: apply the plan first", link.Attrs().Name, HandleString(p.BestEffort.ID))
	}
	out.Flows = make(map[string]ClassStats, len(p.Flows))
	for _, f := range p.Flows {
		s, ok := byID[f.Class.ID]
		if !ok {
			return Counters{}, fmt.Errorf("uplink %s: no class %s for %s: apply the plan first", link.Attrs().Name, HandleString(f.Class.ID), f.Flow.Key)
		}
		out.Flows[f.Flow.Key] = s
	}
	return out, nil
}

func sortedKeys[V any](m map[uint32]V) []uint32 {
	keys := make([]uint32, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
