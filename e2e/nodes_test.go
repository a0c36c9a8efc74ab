//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// The tests between nodes: a move by live migration, a drain with somewhere to go, a
// node lost. They run crawlers on the nodes of E2E_MOVE_NODES (a label selector; the
// local cluster's node VMs, e2e/local/nodes-up.sh) and need two of them Ready.
var (
	moveNodesSelector = os.Getenv("E2E_MOVE_NODES")
	// stopNode is a shell command that stops the node named by $NODE for good (the local
	// cluster kills its QEMU by PID); unset, the node-loss test is skipped.
	stopNode = os.Getenv("E2E_STOP_NODE")
)

// moveNodes returns the selector of the nodes crawlers move between and their names,
// and skips t unless two of them are Ready.
func moveNodes(ctx context.Context, t *testing.T) (map[string]string, []string) {
	t.Helper()
	sel, ready, why := readyMoveNodes(ctx, t)
	if why != "" {
		t.Skip(why)
	}
	return sel, ready
}

// readyMoveNodes returns the selector of the nodes crawlers move between and the names
// of those Ready and schedulable, or why there are not two of them.
func readyMoveNodes(ctx context.Context, t *testing.T) (sel map[string]string, ready []string, why string) {
	t.Helper()
	if moveNodesSelector == "" {
		return nil, nil, "E2E_MOVE_NODES (a label selector of two nodes or more) is not set: make e2e-local-multi sets it"
	}
	sel, err := labels.ConvertSelectorToLabelsMap(moveNodesSelector)
	if err != nil {
		t.Fatalf("E2E_MOVE_NODES %q: %v", moveNodesSelector, err)
	}
	nodes := &corev1.NodeList{}
	if err := cl.List(ctx, nodes, client.MatchingLabels(sel)); err != nil {
		t.Fatalf("listing nodes: %v", err)
	}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && !n.Spec.Unschedulable {
				ready = append(ready, n.Name)
			}
		}
	}
	sort.Strings(ready)
	if len(ready) < 2 {
		return sel, ready, fmt.Sprintf("nodes %s: %d Ready and schedulable (%v), want two", moveNodesSelector, len(ready), ready)
	}
	return sel, ready, ""
}

// onMoveNodes places a crawler on the move nodes.
func onMoveNodes(sel map[string]string) func(*isov1.CrawlerVM) {
	return func(c *isov1.CrawlerVM) {
		if c.Spec.Placement == nil {
			c.Spec.Placement = &isov1.Placement{}
		}
		c.Spec.Placement.NodeSelector = sel
	}
}

// shared makes a crawler shared, at 5 requests a second.
func shared(c *isov1.CrawlerVM) {
	c.Spec.RPS = 5
	c.Spec.CPUPlacement = isov1.CPUPlacementShared
}

