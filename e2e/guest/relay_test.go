package main

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseRelayRequest(t *testing.T) {
	for _, tc := range []struct {
		req        string
		wantTarget netip.AddrPort
		wantData   string
		wantErr    string // a part of the error; "" for none
	}{
		{req: "10.200.0.5:7 hello", wantTarget: netip.MustParseAddrPort("10.200.0.5:7"), wantData: "hello"},
		{req: "10.200.0.5:7 two words ", wantTarget: netip.MustParseAddrPort("10.200.0.5:7"), wantData: "two words "},
		{req: "10.200.0.5:7 ", wantTarget: netip.MustParseAddrPort("10.200.0.5:7")},
		{req: "255.255.255.255:65535 x", wantTarget: netip.MustParseAddrPort("255.255.255.255:65535"), wantData: "x"},
		{req: "10.200.0.5:7", wantErr: "no space"},
		{req: "", wantErr: "no space"},
		{req: " hello", wantErr: "ADDR:PORT"},
		{req: "10.200.0.5 hello", wantErr: "ADDR:PORT"},
		{req: "10.200.0.5:x hello", wantErr: "ADDR:PORT"},
		{req: "10.200.0.5:65536 hello", wantErr: "ADDR:PORT"},
		{req: "10.200.0.5:0 hello", wantErr: "port 0"},
		{req: "10.200.0:7 hello", wantErr: "ADDR:PORT"},
		{req: "host:7 hello", wantErr: "ADDR:PORT"},
		{req: "[fd00::1]:7 hello", wantErr: "not IPv4"},
		{req: "[::ffff:10.0.0.1]:7 hello", wantErr: "not IPv4"},
		{req: "10.200.0.5:7\nhello", wantErr: "no space"},
		{req: strings.Repeat("1", 100) + " hello", wantErr: "longer than"},
	} {
		target, data, err := parseRelayRequest([]byte(tc.req))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("parseRelayRequest(%q): %v", tc.req, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("parseRelayRequest(%q) = %v, %q, %v; want an error with %q", tc.req, target, data, err, tc.wantErr)
		case err == nil && (target != tc.wantTarget || string(data) != tc.wantData):
			t.Errorf("parseRelayRequest(%q) = %v, %q; want %v, %q", tc.req, target, data, tc.wantTarget, tc.wantData)
		}
		if err != nil {
			t.Logf("%q: %v", tc.req, err)
		}
	}
}

// listenLocal is a UDP socket on 127.0.0.1, closed when the test ends.
func listenLocal(t *testing.T) *net.UDPConn {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestRelay runs the relay on 127.0.0.1 and asks it to talk to a UDP echo server, to a
// socket that never answers, and nonsense.
func TestRelay(t *testing.T) {
	relayConn := listenLocal(t)
	done := make(chan error, 1)
	go func() { done <- serveRelay(relayConn, 200*time.Millisecond) }()

	echoConn := listenLocal(t)
	go func() {
		buf := make([]byte, 65536)
		for {
			n, peer, err := echoConn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = echoConn.WriteToUDPAddrPort(buf[:n], peer)
		}
	}()
	silent := listenLocal(t) // bound, so no ICMP port unreachable, and never read

	echoAddr := echoConn.LocalAddr().String()
	silentAddr := silent.LocalAddr().String()
	for _, tc := range []struct {
		req, want string
	}{
		{req: echoAddr + " hello over the RT network", want: "from " + echoAddr + " hello over the RT network"},
		{req: echoAddr + " ", want: "from " + echoAddr + " "},
		{req: silentAddr + " anyone?", want: "timeout " + silentAddr},
		{req: "nonsense", want: "error no space after ADDR:PORT"},
		{req: "[::1]:7 x", want: `error ADDR:PORT "[::1]:7": not IPv4`},
	} {
		client := listenLocal(t)
		if err := client.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := client.WriteTo([]byte(tc.req), relayConn.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 65536)
		n, from, err := client.ReadFrom(buf)
		if err != nil {
			t.Fatalf("%q: %v", tc.req, err)
		}
		if got := string(buf[:n]); got != tc.want || from.String() != relayConn.LocalAddr().String() {
			t.Errorf("%q: %q from %s; want %q from %s", tc.req, got, from, tc.want, relayConn.LocalAddr())
		}
	}

	relayConn.Close()
	if err := <-done; err == nil {
		t.Error("serveRelay returned no error after its socket closed")
	}
}

// TestRelayRefused: a port nobody listens on answers ICMP port unreachable, which the
// relay reports as an error rather than waiting for its timeout.
func TestRelayRefused(t *testing.T) {
	closed := listenLocal(t)
	addr := closed.LocalAddr().String()
	closed.Close()
	answer, note := relayRequest([]byte(addr+" x"), 5*time.Second)
	if !strings.HasPrefix(string(answer), "error ") || !strings.Contains(string(answer), "refused") {
		t.Errorf("relayRequest to a closed port = %q (%s), want an error that says refused", answer, note)
	}
	t.Logf("%s", answer)
}
