//go:build e2e

package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/nic"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/rtnet"
)

const (
	// rtRange is what whereabouts leases the test's RT network from: apart from the
	// local cluster's other networks (pods 10.244.0.0/24, check-multus.sh 10.245.0.0/24).
	rtRange = "10.246.0.0/24"
	// agentTimeout is how long the NIC agent's pod may take to be Ready (its image is
	// local: no pull).
	agentTimeout = 3 * time.Minute
	// unscheduleTimeout is how long the agent may take to take its schedule off the
	// uplink once the crawler is gone.
	unscheduleTimeout = 2 * time.Minute
)

// TestNICAgentSchedulesTheRTUplink: a crawler with an RT-NIC on a bridge network whose
// uplink is named by isochron.io/rt-uplink gets its class on the uplink's egress from the
// node's NIC agent, read back from the node's kernel (by the agent: nic-agent
// -show-uplink); deleting the crawler takes isochron's schedule off the uplink.
// E2E_RT_UPLINK names the uplink, a port of a Linux bridge on each node.
//
// With two nodes to move between (E2E_MOVE_NODES: the local cluster's node VMs) a
// crawler runs on each, both started together, and each node's uplink is checked; then
// the two reach each other over the RT network: each guest leases its RT-NIC's address by
// DHCP from KubeVirt's bridge binding (whereabouts' lease of its launcher pod), and a UDP
// datagram one guest sends to the other's RT address is echoed back, both ways. The RT
// network is one Linux bridge per node VM (the NAD's), joined through their uplinks on a
// bridge of this host. Without them one crawler runs, on the first node KubeVirt runs VMs
// on (firstVirtNode).
//
// On the node the suite runs on, what its kernel lacks is probed first, and changes what
// the test expects: without the dummy link type, KubeVirt's bridge binding cannot set up
// the VMI's RT-NIC (the VMI fails; the agent schedules the crawler from its placement all
// the same); without HTB, the agent reports the uplink unavailable instead of programming
// it. Another node (the local cluster's node VMs) must have both.
func TestNICAgentSchedulesTheRTUplink(t *testing.T) {
	if rtUplink == "" {
		t.Skip("E2E_RT_UPLINK is not set: it names the RT uplink, a bridge's port, of the nodes (make e2e-local sets it)")
	}
	ctx := context.Background()
	var hostnames []string
	if _, ready, why := readyMoveNodes(ctx, t); why == "" {
		for _, name := range ready[:2] {
			n := &corev1.Node{}
			if err := cl.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
				t.Fatal(err)
			}
			hostnames = append(hostnames, n.Labels[corev1.LabelHostname])
		}
	} else {
		t.Logf("one crawler: %s", why)
		hostnames = []string{firstVirtNode(ctx, t)}
	}
	// What each node runs on: the node, what its kernel lacks (where it is this host).
	type site struct {
		node   *corev1.Node
		kernel kernelFeatures
	}
	var sites []site
	var bridge string
	here := thisNode(ctx, t)
	for _, hostname := range hostnames {
		nodes := &corev1.NodeList{}
		if err := cl.List(ctx, nodes, client.MatchingLabels{corev1.LabelHostname: hostname}); err != nil || len(nodes.Items) != 1 {
			t.Fatalf("the node of hostname %s: %v (%d found)", hostname, err, len(nodes.Items))
		}
		s := site{node: &nodes.Items[0]}
		if here != nil && here.Name == s.node.Name {
			s.kernel = probeKernel(t)
			t.Logf("this kernel (node %s): %s", s.node.Name, s.kernel)
		} else {
			t.Logf("node %s is not this host: its kernel must have dummy links and HTB", s.node.Name)
		}
		agent := waitForNICAgent(ctx, t, s.node.Name)
		up := readUplink(ctx, t, s.node.Name, rtUplink)
		if up.Master == "" || (bridge != "" && up.Master != bridge) {
			t.Fatalf("E2E_RT_UPLINK=%s is a port of %q on node %s: want a bridge's, the same on every node (%q)", rtUplink, up.Master, s.node.Name, bridge)
		}
		bridge = up.Master
		t.Logf("NIC agent %s Ready on %s; RT uplink %s, a port of bridge %s", agent, s.node.Name, rtUplink, bridge)
		if up.Ours {
			t.Fatalf("uplink %s of %s carries isochron's schedule before the test (%s): an earlier run left it", rtUplink, s.node.Name, up)
		}
		sites = append(sites, s)
	}

	ns := testNamespace(t)
	// The nodes' ContentionProfile states the uplink's line rate (1G, the model's
	// default), as an RT node class's does (config/samples/contentionprofile_rt.yaml). The
	// agent needs it: without a profile it shapes to 0 bits/s and reports the uplink
	// unavailable ("link rate 0 bits/s: it must be positive"; the model's default is not
	// applied in controllers/nicagent, see docs/dev/e2e.md).
	profile := &isov1.ContentionProfile{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-rt"},
		Spec: isov1.ContentionProfileSpec{
			NodeSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelHostname, Operator: metav1.LabelSelectorOpIn, Values: hostnames},
			}},
			Precedence: 100,
			NIC:        &isov1.NICProfile{LinkRate: ptr.To(resource.MustParse("1G"))},
		},
	}
	if err := cl.Create(ctx, profile); err != nil {
		t.Fatalf("creating ContentionProfile: %v", err)
	}
	t.Cleanup(func() {
		if !keep {
			_ = cl.Delete(context.Background(), profile)
		}
	})
	nad := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rt", Annotations: map[string]string{isov1.AnnotationRTUplink: rtUplink}},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: fmt.Sprintf(
			`{"cniVersion": "0.4.0", "name": "rt", "type": "bridge", "bridge": %q, "ipam": {"type": "whereabouts", "range": %q}}`, bridge, rtRange)},
	}
	if err := cl.Create(ctx, nad); err != nil {
		t.Fatalf("creating NetworkAttachmentDefinition: %v", err)
	}
	const deadline = 5 * time.Millisecond
	minBandwidth := resource.MustParse("10M")
	start := time.Now()
	// A crawler on each node (on the node whose kernel the test reads), created together:
	// on an emulated node a launcher pod takes minutes to start.
	var cvms []*isov1.CrawlerVM
	for i, s := range sites {
		cvm := crawler(ns, fmt.Sprintf("relay-%d", i+1), shared, func(c *isov1.CrawlerVM) {
			c.Spec.RTNIC = &isov1.RTNIC{NetworkName: nad.Name, Deadline: metav1.Duration{Duration: deadline}, MinBandwidth: minBandwidth}
			c.Spec.Placement = &isov1.Placement{NodeSelector: map[string]string{corev1.LabelHostname: s.node.Labels[corev1.LabelHostname]}}
		})
		if err := cl.Create(ctx, cvm); err != nil {
			t.Fatalf("creating CrawlerVM %s: %v", cvm.Name, err)
		}
		cvms = append(cvms, cvm)
	}
	var peers []*peer
	var launchers []*corev1.Pod
	for i, cvm := range cvms {
		launcher, p := checkRTNIC(ctx, t, cvm, sites[i].node.Name, sites[i].kernel, nad, start, minBandwidth.Value())
		launchers = append(launchers, launcher)
		if p != nil {
			peers = append(peers, p)
		}
	}
	switch {
	case len(peers) == 2:
		exchangeUDP(t, peers[0], peers[1])
	case len(sites) == 2:
		// checkRTNIC failed the test already unless a kernel without dummy links failed
		// the VMI, as it must: say why no UDP was sent.
		t.Logf("no UDP between the crawlers: %d of them run with an RT address", len(peers))
	}

	// Deleting a crawler removes what isochron created, and its schedule comes off the
	// uplink (the agent removes a schedule whose last flow left).
	for _, cvm := range cvms {
		if err := cl.Delete(ctx, cvm); err != nil {
			t.Fatalf("deleting CrawlerVM %s: %v", cvm.Name, err)
		}
	}
	for i, cvm := range cvms {
		node := sites[i].node.Name
		waitGone(ctx, t, cvm, launchers[i])
		waitFor(t, unscheduleTimeout, "isochron's schedule off "+rtUplink+" of "+node, func() (bool, string, error) {
			s := readUplink(ctx, t, node, rtUplink)
			return !s.Ours, s.String(), nil
		})
		t.Logf("uplink %s of %s after crawler %s was deleted: %s", rtUplink, node, cvm.Name, readUplink(ctx, t, node, rtUplink))
	}
}

