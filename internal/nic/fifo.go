package nic

import (
	"encoding/binary"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// qdisc is a qdisc as a dump shows it. The netlink library reads neither a fifo's limit
// nor lets one be set, so qdiscs are listed, and leaf FIFOs added, with its nl package.
type qdisc struct {
	kind           string
	handle, parent uint32
	// limit is a bfifo's or pfifo's limit; defcls an HTB qdisc's default class.
	limit, defcls uint32
}

// qdiscs lists the qdiscs of the link with index.
func qdiscs(index int) ([]qdisc, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETQDISC, unix.NLM_F_DUMP)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(index)})
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWQDISC)
	if err != nil {
		return nil, fmt.Errorf("listing qdiscs: %w", err)
	}
	var qs []qdisc
	for _, m := range msgs {
		msg := nl.DeserializeTcMsg(m)
		if int(msg.Ifindex) != index {
			continue // older kernels dump every link's
		}
		attrs, err := nl.ParseRouteAttr(m[msg.Len():])
		if err != nil {
			return nil, fmt.Errorf("listing qdiscs: %w", err)
		}
		q := qdisc{handle: msg.Handle, parent: msg.Parent}
		var options []byte
		for _, a := range attrs {
			switch a.Attr.Type {
			case nl.TCA_KIND:
				q.kind = string(a.Value[:max(0, len(a.Value)-1)])
			case nl.TCA_OPTIONS:
				options = a.Value
			}
		}
		switch q.kind {
		case "bfifo", "pfifo":
			if len(options) >= 4 {
				q.limit = binary.NativeEndian.Uint32(options)
			}
		case "htb":
			nested, err := nl.ParseRouteAttr(options)
			if err != nil {
				return nil, fmt.Errorf("listing qdiscs: htb %s: %w", HandleString(q.handle), err)
			}
			for _, a := range nested {
				if a.Attr.Type == nl.TCA_HTB_INIT {
					q.defcls = nl.DeserializeTcHtbGlob(a.Value).Defcls
				}
			}
		}
		qs = append(qs, q)
	}
	return qs, nil
}

// replaceFIFO makes a bfifo of limit bytes with handle the qdisc of parent (a class),
// in place of whatever leaf it had.
func replaceFIFO(index int, parent, handle, limit uint32) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWQDISC, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(index), Handle: handle, Parent: parent})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("bfifo")))
	req.AddData(nl.NewRtAttr(nl.TCA_OPTIONS, binary.NativeEndian.AppendUint32(nil, limit))) // struct tc_fifo_qopt
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("bfifo %s under %s: %w", HandleString(handle), HandleString(parent), err)
	}
	return nil
}

// rootOf is the root qdisc among qs, if any.
func rootOf(qs []qdisc) (qdisc, bool) {
	for _, q := range qs {
		if q.parent == netlink.HANDLE_ROOT {
			return q, true
		}
	}
	return qdisc{}, false
}
