package nic

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Table is the nftables table (family netdev) that holds isochron's DSCP marking: one
// chain per uplink, on the uplink's egress hook.
const Table = "isochron"

// markChain is the name of link's chain in Table.
func markChain(link string) string { return "egress-" + link }

// markRule is one rule of an uplink's chain, before it has a table and chain.
type markRule struct {
	// id says what the rule does; it is the rule's user data, by which Apply compares
	// what the chain has with what it should have.
	id    string
	exprs []expr.Any
}

// policer is a flow's named limit object in Table: its reserved bandwidth and bucket, in
// bytes. It matches the packets over them (nft's "limit rate over").
type policer struct {
	name        string
	bytesPerSec uint64
	burstBytes  uint32
}

// policerOf is the policer of flow f on link: its HTB class's guaranteed rate, and as
// burst what its leaf FIFO holds (what that rate drains within the flow's deadline), at
// least the class's own bucket: a burst the reservation carries in time keeps its mark.
// nftables' limit adds a second of its rate to the burst (its bucket is rate x unit +
// burst, and its smallest unit is the second), so over any time T a flow's marks carry
// at most rate x (T + 1 s) + burst.
func policerOf(link string, f FlowClass) policer {
	return policer{
		name:        policerPrefix(link) + strings.ReplaceAll(f.Flow.MAC.String(), ":", ""),
		bytesPerSec: uint64(f.Class.Rate / 8),
		burstBytes:  max(f.Class.Burst, f.Class.Queue),
	}
}

// markRules are the rules that set the DSCP of each flow's IPv4 and IPv6 packets by the
// flow's source MAC, keeping the ECN bits: its class's DSCP for the traffic within its
// reserved bandwidth, best effort's (CS0) for what exceeds it. The marks are policed so
// that a guest sending more than it reserved does not carry its class's priority beyond
// the host for the excess: a flow's two families share one policer (policerOf), and a
// packet over it is re-marked CS0 and leaves the chain.
func markRules(link string, p Schedule) []markRule {
	var rs []markRule
	for _, f := range p.Flows {
		dscp := byte(f.RT.DSCP.Value)
		mac := []byte(f.Flow.MAC)
		pol := policerOf(link, f)
		over := fmt.Sprintf("over %d B/s burst %d B", pol.bytesPerSec, pol.burstBytes)
		rs = append(rs,
			markRule{
				id:    fmt.Sprintf("isochron %s ip %s %s dscp CS0", f.Flow.Key, f.Flow.MAC, over),
				exprs: matchFlow(unix.ETH_P_IP, mac, concat(overPolicer(pol), setIPv4DSCP(0), accept())...),
			},
			markRule{
				id:    fmt.Sprintf("isochron %s ip %s dscp %s", f.Flow.Key, f.Flow.MAC, f.RT.DSCP.Name),
				exprs: matchFlow(unix.ETH_P_IP, mac, setIPv4DSCP(dscp)...),
			},
			markRule{
				id:    fmt.Sprintf("isochron %s ip6 %s %s dscp CS0", f.Flow.Key, f.Flow.MAC, over),
				exprs: matchFlow(unix.ETH_P_IPV6, mac, concat(overPolicer(pol), setIPv6DSCP(0), accept())...),
			},
			markRule{
				id:    fmt.Sprintf("isochron %s ip6 %s dscp %s", f.Flow.Key, f.Flow.MAC, f.RT.DSCP.Name),
				exprs: matchFlow(unix.ETH_P_IPV6, mac, setIPv6DSCP(dscp)...),
			},
		)
	}
	return rs
}

// policers are the named limit objects markRules refer to, one per flow.
func policers(link string, p Schedule) []policer {
	out := make([]policer, 0, len(p.Flows))
	for _, f := range p.Flows {
		out = append(out, policerOf(link, f))
	}
	return out
}

// overPolicer matches the packets over pol ("limit name <pol>": the object's own
// "rate over").
func overPolicer(pol policer) []expr.Any {
	return []expr.Any{&expr.Objref{Type: int(nftables.ObjTypeLimit), Name: pol.name}}
}

func concat(parts ...[]expr.Any) []expr.Any { return slices.Concat(parts...) }

func accept() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }

// setIPv4DSCP writes dscp into the TOS byte, keeping ECN. The TOS byte (DSCP in its top
// six bits, ECN below) is written with the byte before it: the header checksum (at
// offset 10) is updated by 16-bit words, so the write is one aligned word, as nft writes
// "ip dscp set".
func setIPv4DSCP(dscp byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 2},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 2, Mask: []byte{0xff, 0x03}, Xor: []byte{0, dscp << 2}},
		&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 2,
			CsumType: expr.CsumTypeInet, CsumOffset: 10},
	}
}