// checkRTNIC waits for the RT-NIC crawler cvm placed on node to run (or, on a kernel
// without dummy links, its VMI to fail), checks its launcher's lease on nad and what the
// node's NIC agent programmed on the uplink for it since start. It returns
// its launcher pod, and the crawler as a peer on the RT network when its VMI runs (nil
// when it failed, as kernel says it must).
func checkRTNIC(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM, node string, kernel kernelFeatures, nad *nadv1.NetworkAttachmentDefinition, start time.Time, minBandwidth int64) (*corev1.Pod, *peer) {
	t.Helper()
	mac := render.MAC(cvm)
	waitFor(t, placeTimeout, cvm.Name+" Placed=True", func() (bool, string, error) {
		c := condition(ctx, t, cvm, isov1.ConditionPlaced)
		return c != nil && c.Status == metav1.ConditionTrue && cvm.Status.Placement != nil, fmt.Sprintf("Placed: %v", c), nil
	})
	vmi := &kubevirtv1.VirtualMachineInstance{}
	waitFor(t, runTimeout, cvm.Name+"'s VMI Running with its RT-NIC (or Failed)", func() (bool, string, error) {
		if err := cl.Get(ctx, client.ObjectKey{Namespace: cvm.Namespace, Name: render.Name(cvm)}, vmi); err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		rt := vmiInterface(vmi, render.NetworkRT)
		running := vmi.Status.Phase == kubevirtv1.Running && rt != nil && strings.EqualFold(rt.MAC, mac)
		return running || vmi.Status.Phase == kubevirtv1.Failed,
			fmt.Sprintf("VMI phase %s, interfaces %+v", vmi.Status.Phase, vmi.Status.Interfaces), nil
	})
	// Multus and whereabouts ran for the launcher pod either way.
	network := nad.Namespace + "/" + nad.Name
	launcher := checkLeased(ctx, t, vmi, network)
	var p *peer
	switch {
	case vmi.Status.Phase == kubevirtv1.Running:
		t.Logf("VMI %s Running on %s, interface %s: %+v", vmi.Name, vmi.Status.NodeName, render.NetworkRT, *vmiInterface(vmi, render.NetworkRT))
		if vmi.Status.NodeName != node {
			t.Errorf("VMI %s runs on %s, want %s", vmi.Name, vmi.Status.NodeName, node)
		}
		if addr, err := leasedRTAddress(launcher, network); err == nil {
			p = &peer{node: vmi.Status.NodeName, rtAddr: addr, cvm: cvm, launcher: launcher}
		}
	case kernel.dummy != nil:
		t.Logf("VMI %s Failed, as expected on this kernel (KubeVirt's bridge binding adds a dummy link): %s", vmi.Name, vmiFailure(ctx, t, vmi))
	default:
		t.Fatalf("VMI %s Failed: %s", vmi.Name, vmiFailure(ctx, t, vmi))
	}

	// The agent writes status.rtNIC once it has programmed the uplink; a kernel that
	// cannot take the schedule is a Warning Event on the Node instead.
	var unavailable *corev1.Event
	waitFor(t, runTimeout, cvm.Name+"'s status.rtNIC, or Event "+isov1.EventReasonRTUplinkUnavailable, func() (bool, string, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(cvm), cvm); err != nil {
			return false, "", err
		}
		if cvm.Status.RTNIC != nil && cvm.Status.RTNIC.Class != "" {
			return true, "", nil
		}
		unavailable = uplinkUnavailable(ctx, t, node, rtUplink, start)
		return unavailable != nil, fmt.Sprintf("status.rtNIC: %+v", cvm.Status.RTNIC), nil
	})
	if unavailable != nil {
		if kernel.htb == nil {
			t.Fatalf("the agent reported %s unavailable although this kernel takes HTB: Event %s on Node %s: %s", rtUplink, unavailable.Reason, node, unavailable.Message)
		}
		t.Logf("the agent cannot program %s on this kernel: Event %s on Node %s: %s", rtUplink, unavailable.Reason, node, unavailable.Message)
		if s := readUplink(ctx, t, node, rtUplink); s.Ours {
			t.Errorf("uplink %s has isochron's schedule (%s), but the agent reported it unavailable", rtUplink, s)
		}
		return launcher, p
	}
	st := cvm.Status.RTNIC
	deadline := cvm.Spec.RTNIC.Deadline.Duration
	want := rtnet.ForDeadline(deadline, int(st.Raise))
	t.Logf("%s's status.rtNIC: class %s, raise %d, deadline %s", cvm.Name, st.Class, st.Raise, st.Deadline.Duration)
	if st.Class != want.DSCP.Name || st.Deadline.Duration != deadline {
		t.Errorf("status.rtNIC = %+v, want class %s (deadline %s raised %d) for deadline %s", st, want.DSCP.Name, deadline, st.Raise, deadline)
	}
	s := readUplink(ctx, t, node, rtUplink)
	t.Logf("uplink %s on %s: %s", rtUplink, node, s)
	checkSchedule(t, s, mac, want, minBandwidth)
	return launcher, p
}

