package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// lab is the network inside the VM. The VM's root namespace is the node: a bridge (br0)
// with one port per sender, as a VM's tap, and the uplink (uplink0), the port by which
// the RT network leaves the node, where the agent's schedule goes. Each sender is a
// namespace of its own, as a guest. The uplink's peer is the wire: a namespace with a
// bridge whose other port (wire1) is the NIC and its line: netem serialising frames at
// the line rate behind a FIFO of wireQueue frames, in front of the receiver's namespace
// (far).
//
// The wire is what a real NIC is to the host: it serialises frames at its rate and queues
// what the host hands it faster. Without the agent, the uplink has the kernel's default
// (noqueue for a veth) and everything queues in the wire's FIFO, in arrival order. With
// the agent, HTB at the line rate keeps the queue in its classes, and the wire holds
// little more than the frame on the line.
type lab struct {
	root, wire, far netns.NsHandle
	senders         map[string]netns.NsHandle // by flow name
	uplink          netlink.Link
	// wireLink is wire1, in the wire namespace.
	wireLink netlink.Link
}

// buildLab makes the lab's namespaces and links, from the VM's root namespace.
func buildLab() (*lab, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	root, err := netns.Get()
	if err != nil {
		return nil, err
	}
	l := &lab{root: root, senders: map[string]netns.NsHandle{}}
	if err := noIPv6(); err != nil { // router solicitations and MLD reports are not traffic the lab wants
		return nil, err
	}
	host := &netlink.Handle{}
	br0 := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := host.LinkAdd(br0); err != nil {
		return nil, fmt.Errorf("br0: %w", err)
	}

	for _, f := range flows {
		ns, err := newNamespace(root)
		if err != nil {
			return nil, err
		}
		l.senders[f.Name] = ns
		port := "vm-" + f.Name
		if err := host.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: port, MasterIndex: br0.Index},
			PeerName: "eth0", PeerHardwareAddr: f.MAC, PeerNamespace: netlink.NsFd(ns)}); err != nil {
			return nil, fmt.Errorf("%s: %w", port, err)
		}
		if err := configure(ns, "eth0", f.Addr, &netlink.Neigh{IP: farAddr.AsSlice(), HardwareAddr: farMAC, State: netlink.NUD_PERMANENT, Family: unix.AF_INET}); err != nil {
			return nil, fmt.Errorf("sender %s: %w", f.Name, err)
		}
		if err := setUp(host, port); err != nil {
			return nil, err
		}
	}

	if l.wire, err = newNamespace(root); err != nil {
		return nil, err
	}
	if l.far, err = newNamespace(root); err != nil {
		return nil, err
	}
	if err := host.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "uplink0", MasterIndex: br0.Index},
		PeerName: "wire0", PeerNamespace: netlink.NsFd(l.wire)}); err != nil {
		return nil, fmt.Errorf("uplink0: %w", err)
	}
	if l.uplink, err = host.LinkByName("uplink0"); err != nil {
		return nil, err
	}
	// The bridge would flood frames to the receiver, which never sends: it is told where
	// the receiver is.
	if err := staticFDB(host, l.uplink, farMAC); err != nil {
		return nil, err
	}
	for _, name := range []string{"uplink0", "br0"} {
		if err := setUp(host, name); err != nil {
			return nil, err
		}
	}

	wire, err := netlink.NewHandleAt(l.wire, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	defer wire.Close()
	brw := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "brw"}}
	if err := wire.LinkAdd(brw); err != nil {
		return nil, fmt.Errorf("brw: %w", err)
	}
	if err := wire.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "wire1", MasterIndex: brw.Index},
		PeerName: "eth0", PeerHardwareAddr: farMAC, PeerNamespace: netlink.NsFd(l.far)}); err != nil {
		return nil, fmt.Errorf("wire1: %w", err)
	}
	wire0, err := wire.LinkByName("wire0")
	if err != nil {
		return nil, err
	}
	if err := wire.LinkSetMaster(wire0, brw); err != nil {
		return nil, err
	}
	if l.wireLink, err = wire.LinkByName("wire1"); err != nil {
		return nil, err
	}
	if err := staticFDB(wire, l.wireLink, farMAC); err != nil {
		return nil, err
	}
	// netem's rate serialises frames exactly: each leaves when the one before it has left
	// and its own bytes have gone at the line rate, times the VM's timers cannot stretch.
	line := netlink.NewNetem(netlink.QdiscAttrs{LinkIndex: l.wireLink.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		netlink.NetemQdiscAttrs{Rate64: lineRate / 8, Limit: wireQueue})
	if err := wire.QdiscAdd(line); err != nil {
		return nil, fmt.Errorf("the wire's netem: %w", err)
	}
	for _, name := range []string{"wire0", "wire1", "brw"} {
		if err := setUp(wire, name); err != nil {
			return nil, err
		}
	}
	if err := configure(l.far, "eth0", farAddr, nil); err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	return l, nil
}

// newNamespace is a new network namespace without IPv6; the thread goes back to root.
func newNamespace(root netns.NsHandle) (netns.NsHandle, error) {
	ns, err := netns.New()
	if err != nil {
		return 0, fmt.Errorf("new network namespace: %w", err)
	}
	err = noIPv6()
	if setErr := netns.Set(root); setErr != nil {
		return 0, fmt.Errorf("back to the root namespace: %w", setErr)
	}
	return ns, err
}

// noIPv6 turns IPv6 off in the thread's namespace, for the links made after.
func noIPv6() error {
	for _, c := range []string{"all", "default"} {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+c+"/disable_ipv6", []byte("1"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// configure gives ns's link name addr/24 and an optional neighbour, and brings it and lo
// up.
func configure(ns netns.NsHandle, name string, addr netip.Addr, neigh *netlink.Neigh) error {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
		return fmt.Errorf("address %s: %w", addr, err)
	}
	if neigh != nil {
		neigh.LinkIndex = link.Attrs().Index
		if err := h.NeighAdd(neigh); err != nil {
			return fmt.Errorf("neighbour %s: %w", net.IP(neigh.IP), err)
		}
	}
	for _, n := range []string{"lo", name} {
		if err := setUp(h, n); err != nil {
			return err
		}
	}
	return nil
}

func setUp(h *netlink.Handle, name string) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s up: %w", name, err)
	}
	return nil
}

// staticFDB tells port's bridge that mac is behind port.
func staticFDB(h *netlink.Handle, port netlink.Link, mac net.HardwareAddr) error {
	err := h.NeighAdd(&netlink.Neigh{LinkIndex: port.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_MASTER,
		State: netlink.NUD_NOARP, HardwareAddr: mac})
	if err != nil {
		return fmt.Errorf("fdb %s on %s: %w", mac, port.Attrs().Name, err)
	}
	return nil
}

// wireDrops is what the wire's FIFO has dropped since it was made.
func (l *lab) wireDrops() (uint64, error) {
	h, err := netlink.NewHandleAt(l.wire, unix.NETLINK_ROUTE)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	qs, err := h.QdiscList(l.wireLink)
	if err != nil {
		return 0, err
	}
	for _, q := range qs {
		if q.Type() == "netem" && q.Attrs().Statistics != nil && q.Attrs().Statistics.Queue != nil {
			return uint64(q.Attrs().Statistics.Queue.Drops), nil
		}
	}
	return 0, fmt.Errorf("no netem on the wire")
}
