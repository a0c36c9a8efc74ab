package nic

import (
	"errors"
	"fmt"
	"slices"

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

// markRules are the rules that set the DSCP of each flow's IPv4 and IPv6 packets to its
// class's, keeping the ECN bits, by the flow's source MAC.
func markRules(p Schedule) []markRule {
	var rs []markRule
	for _, f := range p.Flows {
		dscp := byte(f.RT.DSCP.Value)
		mac := []byte(f.Flow.MAC)
		rs = append(rs,
			markRule{
				id: fmt.Sprintf("isochron %s ip %s dscp %s", f.Flow.Key, f.Flow.MAC, f.RT.DSCP.Name),
				exprs: matchFlow(unix.ETH_P_IP, mac,
					// The TOS byte (DSCP in its top six bits, ECN below) with the byte before
					// it: the header checksum (at offset 10) is updated by 16-bit words, so
					// the write is one aligned word, as nft writes "ip dscp set".
					&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 2},
					&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 2, Mask: []byte{0xff, 0x03}, Xor: []byte{0, dscp << 2}},
					&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 2,
						CsumType: expr.CsumTypeInet, CsumOffset: 10},
				),
			},
			markRule{
				id: fmt.Sprintf("isochron %s ip6 %s dscp %s", f.Flow.Key, f.Flow.MAC, f.RT.DSCP.Name),
				exprs: matchFlow(unix.ETH_P_IPV6, mac,
					// The first 16 bits: version (4), DSCP (6), ECN (2), flow label (4 of 20).
					// IPv6 has no header checksum, and the traffic class is in no
					// pseudo-header.
					&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 2},
					&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 2, Mask: []byte{0xf0, 0x3f}, Xor: []byte{dscp >> 2, dscp << 6}},
					&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 2},
				),
			},
		)
	}
	return rs
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
	want := markRules(p)
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
	for _, r := range want {
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: r.exprs, UserData: []byte(r.id)})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: writing chain %s of table netdev %s: %w", markChain(link), Table, err)
	}
	did("nftables netdev %s chain %s: %d DSCP rules", Table, markChain(link), len(want))
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
		did = fmt.Sprintf("nftables netdev %s chain %s: removed", Table, ours.Name)
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("nftables: %s: %w", did, err)
	}
	return []string{did}, nil
}