// thisNode is the node the suite runs on: the one with an InternalIP of this host; nil
// if none.
func thisNode(ctx context.Context, t *testing.T) *corev1.Node {
	t.Helper()
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatalf("listing this host's addresses: %v", err)
	}
	local := map[string]bool{}
	for _, a := range addrs {
		local[a.IP.String()] = true
	}
	nodes := &corev1.NodeList{}
	if err := cl.List(ctx, nodes); err != nil {
		t.Fatalf("listing nodes: %v", err)
	}
	for i, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && local[net.ParseIP(a.Address).String()] {
				return &nodes.Items[i]
			}
		}
	}
	return nil
}

// waitForNICAgent waits until the NIC agent's pod on node is Ready and returns its name.
func waitForNICAgent(ctx context.Context, t *testing.T, node string) string {
	t.Helper()
	var name string
	waitFor(t, agentTimeout, "the NIC agent Ready on "+node, func() (bool, string, error) {
		pods := &corev1.PodList{}
		if err := cl.List(ctx, pods, client.InNamespace(nicAgentNS), client.MatchingLabels{"app.kubernetes.io/component": "nic-agent"}); err != nil {
			return false, "", err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != node {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					name = p.Name
					return true, "", nil
				}
			}
			return false, fmt.Sprintf("pod %s: phase %s, containers %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses), nil
		}
		return false, fmt.Sprintf("no pod of DaemonSet %s on %s (its nodeSelector wants kubevirt.io/cpumanager=true)", nicAgentDS, node), nil
	})
	return name
}