// A crawler refuted under onRefuted: Replace moves to the other node as the same VMI: a
// live migration, the reservation held on both nodes while it runs, no outage. The gap
// in the guest's answers to a UDP echo sent from outside every 20 ms across the move is
// recorded (under emulation it is no real-time figure: the path is what is asserted). A
// migration KubeVirt aborts for not converging in time leaves the crawler where it was
// and is tried again: the test checks that and waits for the attempt that succeeds.
func TestRefutedCrawlerMovesByLiveMigration(t *testing.T) {
	ctx := context.Background()
	sel, _ := moveNodes(ctx, t)
	if !guestRunsAgent {
		t.Skip("needs the e2e guest (E2E_GUEST_RUNS_AGENT): a probe of its agent's crawl refutes the crawler, and its UDP echo measures the move")
	}
	ns := testNamespace(t)
	cvm := crawler(ns, "mover", shared, onMoveNodes(sel), func(c *isov1.CrawlerVM) {
		c.Spec.Placement.OnRefuted = isov1.RefutedReplace
	})
	cvm, vmi := runCrawlerVM(ctx, t, cvm)
	from := vmi.Status.NodeName
	// A tolerance of 1 ms: the model still places the crawler on either node (it
	// predicts tens of microseconds, at most 4 times that once probes corrected a node),
	// and a probe under emulation, whose interval error is tens of milliseconds, refutes
	// it.
	predicted := cvm.Status.Placement.PredictedError.Duration
	tol := time.Millisecond
	if predicted > tol/8 {
		t.Fatalf("the model predicts %s for the crawler on %s: too close to the test's %s tolerance to leave room for a move", predicted, from, tol)
	}
	patch := client.MergeFrom(cvm.DeepCopy())
	cvm.Spec.ErrorBudget.Tolerance = metav1.Duration{Duration: tol}
	if err := cl.Patch(ctx, cvm, patch); err != nil {
		t.Fatalf("setting spec.errorBudget.tolerance to %s: %v", tol, err)
	}
	t.Logf("crawler runs on %s (VMI uid %s), predicted interval error %s: tolerance set to %s", from, vmi.UID, predicted, tol)
	echo := startEcho(ctx, t, vmi)

	var seenMove *isov1.Move
	var notReady, failed []string
	waitProgress(t, stallTimeout, progressLimit, "the crawler moved by a live migration", func() (string, bool) { return nsProgress(ctx, t, ns) }, func() (bool, string, error) {
		condition(ctx, t, cvm, isov1.ConditionReady)
		if c := meta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			notReady = append(notReady, fmt.Sprintf("%v", c))
		}
		if m := cvm.Status.Move; m != nil && m.Reason == isov1.MoveRefuted && seenMove == nil {
			seenMove = m.DeepCopy()
			t.Logf("move in progress: %s %s from %s to %s, migration %s; status.placement.node %s", m.Mode, m.Reason, m.From, m.To, m.Migration, cvm.Status.Placement.Node)
		}
		// The move after the refutation (an earlier one, such as a kubelet's refusal of
		// the first launcher pod, does not count).
		lm := cvm.Status.LastMove
		if lm != nil && lm.Reason == isov1.MoveRefuted && lm.Result == isov1.MoveFailed && !slices.Contains(failed, lm.Migration) {
			// A migration that does not converge in time is aborted (the MigrationPolicy
			// forces none through), as it can be under emulation on a loaded machine: the
			// crawler must run on where it was, and the move is tried again later.
			failed = append(failed, lm.Migration)
			t.Logf("move attempt %d failed: %s", len(failed), lm.Message)
			if cvm.Status.Placement.Node != from || lm.RetryAfter == nil || cvm.Status.Move != nil {
				t.Errorf("after the failed attempt: placed on %s, retry after %v, moving %+v; want it on %s, a retry time, no move", cvm.Status.Placement.Node, lm.RetryAfter, cvm.Status.Move, from)
			}
		}
		return lm != nil && lm.Reason == isov1.MoveRefuted && lm.Result != isov1.MoveFailed && cvm.Status.Move == nil, fmt.Sprintf("move %+v, last move %+v, SLOConfirmed %+v", cvm.Status.Move, lm, meta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionSLOConfirmed)), nil
	})
	gap := echo.stop()
	lm := cvm.Status.LastMove
	t.Logf("last move: %s %s %s from %s to %s, migration %s, KubeVirt's migration time %v: %s", lm.Result, lm.Mode, lm.Reason, lm.From, lm.To, lm.Migration, lm.MigrationTime, lm.Message)
	if lm.Result != isov1.MoveSucceeded || lm.Mode != isov1.MoveLive || lm.Reason != isov1.MoveRefuted || lm.From != from || lm.To == from {
		t.Errorf("last move %+v: want a live move after the refutation, succeeded, from %s to another node", lm, from)
	}
	if seenMove == nil {
		t.Errorf("status.move was never seen set: the reservation on both nodes is not shown")
	} else if seenMove.From != from || seenMove.To != lm.To || seenMove.Mode != isov1.MoveLive {
		t.Errorf("status.move %+v during the move: want from %s to %s, live", seenMove, from, lm.To)
	}
	after := &kubevirtv1.VirtualMachineInstance{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), after); err != nil {
		t.Fatal(err)
	}
	if after.UID != vmi.UID || after.Status.NodeName != lm.To || cvm.Status.Placement.Node != lm.To {
		t.Errorf("after the move: VMI uid %s on %s, placed on %s; want the same VMI (uid %s) on %s", after.UID, after.Status.NodeName, cvm.Status.Placement.Node, vmi.UID, lm.To)
	}
	if ms := after.Status.MigrationState; ms != nil && ms.StartTimestamp != nil && ms.EndTimestamp != nil {
		t.Logf("KubeVirt's migration state: %s to %s (%s), completed %v", ms.StartTimestamp.UTC().Format(time.RFC3339), ms.EndTimestamp.UTC().Format(time.RFC3339), ms.EndTimestamp.Sub(ms.StartTimestamp.Time), ms.Completed)
	}
	if len(notReady) > 0 {
		t.Errorf("Ready was not True during the move: %v", notReady)
	}
	if len(cvm.Status.Outages) > 0 {
		t.Errorf("outages %+v: a live move is no outage", cvm.Status.Outages)
	}
	t.Logf("UDP echo from outside the guest, every %s: %s", echoEvery, gap)
	if gap.replies == 0 {
		t.Errorf("the guest answered no UDP echo across the move")
	}
	deleteAndWaitGone(ctx, t, cvm, launcherPod(ctx, t, after))
}

