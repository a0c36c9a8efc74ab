package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"
)

// The UDP relay lets the e2e suite, which reaches a crawler only over its first NIC, show
// UDP between two crawlers over the RT network: it asks one crawler to send a datagram to
// the other's RT-NIC address and to say what came back.
//
// A request is one datagram to port 8:
//
//	ADDR:PORT DATA
//
// ADDR an IPv4 address (dotted quad), PORT a decimal port other than 0, one space, and
// DATA any bytes (possibly none). The relay sends DATA as one datagram from a new UDP
// socket to ADDR:PORT and answers the request's sender with one datagram:
//
//	from ADDR:PORT REPLY   the first datagram ADDR:PORT sent back within the timeout (1 s)
//	timeout ADDR:PORT      none came
//	error WHY              the request is malformed, or sending or receiving failed (say,
//	                       ICMP port unreachable: "connection refused")
//
// ADDR:PORT in the answer is in canonical form (netip.AddrPort). Each request is handled
// in its own goroutine.

const (
	relayPort    = 8
	relayTimeout = time.Second
	// maxAddrPort is the longest ADDR:PORT: "255.255.255.255:65535".
	maxAddrPort = 21
)

// relay answers relay requests on port 8 of every address, forever.
func relay() {
	for {
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{Port: relayPort})
		if err != nil {
			logf("udp relay: %v", err)
			time.Sleep(time.Second)
			continue
		}
		logf("udp relay on port %d", relayPort)
		logf("udp relay: %v", serveRelay(conn, relayTimeout))
		conn.Close()
	}
}

// serveRelay answers the requests that come to conn, each in its own goroutine, waiting
// timeout for each reply, until reading from conn fails.
func serveRelay(conn *net.UDPConn, timeout time.Duration) error {
	buf := make([]byte, 65536)
	for {
		n, peer, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return err
		}
		req := bytes.Clone(buf[:n])
		go func() {
			answer, note := relayRequest(req, timeout)
			logf("udp relay for %s: %s", peer, note)
			if _, err := conn.WriteToUDPAddrPort(answer, peer); err != nil {
				logf("udp relay for %s: %v", peer, err)
			}
		}()
	}
}

// relayRequest carries out one request and returns the answer for its sender and a note
// for the log.
func relayRequest(req []byte, timeout time.Duration) (answer []byte, note string) {
	target, data, err := parseRelayRequest(req)
	if err != nil {
		return []byte("error " + err.Error()), "error " + err.Error()
	}
	reply, err := exchange(target, data, timeout)
	switch {
	case err == nil:
		return append([]byte("from "+target.String()+" "), reply...),
			fmt.Sprintf("%d bytes to %s, %d back", len(data), target, len(reply))
	case errors.Is(err, os.ErrDeadlineExceeded):
		return []byte("timeout " + target.String()), fmt.Sprintf("%d bytes to %s, timeout", len(data), target)
	default:
		return []byte("error " + err.Error()), "error " + err.Error()
	}
}

// parseRelayRequest splits a request into its target and data.
func parseRelayRequest(req []byte) (netip.AddrPort, []byte, error) {
	head, data, ok := bytes.Cut(req, []byte(" "))
	if !ok {
		return netip.AddrPort{}, nil, errors.New("no space after ADDR:PORT")
	}
	if len(head) > maxAddrPort {
		return netip.AddrPort{}, nil, fmt.Errorf("ADDR:PORT longer than %d bytes", maxAddrPort)
	}
	target, err := netip.ParseAddrPort(string(head))
	if err != nil {
		return netip.AddrPort{}, nil, fmt.Errorf("ADDR:PORT %q: %w", head, err)
	}
	if !target.Addr().Is4() {
		return netip.AddrPort{}, nil, fmt.Errorf("ADDR:PORT %q: not IPv4", head)
	}
	if target.Port() == 0 {
		return netip.AddrPort{}, nil, fmt.Errorf("ADDR:PORT %q: port 0", head)
	}
	return target, data, nil
}

// exchange sends data to target from a new UDP socket and returns the first datagram
// target sends back within timeout (an error wrapping os.ErrDeadlineExceeded if none).
func exchange(target netip.AddrPort, data []byte, timeout time.Duration) ([]byte, error) {
	// A connected socket: the kernel drops datagrams from anyone but target.
	conn, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(target))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	if _, err := conn.Write(data); err != nil {
		return nil, err
	}
	buf := make([]byte, 65536)
	n, err := conn.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}
