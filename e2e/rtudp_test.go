//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// relayPort is the e2e guest's UDP relay (e2e/guest/relay.go): a datagram "ADDR:PORT
// data" is sent on as "data" to ADDR:PORT, and the guest answers "from ADDR:PORT reply",
// "timeout ADDR:PORT" or "error why".
const relayPort = 8

// peer is a crawler on the RT network: its node, its guest's RT address (its launcher
// pod's lease) and the launcher pod, whose address reaches the guest's relay.
type peer struct {
	node, rtAddr string
	cvm          *isov1.CrawlerVM
	launcher     *corev1.Pod
}

// exchangeUDP checks that two crawlers on different nodes reach each other over the RT
// network: a UDP datagram one guest sends to the other's RT address (relayed by the
// guest, on the order of the test sent to its pod address) is echoed back, both ways.
func exchangeUDP(t *testing.T, a, b *peer) {
	t.Helper()
	if a.node == b.node {
		t.Fatalf("both crawlers run on %s: want them on different nodes", a.node)
	}
	if !guestRunsAgent {
		t.Logf("no UDP between the crawlers: it needs the e2e guest (E2E_GUEST_RUNS_AGENT), whose relay on port %d sends and echoes the datagrams", relayPort)
		return
	}
	for _, p := range [][2]*peer{{a, b}, {b, a}} {
		from, to := p[0], p[1]
		target := net.JoinHostPort(to.rtAddr, "7")
		payload := fmt.Sprintf("isochron %s to %s", from.cvm.Name, to.cvm.Name)
		var reply string
		start := time.Now()
		// The guest leases its RT address once it has booted: ask until it answers.
		waitFor(t, 3*time.Minute, fmt.Sprintf("%s echoing %s's UDP over the RT network", to.cvm.Name, from.cvm.Name), func() (bool, string, error) {
			reply = relay(from.launcher.Status.PodIP, target+" "+payload)
			return reply == "from "+target+" "+payload, "relay: " + reply, nil
		})
		t.Logf("%s (%s) -> %s (%s, %s) over the RT network: %q after %s", from.cvm.Name, from.node, to.cvm.Name, to.node, to.rtAddr, reply, time.Since(start).Round(time.Second))
	}
}

// relay sends request to the guest's relay at podIP and returns its answer, or what
// kept it from answering.
func relay(podIP, request string) string {
	conn, err := net.Dial("udp", net.JoinHostPort(podIP, fmt.Sprint(relayPort)))
	if err != nil {
		return "no answer: " + err.Error()
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.Write([]byte(request)); err != nil {
		return "no answer: " + err.Error()
	}
	if err := conn.SetReadDeadline(time.Now().Add(3 * time.Second)); err != nil {
		return "no answer: " + err.Error()
	}
	buf := make([]byte, 1500)
	n, err := conn.Read(buf)
	if err != nil {
		return "no answer: " + err.Error()
	}
	return strings.TrimSpace(string(buf[:n]))
}