// vmiInterface is the VMI's reported interface of network name, nil if none.
func vmiInterface(vmi *kubevirtv1.VirtualMachineInstance, name string) *kubevirtv1.VirtualMachineInstanceNetworkInterface {
	for i := range vmi.Status.Interfaces {
		if vmi.Status.Interfaces[i].Name == name {
			return &vmi.Status.Interfaces[i]
		}
	}
	return nil
}

// checkLeased checks that the VMI's launcher pod (in any phase) got an address of
// rtRange on network (namespace/name): whereabouts leased it (Multus' network-status).
// It returns the pod.
func checkLeased(ctx context.Context, t *testing.T, vmi *kubevirtv1.VirtualMachineInstance, network string) *corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := cl.List(ctx, pods, client.InNamespace(vmi.Namespace), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
		t.Fatalf("listing virt-launcher pods: %v", err)
	}
	if len(pods.Items) == 0 {
		t.Fatalf("no virt-launcher pod of VMI %s (label %s=%s)", vmi.Name, kubevirtv1.CreatedByLabel, vmi.UID)
	}
	launcher := &pods.Items[0]
	if ip, err := leasedRTAddress(launcher, network); err != nil {
		t.Error(err)
	} else {
		t.Logf("virt-launcher pod %s: %s on %s, leased by whereabouts from %s", launcher.Name, ip, network, rtRange)
	}
	return launcher
}

