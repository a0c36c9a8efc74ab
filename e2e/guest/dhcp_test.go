package main

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
)

func TestLeasePrefix(t *testing.T) {
	server := net.IPv4(169, 254, 75, 11)
	for _, tc := range []struct {
		name    string
		mods    []dhcpv4.Modifier
		want    netip.Prefix
		wantErr bool
	}{
		{
			name: "ack",
			mods: []dhcpv4.Modifier{dhcpv4.WithYourIP(net.IPv4(10, 200, 0, 5)), dhcpv4.WithNetmask(net.CIDRMask(24, 32))},
			want: netip.MustParsePrefix("10.200.0.5/24"),
		},
		{
			name: "host mask",
			mods: []dhcpv4.Modifier{dhcpv4.WithYourIP(net.IPv4(192, 168, 1, 9)), dhcpv4.WithNetmask(net.CIDRMask(32, 32))},
			want: netip.MustParsePrefix("192.168.1.9/32"),
		},
		{
			name:    "no mask",
			mods:    []dhcpv4.Modifier{dhcpv4.WithYourIP(net.IPv4(10, 200, 0, 5))},
			wantErr: true,
		},
		{
			name:    "non-contiguous mask",
			mods:    []dhcpv4.Modifier{dhcpv4.WithYourIP(net.IPv4(10, 200, 0, 5)), dhcpv4.WithNetmask(net.IPv4Mask(255, 0, 255, 0))},
			wantErr: true,
		},
		{
			name:    "zero mask",
			mods:    []dhcpv4.Modifier{dhcpv4.WithYourIP(net.IPv4(10, 200, 0, 5)), dhcpv4.WithNetmask(net.CIDRMask(0, 32))},
			wantErr: true,
		},
		{
			name:    "no address",
			mods:    []dhcpv4.Modifier{dhcpv4.WithNetmask(net.CIDRMask(24, 32))},
			wantErr: true,
		},
		{
			name: "nak",
			mods: []dhcpv4.Modifier{
				dhcpv4.WithMessageType(dhcpv4.MessageTypeNak),
				dhcpv4.WithYourIP(net.IPv4(10, 200, 0, 5)), dhcpv4.WithNetmask(net.CIDRMask(24, 32)),
			},
			wantErr: true,
		},
	} {
		mods := append([]dhcpv4.Modifier{
			dhcpv4.WithMessageType(dhcpv4.MessageTypeAck),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server)),
		}, tc.mods...)
		ack, err := dhcpv4.New(mods...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := leasePrefix(ack)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: leasePrefix = %v, %v; want %v, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
		if err != nil {
			t.Logf("%s: %v", tc.name, err)
		}
	}
}

// TestLease runs the client's DISCOVER-OFFER-REQUEST-ACK against a server that answers
// as KubeVirt's does, over UDP on 127.0.0.1 instead of a raw socket.
func TestLease(t *testing.T) {
	serverConn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer serverConn.Close()
	serverID := net.IPv4(169, 254, 75, 11).To4()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, peer, err := serverConn.ReadFrom(buf)
			if err != nil {
				return
			}
			req, err := dhcpv4.FromBytes(buf[:n])
			if err != nil {
				t.Errorf("server: %v", err)
				return
			}
			typ := dhcpv4.MessageTypeOffer
			if req.MessageType() == dhcpv4.MessageTypeRequest {
				typ = dhcpv4.MessageTypeAck
			}
			reply, err := dhcpv4.NewReplyFromRequest(req,
				dhcpv4.WithMessageType(typ),
				dhcpv4.WithYourIP(net.IPv4(10, 200, 0, 5)),
				dhcpv4.WithServerIP(serverID),
				dhcpv4.WithNetmask(net.CIDRMask(24, 32)),
				dhcpv4.WithRouter(net.IPv4(10, 200, 0, 1)),
				dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverID)))
			if err != nil {
				t.Errorf("server: %v", err)
				return
			}
			if _, err := serverConn.WriteTo(reply.ToBytes(), peer); err != nil {
				t.Errorf("server: %v", err)
				return
			}
		}
	}()

	clientConn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := nclient4.NewWithConn(clientConn, net.HardwareAddr{2, 0, 0, 0, 0, 1},
		nclient4.WithServerAddr(serverConn.LocalAddr().(*net.UDPAddr)),
		nclient4.WithTimeout(time.Second), nclient4.WithRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr, server, err := lease(c, "eth1")
	if err != nil {
		t.Fatal(err)
	}
	if addr != netip.MustParsePrefix("10.200.0.5/24") || !server.Equal(serverID) {
		t.Errorf("lease = %s from %s, want 10.200.0.5/24 from %s", addr, server, serverID)
	}
}
