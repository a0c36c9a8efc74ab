//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// relayPort is the e2e guest's UDP relay (e2e/guest/relay.go): a datagram "ADDR:PORT
// data" is sent on as "data" to ADDR:PORT, and the guest answers "from ADDR:PORT reply",
// "timeout ADDR:PORT" or "error why".
const relayPort = 8

// Two crawlers on different nodes reach each other over the RT network: each guest
// leases its RT-NIC's address by DHCP from KubeVirt's bridge binding (whereabouts'
// lease of its launcher pod), and a UDP datagram one guest sends to the other's RT
// address is echoed back, both ways. The RT network is one Linux bridge per node VM
// (the NAD's), joined through their uplinks (E2E_RT_UPLINK) on a bridge of this host.
func TestRTNetworkCarriesUDPBetweenCrawlers(t *testing.T) {
	ctx := context.Background()
	_, nodes := moveNodes(ctx, t)
	if rtUplink == "" {
		t.Skip("E2E_RT_UPLINK is not set: it names the RT uplink, a bridge's port, of the nodes (make e2e-local sets it)")
	}
	if !guestRunsAgent {
		t.Skip("needs the e2e guest (E2E_GUEST_RUNS_AGENT): its relay on port 8 sends and echoes the datagrams")
	}
	bridge := readUplink(ctx, t, nodes[0], rtUplink).Master
	if bridge == "" {
		t.Fatalf("E2E_RT_UPLINK=%s is no bridge's port on node %s", rtUplink, nodes[0])
	}
	ns := testNamespace(t)
	nad := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rt"},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: fmt.Sprintf(
			`{"cniVersion": "0.4.0", "name": "rt", "type": "bridge", "bridge": %q, "ipam": {"type": "whereabouts", "range": %q}}`, bridge, rtRange)},
	}
	if err := cl.Create(ctx, nad); err != nil {
		t.Fatalf("creating NetworkAttachmentDefinition: %v", err)
	}
	type peer struct {
		node, rtAddr string
		cvm          *isov1.CrawlerVM
		vmi          *kubevirtv1.VirtualMachineInstance
		launcher     *corev1.Pod
	}
	var cvms []*isov1.CrawlerVM
	for i, node := range nodes[:2] {
		cvms = append(cvms, crawler(ns, fmt.Sprintf("peer-%d", i+1), shared, func(c *isov1.CrawlerVM) {
			c.Spec.RTNIC = &isov1.RTNIC{NetworkName: nad.Name, Deadline: metav1.Duration{Duration: 20 * time.Millisecond}, MinBandwidth: resource.MustParse("10M")}
			c.Spec.Placement = &isov1.Placement{NodeSelector: map[string]string{corev1.LabelHostname: node}}
		}))
	}
	var peers []*peer
	for i, vmi := range runCrawlerVMs(ctx, t, cvms...) {
		cvm := cvms[i]
		launcher := launcherPod(ctx, t, vmi)
		addr, err := leasedRTAddress(launcher, ns+"/"+nad.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("crawler %s runs on %s, RT address %s (pod %s)", cvm.Name, vmi.Status.NodeName, addr, launcher.Status.PodIP)
		peers = append(peers, &peer{node: vmi.Status.NodeName, rtAddr: addr, cvm: cvm, vmi: vmi, launcher: launcher})
	}
	if peers[0].node == peers[1].node {
		t.Fatalf("both crawlers run on %s: want one on each of %v", peers[0].node, nodes[:2])
	}
	for _, p := range [][2]*peer{{peers[0], peers[1]}, {peers[1], peers[0]}} {
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
	for _, p := range peers {
		deleteAndWaitGone(ctx, t, p.cvm, p.launcher)
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