// setIPv6DSCP writes dscp into the traffic class, keeping ECN. The first 16 bits hold
// version (4), DSCP (6), ECN (2) and 4 of the flow label's 20; IPv6 has no header
// checksum, and the traffic class is in no pseudo-header.
func setIPv6DSCP(dscp byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 2},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 2, Mask: []byte{0xf0, 0x3f}, Xor: []byte{dscp >> 2, dscp << 6}},
		&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 2},
	}
}

// matchFlow is "meta protocol <ethertype> ether saddr <mac> counter" followed by then.
func matchFlow(ethertype uint16, mac []byte, then ...expr.Any) []expr.Any {
	return append([]expr.Any{
		&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(ethertype >> 8), byte(ethertype)}},
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: mac},
		&expr.Counter{},
	}, then...)
}

// ensureMarks makes link's chain in Table hold exactly p's marking rules. The chain is
// rewritten whole, in one transaction, when any rule differs.
func ensureMarks(link string, p Schedule, did func(string, ...any)) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyNetdev, Name: Table}
	want := markRules(link, p)
	chain, err := findChain(c, link)
	if err != nil {
		return err
	}
	if chain != nil {
		rules, err := c.GetRules(table, chain)
		if err != nil {
			return fmt.Errorf("nftables: listing chain %s: %w", chain.Name, err)
		}
		if slices.EqualFunc(rules, want, func(r *nftables.Rule, w markRule) bool { return string(r.UserData) == w.id }) {
			return nil
		}
		c.FlushChain(chain)
		// The policers go with the rules that referred to them, in the same transaction.
		if err := delPolicers(c, table, link); err != nil {
			return err
		}
	} else {
		c.AddTable(table)
		chain = c.AddChain(&nftables.Chain{
			Name:     markChain(link),
			Table:    table,
			Type:     nftables.ChainTypeFilter,
			Hooknum:  nftables.ChainHookEgress,
			Priority: nftables.ChainPriorityFilter,
			Device:   link,
		})
	}
	for _, pol := range policers(link, p) {
		c.AddObj(&nftables.NamedObj{Table: table, Name: pol.name, Type: nftables.ObjTypeLimit,
			Obj: &expr.Limit{Type: expr.LimitTypePktBytes, Rate: pol.bytesPerSec, Unit: expr.LimitTimeSecond, Burst: pol.burstBytes, Over: true}})
	}
	for _, r := range want {
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: r.exprs, UserData: []byte(r.id)})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: writing chain %s of table netdev %s: %w", markChain(link), Table, err)
	}
	did("nftables netdev %s chain %s: %d DSCP rules, %d policers", Table, markChain(link), len(want), len(p.Flows))
	return nil
}

// policerPrefix begins the names of link's policers.
func policerPrefix(link string) string { return "police-" + link + "-" }

// delPolicers deletes link's policers from table, in c's next transaction.
func delPolicers(c *nftables.Conn, table *nftables.Table, link string) error {
	objs, err := c.GetNamedObjects(table)
	if err != nil {
		return fmt.Errorf("nftables: listing the objects of table netdev %s: %w", Table, err)
	}
	for _, o := range objs {
		if n, ok := o.(*nftables.NamedObj); ok && strings.HasPrefix(n.Name, policerPrefix(link)) {
			c.DeleteObject(&nftables.NamedObj{Table: table, Name: n.Name, Type: n.Type})
		}
	}
	return nil
}

// findChain is link's chain in Table, nil if there is none.
func findChain(c *nftables.Conn, link string) (*nftables.Chain, error) {
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, fmt.Errorf("nftables: listing chains: %w", err)
	}
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == Table && ch.Name == markChain(link) {
			ch.Table.Family = nftables.TableFamilyNetdev
			return ch, nil
		}
	}
	return nil, nil
}

// removeMarks deletes link's chain, and Table with it when no other uplink has one.
func removeMarks(link string) ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EPROTONOSUPPORT) {
			return nil, nil // no nf_tables: nothing of isochron's there
		}
		return nil, fmt.Errorf("nftables: listing chains: %w", err)
	}
	var ours *nftables.Chain
	others := 0
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != Table {
			continue
		}
		if ch.Name == markChain(link) {
			ours = ch
		} else {
			others++
		}
	}
	if ours == nil {
		return nil, nil
	}
	table := &nftables.Table{Family: nftables.TableFamilyNetdev, Name: Table}
	ours.Table = table
	var did string
	if others == 0 {
		c.DelTable(table)
		did = fmt.Sprintf("nftables netdev %s: removed", Table)
	} else {
		c.DelChain(ours)
		if err := delPolicers(c, table, link); err != nil {
			return nil, err
		}
		did = fmt.Sprintf("nftables netdev %s chain %s and its policers: removed", Table, ours.Name)
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("nftables: %s: %w", did, err)
	}
	return []string{did}, nil
}
