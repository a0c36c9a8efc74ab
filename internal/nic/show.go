package nic

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// Readback is what the kernel has on an uplink's egress, as far as isochron is concerned:
// the root qdisc and, when it is isochron's, the RT flows' classes and the filters that
// send frames to them. `nic-agent -show-uplink NAME` prints it as JSON (the agent's image
// holds no tc); the e2e suite checks a node's uplink with it.
type Readback struct {
	Link string `json:"link"`
	// Master is the bridge the link is a port of, empty for none.
	Master string `json:"master,omitempty"`
	// Root is the root qdisc, "htb 15c0:" or "noqueue 0:"; Ours says it is isochron's.
	Root string `json:"root"`
	Ours bool   `json:"ours"`
	// Flows are the HTB classes under isochron's qdisc that are neither its root class nor
	// its default (best-effort) class: the RT flows'.
	Flows []ReadClass `json:"flows,omitempty"`
	// Filters are isochron's u32 filters (hash tables left out).
	Filters []ReadFilter `json:"filters,omitempty"`
}

// ReadClass is one HTB class: rates in bits per second.
type ReadClass struct {
	Handle uint32 `json:"handle"`
	Rate   uint64 `json:"rate"`
	Ceil   uint64 `json:"ceil"`
	Prio   uint32 `json:"prio"`
}

// ReadFilter is one u32 filter: the class it sends to and its selector's keys.
type ReadFilter struct {
	Handle  uint32    `json:"handle"`
	ClassID uint32    `json:"classID"`
	Keys    []ReadKey `json:"keys,omitempty"`
}

// ReadKey is one 32-bit match of a u32 selector, at offset Off of the frame.
type ReadKey struct {
	Val  uint32 `json:"val"`
	Mask uint32 `json:"mask"`
	Off  int32  `json:"off"`
}

// Read reads what Readback holds of the link name in the calling thread's network
// namespace.
func Read(name string) (Readback, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return Readback{}, fmt.Errorf("uplink %s: %w", name, err)
	}
	r := Readback{Link: name}
	if m := l.Attrs().MasterIndex; m != 0 {
		if br, err := netlink.LinkByIndex(m); err == nil {
			r.Master = br.Attrs().Name
		}
	}
	qs, err := netlink.QdiscList(l)
	if err != nil {
		return r, fmt.Errorf("uplink %s: listing qdiscs: %w", name, err)
	}
	ours := handle(Major, 0)
	var defcls uint32
	for _, q := range qs {
		a := q.Attrs()
		if a.Parent != netlink.HANDLE_ROOT {
			continue
		}
		r.Root = q.Type() + " " + HandleString(a.Handle)
		if h, ok := q.(*netlink.Htb); ok && a.Handle == ours {
			r.Ours, defcls = true, h.Defcls
		}
	}
	if !r.Ours {
		return r, nil
	}
	classes, err := netlink.ClassList(l, ours)
	if err != nil {
		return r, fmt.Errorf("uplink %s: listing classes: %w", name, err)
	}
	for _, c := range classes {
		h, ok := c.(*netlink.HtbClass)
		if !ok || h.Parent == netlink.HANDLE_ROOT || h.Handle == handle(Major, uint16(defcls)) {
			continue
		}
		r.Flows = append(r.Flows, ReadClass{Handle: h.Handle, Rate: h.Rate * 8, Ceil: h.Ceil * 8, Prio: h.Prio})
	}
	filters, err := netlink.FilterList(l, ours)
	if err != nil {
		return r, fmt.Errorf("uplink %s: listing filters: %w", name, err)
	}
	for _, f := range filters {
		u, ok := f.(*netlink.U32)
		if !ok || u.Handle&0xfff == 0 {
			continue
		}
		rf := ReadFilter{Handle: u.Handle, ClassID: u.ClassId}
		if u.Sel != nil {
			for _, k := range u.Sel.Keys {
				rf.Keys = append(rf.Keys, ReadKey{Val: k.Val, Mask: k.Mask, Off: k.Off})
			}
		}
		r.Filters = append(r.Filters, rf)
	}
	return r, nil
}

// String is the readback in tc's words, one line.
func (r Readback) String() string {
	s := fmt.Sprintf("root qdisc %s", r.Root)
	for _, c := range r.Flows {
		s += fmt.Sprintf("; class %s rate %d bit/s ceil %d bit/s prio %d", HandleString(c.Handle), c.Rate, c.Ceil, c.Prio)
	}
	for _, f := range r.Filters {
		s += fmt.Sprintf("; filter u32 %x -> %s", f.Handle, HandleString(f.ClassID))
	}
	return s
}