// A drain of a node with crawlers completes: each crawler runs on the node the model
// chose for it, as the same VMI (live migration), and none was restarted.
func TestDrainMovesCrawlersWhereTheModelChose(t *testing.T) {
	ctx := context.Background()
	sel, _ := moveNodes(ctx, t)
	ns := testNamespace(t)
	type running struct {
		cvm *isov1.CrawlerVM
		vmi *kubevirtv1.VirtualMachineInstance
	}
	cvms := []*isov1.CrawlerVM{crawler(ns, "drain-a", shared, onMoveNodes(sel)), crawler(ns, "drain-b", shared, onMoveNodes(sel))}
	var crawlers []running
	for i, v := range runCrawlerVMs(ctx, t, cvms...) {
		crawlers = append(crawlers, running{cvms[i], v})
	}
	node := crawlers[0].vmi.Status.NodeName
	t.Cleanup(func() { _ = exec.Command(kubectl, "uncordon", node).Run() })
	var onNode []running
	for _, r := range crawlers {
		t.Logf("crawler %s runs on %s (VMI uid %s)", r.cvm.Name, r.vmi.Status.NodeName, r.vmi.UID)
		if r.vmi.Status.NodeName == node {
			onNode = append(onNode, r)
		}
	}

	// The whole node, as an administrator drains it: the cluster's DaemonSets stay. The
	// drain runs as long as the moves progress (drain).
	out, took, err := drain(ctx, t, ns, node, "--ignore-daemonsets", "--delete-emptydir-data")
	t.Logf("kubectl drain %s (%s): %v\n%s", node, took.Round(time.Second), err, out)
	if err != nil {
		t.Fatalf("the drain did not complete")
	}
	for _, r := range onNode {
		cvm := r.cvm
		condition(ctx, t, cvm, isov1.ConditionReady)
		lm := cvm.Status.LastMove
		got := &kubevirtv1.VirtualMachineInstance{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(r.vmi), got); err != nil {
			t.Fatal(err)
		}
		t.Logf("crawler %s: VMI uid %s on %s, placed on %s; last move %+v", cvm.Name, got.UID, got.Status.NodeName, cvm.Status.Placement.Node, lm)
		if got.UID != r.vmi.UID || got.Status.Phase != kubevirtv1.Running {
			t.Errorf("crawler %s: VMI uid %s phase %s, want the same VMI (uid %s) running: it was restarted", cvm.Name, got.UID, got.Status.Phase, r.vmi.UID)
		}
		if got.Status.NodeName == node || got.Status.NodeName != cvm.Status.Placement.Node {
			t.Errorf("crawler %s runs on %s, placed on %s: want the model's node, not the drained %s", cvm.Name, got.Status.NodeName, cvm.Status.Placement.Node, node)
		}
		if lm == nil || lm.Result != isov1.MoveSucceeded || lm.Mode != isov1.MoveLive || lm.Reason != isov1.MoveEvacuation {
			t.Errorf("crawler %s: last move %+v, want a live evacuation that succeeded", cvm.Name, lm)
		}
		if len(cvm.Status.Outages) > 0 {
			t.Errorf("crawler %s: outages %+v, want none", cvm.Name, cvm.Status.Outages)
		}
	}
	for _, r := range crawlers {
		got := &kubevirtv1.VirtualMachineInstance{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(r.vmi), got); err == nil {
			deleteAndWaitGone(ctx, t, r.cvm, launcherPod(ctx, t, got))
		}
	}
}