// leasedRTAddress is the address of rtRange that Multus reports for the pod on network
// (namespace/name): whereabouts' lease, which KubeVirt's bridge binding hands to the
// guest by DHCP.
func leasedRTAddress(pod *corev1.Pod, network string) (string, error) {
	var statuses []nadv1.NetworkStatus
	if err := json.Unmarshal([]byte(pod.Annotations[nadv1.NetworkStatusAnnot]), &statuses); err != nil {
		return "", fmt.Errorf("virt-launcher pod %s: annotation %s: %w", pod.Name, nadv1.NetworkStatusAnnot, err)
	}
	_, cidr, _ := net.ParseCIDR(rtRange)
	for _, s := range statuses {
		if s.Name != network {
			continue
		}
		for _, ip := range s.IPs {
			if cidr.Contains(net.ParseIP(ip)) {
				return ip, nil
			}
		}
	}
	return "", fmt.Errorf("virt-launcher pod %s has no address of %s on %s: network-status %s", pod.Name, rtRange, network, pod.Annotations[nadv1.NetworkStatusAnnot])
}

// vmiFailure is what the VMI's Warning Events say.
func vmiFailure(ctx context.Context, t *testing.T, vmi *kubevirtv1.VirtualMachineInstance) string {
	t.Helper()
	events := &corev1.EventList{}
	if err := cl.List(ctx, events, client.InNamespace(vmi.Namespace), client.MatchingFields{
		"involvedObject.kind": "VirtualMachineInstance", "involvedObject.name": vmi.Name, "type": corev1.EventTypeWarning,
	}); err != nil {
		t.Fatalf("listing the Events of VMI %s: %v", vmi.Name, err)
	}
	var msgs []string
	for _, e := range events.Items {
		msgs = append(msgs, e.Reason+": "+e.Message)
	}
	return strings.Join(msgs, "; ")
}

// kernelFeatures says what this kernel refused of what the test's path needs (nil: it
// has it).
type kernelFeatures struct {
	// dummy is the dummy link type, which KubeVirt's bridge binding adds in the
	// launcher's network namespace to keep the pod interface's address.
	dummy error
	// htb is the HTB qdisc, the root of the NIC agent's schedule.
	htb error
}

func (k kernelFeatures) String() string {
	say := func(what string, err error) string {
		if err != nil {
			return "no " + what + " (" + err.Error() + ")"
		}
		return what
	}
	return say("dummy links", k.dummy) + ", " + say("HTB", k.htb)
}

// probeKernel tries the dummy link type and an HTB qdisc in a network namespace of its
// own, on a thread that ends with it.
func probeKernel(t *testing.T) kernelFeatures {
	t.Helper()
	type result struct {
		k   kernelFeatures
		err error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread, in the probe's namespace, exits with the goroutine
		ns, err := netns.New()
		if err != nil {
			done <- result{err: fmt.Errorf("creating a network namespace: %w", err)}
			return
		}
		defer ns.Close()
		var k kernelFeatures
		k.dummy = netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "probe0"}})
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "probe1"}, PeerName: "probe2"}
		if err := netlink.LinkAdd(veth); err != nil {
			done <- result{err: fmt.Errorf("creating a veth pair: %w", err)}
			return
		}
		l, err := netlink.LinkByName("probe1")
		if err != nil {
			done <- result{err: err}
			return
		}
		k.htb = netlink.QdiscAdd(netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT}))
		done <- result{k: k}
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("probing this kernel: %v", r.err)
	}
	return r.k
}

