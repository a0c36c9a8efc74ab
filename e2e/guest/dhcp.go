package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"golang.org/x/sys/unix"
)

// A crawler VM's NICs after the first (the RT-NIC: KubeVirt's bridge binding on a Multus
// network) get their address by DHCP: the bridge binding hands the pod interface's
// address (whereabouts IPAM) to the guest with a DHCP server of its own on that link,
// which answers DISCOVER and REQUEST with a lease that never ends. The guest takes only
// the address and prefix: the first NIC keeps the default route, and nothing of the
// lease is renewed.
//
// The client is insomniacslk/dhcp's nclient4 at the version KubeVirt v1.8.4 uses for its
// own DHCP server (test/kubevirt builds KubeVirt against this module's requirements; a
// newer one needs Go 1.25 and newer x/ modules for everything). Its raw-socket reader
// can panic on a malformed UDP frame to port 68 with an IP length under 8 bytes (fixed
// upstream later): a risk to PID 1 only while a lease is asked for, on a network the
// test owns.

const (
	// otherNICsWait is how long the other NICs may take to appear after the first.
	otherNICsWait = 2 * time.Second
	// dhcpTries are the DISCOVER-OFFER-REQUEST-ACK exchanges tried per interface, the
	// first dhcpBackoff apart, then twice as far each time.
	dhcpTries   = 4
	dhcpBackoff = time.Second
	// dhcpTimeout is how long the client waits for an answer to a message before it
	// sends it again, dhcpSends times in all, doubling the wait each time.
	dhcpTimeout = 2 * time.Second
	dhcpSends   = 3
)

// configureOtherNICs brings up every ethernet interface but the one with index first and
// runs a DHCPv4 client on each, in index order, each in its own goroutine.
func configureOtherNICs(first int) {
	started := map[int]bool{first: true}
	for deadline := time.Now().Add(otherNICsWait); ; time.Sleep(50 * time.Millisecond) {
		ifcs, err := net.Interfaces()
		if err != nil {
			logf("dhcp: %v", err)
			return
		}
		for _, ifc := range ifcs {
			if ifc.Flags&net.FlagLoopback == 0 && len(ifc.HardwareAddr) == 6 && !started[ifc.Index] {
				started[ifc.Index] = true
				go dhcpInterface(ifc)
			}
		}
		if time.Now().After(deadline) {
			break
		}
	}
	if len(started) == 1 {
		logf("dhcp: no other ethernet interface")
	}
}

// dhcpInterface brings ifc up and gives it the address of a DHCP lease, trying again a
// few times; it gives up with a log line, leaving ifc up and unaddressed.
func dhcpInterface(ifc net.Interface) {
	if err := setLinkUp(ifc.Name); err != nil {
		logf("%s: %v", ifc.Name, err)
		return
	}
	logf("%s up, asking for an address by DHCP", ifc.Name)
	backoff := dhcpBackoff
	for try := 1; ; try++ {
		addr, server, err := dhcpLease(ifc.Name)
		if err == nil {
			if err := netlinkDo(unix.RTM_NEWADDR, create, addrMessage(ifc.Index, addr)); err != nil && !errors.Is(err, unix.EEXIST) {
				logf("%s: address %s: %v", ifc.Name, addr, err)
				return
			}
			logf("%s %s by DHCP from %s", ifc.Name, addr, server)
			return
		}
		if try == dhcpTries {
			logf("%s: DHCP try %d of %d: %v; no address", ifc.Name, try, dhcpTries, err)
			return
		}
		logf("%s: DHCP try %d of %d: %v; again in %s", ifc.Name, try, dhcpTries, err, backoff)
		time.Sleep(backoff)
		backoff *= 2
	}
}

// dhcpLease runs one DISCOVER-OFFER-REQUEST-ACK exchange on the interface called name
// (a raw socket: it has no address yet) and returns the leased address and the server
// that leased it.
func dhcpLease(name string) (netip.Prefix, net.IP, error) {
	c, err := nclient4.New(name, nclient4.WithTimeout(dhcpTimeout), nclient4.WithRetry(dhcpSends))
	if err != nil {
		return netip.Prefix{}, nil, err
	}
	defer c.Close()
	return lease(c, name)
}

// lease runs one DISCOVER-OFFER-REQUEST-ACK exchange with c, logging the offer.
func lease(c *nclient4.Client, name string) (netip.Prefix, net.IP, error) {
	// The client's timeouts bound each exchange: no context deadline is needed.
	ctx := context.Background()
	offer, err := c.DiscoverOffer(ctx)
	if err != nil {
		return netip.Prefix{}, nil, err
	}
	logf("%s: DHCP offer of %s from %s", name, offer.YourIPAddr, dhcpServer(offer))
	l, err := c.RequestFromOffer(ctx, offer)
	if err != nil {
		return netip.Prefix{}, nil, err
	}
	addr, err := leasePrefix(l.ACK)
	if err != nil {
		return netip.Prefix{}, nil, err
	}
	return addr, dhcpServer(l.ACK), nil
}

// leasePrefix is the address and prefix length an ACK leases: its yiaddr and subnet mask
// option.
func leasePrefix(ack *dhcpv4.DHCPv4) (netip.Prefix, error) {
	if t := ack.MessageType(); t != dhcpv4.MessageTypeAck {
		return netip.Prefix{}, fmt.Errorf("DHCP %s, not ACK", t)
	}
	addr, ok := netip.AddrFromSlice(ack.YourIPAddr.To4())
	if !ok || addr.IsUnspecified() {
		return netip.Prefix{}, fmt.Errorf("DHCP ACK without an address (yiaddr %s)", ack.YourIPAddr)
	}
	mask := ack.SubnetMask()
	if mask == nil {
		return netip.Prefix{}, fmt.Errorf("DHCP ACK for %s without a subnet mask", addr)
	}
	ones, bits := mask.Size()
	if bits != 32 || ones == 0 {
		return netip.Prefix{}, fmt.Errorf("DHCP ACK for %s with subnet mask %s", addr, net.IP(mask))
	}
	return netip.PrefixFrom(addr, ones), nil
}

// dhcpServer is the server that sent m: its server identifier option, else siaddr.
func dhcpServer(m *dhcpv4.DHCPv4) net.IP {
	if id := m.ServerIdentifier(); id != nil {
		return id
	}
	return m.ServerIPAddr
}