// A node lost for good (its QEMU killed, E2E_STOP_NODE) has its crawlers reported
// (Ready=False, NodeLost); once the test fences it (the out-of-service taint, as an
// operator or a fencing agent does when the node is known to be off), they run on another
// node, and each outage is recorded with its cause and duration. The node stays dead:
// the suite runs this test last (make e2e-local-multi).
func TestLostNodeCrawlersRunElsewhereOnceFenced(t *testing.T) {
	ctx := context.Background()
	sel, _ := moveNodes(ctx, t)
	if stopNode == "" {
		t.Skip("E2E_STOP_NODE (a command that stops the node $NODE for good) is not set: make e2e-local-multi sets it")
	}
	ns := testNamespace(t)
	cvm, vmi := runCrawlerVM(ctx, t, crawler(ns, "survivor", shared, onMoveNodes(sel)))
	node := vmi.Status.NodeName
	stop := exec.Command("sh", "-c", stopNode)
	stop.Env = append(os.Environ(), "NODE="+node)
	if out, err := stop.CombinedOutput(); err != nil {
		t.Fatalf("stopping node %s (%s): %v\n%s", node, stopNode, err, out)
	}
	stopped := time.Now()
	t.Logf("stopped node %s, where crawler %s ran (VMI uid %s)", node, cvm.Name, vmi.UID)

	waitFor(t, 10*time.Minute, "Ready=False/NodeLost", func() (bool, string, error) {
		c := condition(ctx, t, cvm, isov1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == isov1.ReasonNodeLost, fmt.Sprintf("Ready: %v", c), nil
	})
	t.Logf("reported %s after the node stopped: %s", time.Since(stopped).Round(time.Second), meta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionReady).Message)

	taint := corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}
	args := []string{"taint", "node", node, taint.ToString()}
	if out, err := exec.Command(kubectl, args...).CombinedOutput(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	fenced := time.Now()
	next := &kubevirtv1.VirtualMachineInstance{}
	waitFor(t, runTimeout, "the crawler running on another node", func() (bool, string, error) {
		c := condition(ctx, t, cvm, isov1.ConditionReady)
		if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), next); err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		ok := c != nil && c.Status == metav1.ConditionTrue && next.Status.Phase == kubevirtv1.Running && next.Status.NodeName != node
		return ok, fmt.Sprintf("Ready %v; VMI uid %s on %s, %s", c, next.UID, next.Status.NodeName, next.Status.Phase), nil
	})
	t.Logf("running on %s %s after the fence, %s after the node stopped", next.Status.NodeName, time.Since(fenced).Round(time.Second), time.Since(stopped).Round(time.Second))
	if cvm.Status.Placement == nil || cvm.Status.Placement.Node != next.Status.NodeName {
		t.Errorf("placed on %+v, the VMI runs on %s", cvm.Status.Placement, next.Status.NodeName)
	}
	waitFor(t, time.Minute, "the outage recorded", func() (bool, string, error) {
		condition(ctx, t, cvm, isov1.ConditionReady)
		o := cvm.Status.Outages
		return len(o) == 1 && o[0].End != nil, fmt.Sprintf("outages %+v", o), nil
	})
	o := cvm.Status.Outages[0]
	t.Logf("recorded outage: cause %s, %s (%s to %s): %s", o.Cause, o.Duration.Duration, o.Start.UTC().Format(time.RFC3339), o.End.UTC().Format(time.RFC3339), o.Message)
	if o.Cause != isov1.OutageNodeLoss || o.Duration == nil {
		t.Errorf("outage %+v: want cause %s with its duration", o, isov1.OutageNodeLoss)
	}
	deleteAndWaitGone(ctx, t, cvm, launcherPod(ctx, t, next))
}

// runCrawlerVM creates cvm and waits until its VMI runs and it is Ready.
func runCrawlerVM(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM) (*isov1.CrawlerVM, *kubevirtv1.VirtualMachineInstance) {
	t.Helper()
	return cvm, runCrawlerVMs(ctx, t, cvm)[0]
}