// uplinkUnavailable is the agent's latest Warning Event RTUplinkUnavailable on node
// about uplink since start, nil if there is none.
func uplinkUnavailable(ctx context.Context, t *testing.T, node, uplink string, start time.Time) *corev1.Event {
	t.Helper()
	events := &corev1.EventList{}
	if err := cl.List(ctx, events, client.MatchingFields{
		"involvedObject.kind": "Node", "involvedObject.name": node, "reason": isov1.EventReasonRTUplinkUnavailable,
	}); err != nil {
		t.Fatalf("listing the Events of node %s: %v", node, err)
	}
	var last *corev1.Event
	for i, e := range events.Items {
		at := e.LastTimestamp.Time
		if at.IsZero() {
			at = e.EventTime.Time
		}
		if at.Before(start.Add(-time.Second)) || !strings.Contains(e.Message, uplink) {
			continue
		}
		last = &events.Items[i]
	}
	return last
}

// readUplink reads what the kernel of node has on link's egress: the NIC agent's pod
// there prints it (nic-agent -show-uplink, the same netlink reads as the agent's own).
func readUplink(ctx context.Context, t *testing.T, node, link string) nic.Readback {
	t.Helper()
	pods := &corev1.PodList{}
	if err := cl.List(ctx, pods, client.InNamespace(nicAgentNS), client.MatchingLabels{"app.kubernetes.io/component": "nic-agent"}); err != nil {
		t.Fatalf("listing the NIC agent's pods: %v", err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != node || p.Status.Phase != corev1.PodRunning {
			continue
		}
		args := []string{"exec", "-n", nicAgentNS, p.Name, "--", "/nic-agent", "-show-uplink", link}
		out, err := exec.Command(kubectl, args...).Output()
		if err != nil {
			t.Fatalf("kubectl %s: %v%s", strings.Join(args, " "), err, stderrOf(err))
		}
		var r nic.Readback
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("nic-agent -show-uplink %s on %s: %v\n%s", link, node, err, out)
		}
		return r
	}
	t.Fatalf("no running NIC agent pod on node %s", node)
	return nic.Readback{}
}

// checkSchedule checks that s is isochron's schedule of one RT flow: the crawler's, in
// class want at its minimum bandwidth, its frames (source MAC mac) filtered into it.
func checkSchedule(t *testing.T, s nic.Readback, mac string, want rtnet.Class, minBandwidth int64) {
	t.Helper()
	if !s.Ours {
		t.Errorf("root qdisc %s, want isochron's htb %s", s.Root, nic.HandleString(netlink.MakeHandle(nic.Major, 0)))
		return
	}
	if len(s.Flows) != 1 {
		t.Errorf("%d RT flow classes (%s), want 1: the crawler's", len(s.Flows), s)
		return
	}
	c := s.Flows[0]
	if c.Prio != uint32(want.Rank) || c.Rate != uint64(minBandwidth) {
		t.Errorf("class %s: prio %d, rate %d bit/s; want prio %d (class %s), rate %d bit/s (spec.rtNIC.minBandwidth)",
			nic.HandleString(c.Handle), c.Prio, c.Rate, want.Rank, want.DSCP.Name, minBandwidth)
	}
	hw, err := net.ParseMAC(mac)
	if err != nil {
		t.Fatalf("the RT-NIC's MAC %q: %v", mac, err)
	}
	for _, f := range s.Filters {
		if f.ClassID != c.Handle || len(f.Keys) != 2 {
			continue
		}
		k := f.Keys
		if k[0].Val == binary.BigEndian.Uint32(hw[0:4]) && k[1].Val>>16 == uint32(binary.BigEndian.Uint16(hw[4:6])) {
			return
		}
	}
	t.Errorf("no u32 filter sends source MAC %s to class %s: %s", mac, nic.HandleString(c.Handle), s)
}
