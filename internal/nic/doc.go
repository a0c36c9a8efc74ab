// Package nic is the host side of the RT network: the traffic control the NIC agent
// programs on a node's RT uplink, the interface by which the VMs' RT-NICs' traffic leaves
// the node (guest tap -> bridge -> uplink). It is the RTvNIC study's hypervisor scheduler
// in Linux's own queueing, with the classes of package rtnet, so that what the contention
// model's NIC term predicts is what the uplink does.
//
// Plan is pure: the flows (an RT-NIC's MAC, deadline, minimum bandwidth and raise) and the
// link rate in, the uplink's schedule out. Apply and Remove make a link's egress that
// schedule and take it off again; Stats reads the counters the feedback needs.
//
// # The schedule
//
// The root qdisc is HTB with isochron's handle (Major, tc's "15c0:"). Under one root class
// at the link rate, each flow has a leaf class whose rate is its minimum bandwidth and
// whose ceiling is the link, with HTB priority rtnet.ForDeadline(deadline, raise).Rank; the
// best-effort class, the default, has the rest of the link (at least 1/100 of it) and
// priority rtnet.BestEffortRank. HTB serves the classes that are within their rate in
// priority order and lends what they leave in priority order too, so an RT flow within
// its guaranteed bandwidth is always served before best-effort traffic, and the shorter
// its deadline the earlier. Each class has a small byte FIFO (bfifo): an RT flow's holds
// what its guaranteed rate drains within its deadline, best effort's BestEffortQueue at
// the link rate.
//
// # Classification by source MAC
//
// A u32 filter per flow on isochron's qdisc sends the frames whose source MAC is the
// flow's to its class. u32 rather than flower: it is in every kernel that has HTB (the
// project's development machines lack cls_flower but have cls_u32), so the same filters
// are exercised on the developer's kernel and on the distribution kernel of the network
// lab (hack/netlab), and the few flows of a node do not need flower's hashing. The key
// is the Ethernet header on egress, at offsets -8 and -4 from the network header, as tc's
// "match ether src" writes it; nothing the guest writes into its packets (DSCP, VLAN
// priority, socket priority) chooses the class.
//
// # DSCP marking on the host
//
// Each flow's IPv4 and IPv6 packets leave with their class's DSCP (rtnet), whatever the
// guest set, ECN kept, so that switches beyond the host that honour DiffServ keep the same
// order. tc's pedit action could do it, but the netlink library encodes pedit keys only
// for addresses and ports and reads none back, so a reconciliation could neither write
// nor compare a DSCP rewrite without hand-made netlink messages. nftables can, through
// github.com/google/nftables: a netdev table (Table) with one chain per uplink on its
// egress hook, which runs before the qdisc, with a rule per flow and family matching the
// source MAC and rewriting the DSCP bits (the IPv4 header checksum updated in the same
// write). The rules carry what they do as user data, by which Apply compares them, and a
// chain is rewritten in one nftables transaction. The egress hook needs Linux 5.16 or
// later with CONFIG_NETFILTER_EGRESS.
//
// # Ownership
//
// Apply replaces only the kernel's default root qdisc (handle 0:); a root qdisc someone
// else configured is never touched, and Apply fails saying so. Under isochron's qdisc
// everything is isochron's: classes, leaves and filters that the plan does not have are
// removed. Remove deletes isochron's root qdisc (the kernel attaches its default again)
// and the uplink's chain. Every function works in the network namespace of the calling
// thread.
//
// # Limits
//
// An SR-IOV virtual function bypasses the host's qdiscs altogether: its traffic is
// scheduled by the NIC, not here. A kernel without HTB, cls_u32 or nf_tables' egress hook
// cannot carry the schedule: Apply fails and the agent reports it. HTB on the root takes
// a multi-queue NIC's transmit path through one queue. A packet whose socket priority is
// set to one of isochron's class ids is classified by HTB before any filter (HTB's own
// rule); a VM's frames arrive with priority 0. Frames of a VM that marks its traffic EF
// itself but has no RT-NIC keep that mark: only the flows' packets are rewritten.
package nic