// runCrawlerVMs creates every crawler before it waits for any: their launcher pods and
// guests start side by side (on the emulated nodes, minutes each). It returns their VMIs,
// in order, once each runs and its crawler is Ready, waiting as long as their start
// progresses (waitProgress).
func runCrawlerVMs(ctx context.Context, t *testing.T, cvms ...*isov1.CrawlerVM) []*kubevirtv1.VirtualMachineInstance {
	t.Helper()
	for _, cvm := range cvms {
		if err := cl.Create(ctx, cvm); err != nil {
			t.Fatalf("creating CrawlerVM %s: %v", cvm.Name, err)
		}
	}
	vmis := make([]*kubevirtv1.VirtualMachineInstance, len(cvms))
	for i, cvm := range cvms {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		progress := func() (string, bool) { return nsProgress(ctx, t, cvm.Namespace) }
		waitProgress(t, stallTimeout, progressLimit, cvm.Name+": VMI Running and Ready=True", progress, func() (bool, string, error) {
			if err := cl.Get(ctx, client.ObjectKeyFromObject(cvm), vmi); err != nil {
				return false, err.Error(), client.IgnoreNotFound(err)
			}
			c := condition(ctx, t, cvm, isov1.ConditionReady)
			return vmi.Status.Phase == kubevirtv1.Running && c != nil && c.Status == metav1.ConditionTrue,
				fmt.Sprintf("VMI phase %s, Ready: %v", vmi.Status.Phase, c), nil
		})
		vmis[i] = vmi
	}
	return vmis
}

// echoEvery is how often the echo prober sends.
const echoEvery = 20 * time.Millisecond

// echoProber sends a UDP datagram to the guest's echo service (port 7, e2e/guest) every
// echoEvery, at the address of every virt-launcher pod of the VMI (masquerade binding:
// the pod's address reaches the guest; a migration's target pod has its own), and keeps
// the longest time between two answers.
type echoProber struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	res    echoResult
}

type echoResult struct {
	sent, replies int
	// gap is the longest time between two answers, and when it ended.
	gap    time.Duration
	gapEnd time.Time
}

func (r echoResult) String() string {
	return fmt.Sprintf("%d sent, %d answered, the longest time without an answer %s (ending %s)", r.sent, r.replies, r.gap.Round(time.Millisecond), r.gapEnd.UTC().Format("15:04:05.000"))
}

func startEcho(ctx context.Context, t *testing.T, vmi *kubevirtv1.VirtualMachineInstance) *echoProber {
	t.Helper()
	conn, err := net.ListenUDP("udp", nil)
	if err != nil {
		t.Fatalf("echo prober: %v", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &echoProber{cancel: cancel, done: make(chan struct{})}
	var addrs []*net.UDPAddr
	var amu sync.Mutex
	refresh := func() {
		pods := &corev1.PodList{}
		if err := cl.List(ctx, pods, client.InNamespace(vmi.Namespace), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
			return
		}
		var next []*net.UDPAddr
		for _, pod := range pods.Items {
			if ip := net.ParseIP(pod.Status.PodIP); ip != nil && pod.Status.Phase == corev1.PodRunning {
				next = append(next, &net.UDPAddr{IP: ip, Port: 7})
			}
		}
		amu.Lock()
		addrs = next
		amu.Unlock()
	}
	refresh()
	go func() { // receiver
		buf := make([]byte, 64)
		var last time.Time
		for {
			if _, _, err := conn.ReadFromUDP(buf); err != nil {
				return
			}
			now := time.Now()
			p.mu.Lock()
			p.res.replies++
			if !last.IsZero() && now.Sub(last) > p.res.gap {
				p.res.gap, p.res.gapEnd = now.Sub(last), now
			}
			last = now
			p.mu.Unlock()
		}
	}()
	go func() { // sender
		defer close(p.done)
		defer conn.Close()
		tick := time.NewTicker(echoEvery)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if n%10 == 0 {
				refresh()
			}
			amu.Lock()
			to := slices.Clone(addrs)
			amu.Unlock()
			for _, a := range to {
				_, _ = conn.WriteToUDP([]byte(fmt.Sprintf("isochron-e2e %d", n)), a)
			}
			p.mu.Lock()
			p.res.sent++
			p.mu.Unlock()
		}
	}()
	return p
}

// stop ends the prober and returns what it saw.
func (p *echoProber) stop() echoResult {
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res
}
