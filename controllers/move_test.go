package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/test/support/kubelet"
	"isochron.io/isochron/test/support/virtsim"
)

// The move tests: crawlers leave their node (a refuting probe under onRefuted Replace, a
// drain) by a live migration to the node the model chose, KubeVirt's migration controller
// played by virtsim.

// migrations decides how the migrations of namespace ns end, until the test ends.
func migrations(t *testing.T, ns string, outcome func(*kubevirtv1.VirtualMachineInstanceMigration) virtsim.Outcome) {
	t.Helper()
	kv.SetOutcome(func(m *kubevirtv1.VirtualMachineInstanceMigration) virtsim.Outcome {
		if m.Namespace != ns {
			return virtsim.Complete
		}
		return outcome(m)
	})
	t.Cleanup(func() { kv.SetOutcome(nil) })
}

// heldMigrations keeps ns's migrations Running until release is called; from then on
// they complete. (virtsim asks for the outcome from its own goroutine: an atomic.)
func heldMigrations(t *testing.T, ns string) (release func()) {
	t.Helper()
	var released atomic.Bool
	migrations(t, ns, func(*kubevirtv1.VirtualMachineInstanceMigration) virtsim.Outcome {
		if released.Load() {
			return virtsim.Complete
		}
		return virtsim.Hold
	})
	return func() { released.Store(true) }
}

// exclusiveCPUs is what the ledger holds on node (isochron_node_exclusive_cpus).
func exclusiveCPUs(t *testing.T, node string) float64 {
	t.Helper()
	v, _ := gauge(t, "isochron_node_exclusive_cpus", map[string]string{"node": node})
	return v
}

// movedEvents are the crawler's Events of reason.
func eventsOf(t *testing.T, c *isov1.CrawlerVM, reason string) []string {
	t.Helper()
	var out []string
	for _, e := range events(t, c) {
		if strings.HasPrefix(e, reason+": ") {
			out = append(out, e)
		}
	}
	return out
}

// Under onRefuted Replace a refuted crawler moves to the other node by a live migration:
// the same VMI, pinned there first, its reservation held on both nodes until the
// migration completes; once per probe. Its refutation stays visible until a probe judges
// it on the new node. Refuted there too, it does not go back to the node that refuted it
// (status.refutedOn): it stays and says so.
func TestRefutedCrawlerMovesLive(t *testing.T) {
	ns := namespace(t)
	createNode(t, rtNode("mv-1", "it", "mv"), 16)
	createNode(t, rtNode("mv-2", "it", "mv"), 16)
	release := heldMigrations(t, ns)
	c, vmi := placedCrawler(t, ns, "mover", "mv", withOnRefuted(isov1.RefutedReplace))
	from := c.Status.Placement.Node
	to := map[string]string{"mv-1": "mv-2", "mv-2": "mv-1"}[from]
	host := float64(c.Status.Sizing.HostCPUs)
	before := exclusiveCPUs(t, to)

	first := endProbe(t, c, "")
	waitForCrawler(t, c, "a live migration to "+to, func(c *isov1.CrawlerVM) bool {
		m := c.Status.Move
		return m != nil && m.To == to && m.From == from && m.Reason == isov1.MoveRefuted && m.Mode == isov1.MoveLive && m.Migration != ""
	})
	if c.Status.Placement.Node != to || !hasCondition(c, isov1.ConditionMoving, metav1.ConditionTrue, isov1.ReasonMigrating) ||
		!hasCondition(c, isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning) {
		t.Errorf("while migrating: node %s, %s, %s; want placed on %s, Moving and still Ready", c.Status.Placement.Node,
			condition(c, isov1.ConditionMoving), condition(c, isov1.ConditionReady), to)
	}
	// The refutation stays visible while the crawler moves.
	if !hasCondition(c, isov1.ConditionSLOConfirmed, metav1.ConditionFalse, isov1.ReasonSLORefuted) {
		t.Errorf("while moving: %s, want the refutation shown", condition(c, isov1.ConditionSLOConfirmed))
	}
	mig := &kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.Status.Move.Migration}}
	if !get(t, mig) || mig.Spec.VMIName != vmi.Name || mig.Spec.AddedNodeSelector["kubernetes.io/hostname"] != to {
		t.Errorf("migration %s: %+v, want VMI %s to node %s", mig.Name, mig.Spec, vmi.Name, to)
	}
	// The migration was created once KubeVirt had pinned the VMI to the new node: its
	// target pod is built from the VMI's affinity.
	if get(t, vmi); render.PinnedNode(&vmi.Spec) != to {
		t.Errorf("the migrating VMI is pinned to %q, want %s", render.PinnedNode(&vmi.Spec), to)
	}
	// Both nodes hold the crawler until the migration ends.
	eventually(t, "the reservation held on both nodes", func() (bool, string) {
		src, dst := exclusiveCPUs(t, from), exclusiveCPUs(t, to)
		return src >= host && dst >= before+host, fmt.Sprintf("%s %v, %s %v (was %v), host CPUs %v", from, src, to, dst, before, host)
	})

	release()
	waitForCrawler(t, c, "the move to end", func(c *isov1.CrawlerVM) bool {
		return c.Status.Move == nil && c.Status.LastMove != nil
	})
	last := c.Status.LastMove
	if last.Result != isov1.MoveSucceeded || last.Mode != isov1.MoveLive || last.From != from || last.To != to || last.MigrationTime == nil ||
		!hasCondition(c, isov1.ConditionMoving, metav1.ConditionFalse, isov1.ReasonMoved) {
		t.Errorf("lastMove %+v, %s: want a live move from %s to %s that says what it cost", last, condition(c, isov1.ConditionMoving), from, to)
	}
	if get(t, vmi); vmi.Status.NodeName != to {
		t.Errorf("the VMI runs on %s, want %s", vmi.Status.NodeName, to)
	}
	got := waitForVMI(t, client.ObjectKeyFromObject(c), func(*kubevirtv1.VirtualMachineInstance) bool { return true })
	if got.UID != vmi.UID {
		t.Errorf("the VMI was replaced (UID %s, was %s): a live migration moves the same VMI", got.UID, vmi.UID)
	}
	eventually(t, "node "+from+" released", func() (bool, string) {
		v := exclusiveCPUs(t, from)
		return v < host, fmt.Sprint(v)
	})
	// The refutation is shown until a probe judges the crawler on its new node.
	if get(t, c); !hasCondition(c, isov1.ConditionSLOConfirmed, metav1.ConditionFalse, isov1.ReasonSLORefuted) ||
		!strings.Contains(condition(c, isov1.ConditionSLOConfirmed), "on node "+from) {
		t.Errorf("after the move: %s, want the refutation on %s still shown", condition(c, isov1.ConditionSLOConfirmed), from)
	}
	if got := awaitEvents(t, c, isov1.EventReasonMoving+": "); len(got) != 1 {
		t.Errorf("%d Moving Events for one refuting probe, want 1: %v", len(got), got)
	}
	if len(c.Status.Outages) != 0 {
		t.Errorf("a live migration was counted as an outage: %+v", c.Status.Outages)
	}
	if got := awaitEvents(t, c, isov1.ReasonMoved+": "); len(got) != 1 || !strings.Contains(got[0], "live-migrated") {
		t.Errorf("Moved Events %v: want one that says it was live-migrated", got)
	}
	awaitGauge(t, "isochron_crawler_moves_total", map[string]string{"reason": "Refuted", "mode": "Live", "result": "Succeeded"}, "1 or more",
		func(v float64, ok bool) bool { return ok && v >= 1 })

	// A probe on the new node (trigger Moved) refutes the SLO there too. After the minimum
	// move interval the crawler would move, but the only other node refuted it within the
	// refuted-node memory: it stays and says so.
	second := endProbe(t, c, first)
	waitForCrawler(t, c, "the second refutation", func(c *isov1.CrawlerVM) bool {
		return c.Status.LastProbe != nil && c.Status.LastProbe.Job == second && len(c.Status.RefutedOn) == 2
	})
	if c.Status.LastProbe.Trigger != isov1.TriggerMoved || c.Status.LastProbe.Node != to {
		t.Errorf("the probe after the move: trigger %s on node %q, want Moved on %s", c.Status.LastProbe.Trigger, c.Status.LastProbe.Node, to)
	}
	clk.Step(time.Hour + time.Minute)
	touch(t, vmi, "after the interval")
	waitForCrawler(t, c, "the crawler to stay, refuted everywhere", func(c *isov1.CrawlerVM) bool {
		r := c.Status.LastRemediation
		return r != nil && r.Job == second && r.To == ""
	})
	if msg := c.Status.LastRemediation.Message; c.Status.Placement.Node != to || !strings.Contains(msg, "refuting the crawler's SLO") {
		t.Errorf("on %s: %q; want it to stay on %s, saying %s refuted it", c.Status.Placement.Node, msg, to, from)
	}
	if got := eventsOf(t, c, isov1.EventReasonMoving); len(got) != 1 {
		t.Errorf("bounced: %v", got)
	}
}

// A migration that fails leaves the crawler where it runs, releases the node it was to
// move to, says why, and is tried again after its backoff.
func TestFailedMigrationLeavesTheCrawlerAndRetries(t *testing.T) {
	ns := namespace(t)
	createNode(t, rtNode("fail-1", "it", "fail"), 16)
	createNode(t, rtNode("fail-2", "it", "fail"), 16)
	fail := true
	migrations(t, ns, func(*kubevirtv1.VirtualMachineInstanceMigration) virtsim.Outcome {
		if fail {
			return virtsim.Fail
		}
		return virtsim.Complete
	})
	c, vmi := placedCrawler(t, ns, "failing", "fail", withOnRefuted(isov1.RefutedReplace))
	from := c.Status.Placement.Node
	to := map[string]string{"fail-1": "fail-2", "fail-2": "fail-1"}[from]
	refute(t, c)
	waitForCrawler(t, c, "the failed move", func(c *isov1.CrawlerVM) bool {
		return c.Status.Move == nil && c.Status.LastMove != nil && c.Status.LastMove.Result == isov1.MoveFailed
	})
	last := c.Status.LastMove
	if c.Status.Placement.Node != from || last.Failures != 1 || last.RetryAfter == nil ||
		!hasCondition(c, isov1.ConditionMoving, metav1.ConditionFalse, isov1.ReasonMoveFailed) || !strings.Contains(last.Message, "the target did not keep up") {
		t.Errorf("after the failure: node %s, lastMove %+v, %s; want it on %s, the reason and a retry time", c.Status.Placement.Node, last, condition(c, isov1.ConditionMoving), from)
	}
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.Name}}
	eventually(t, "the VM pinned back to "+from, func() (bool, string) {
		get(t, vm)
		get(t, vmi)
		return render.PinnedNode(&vm.Spec.Template.Spec) == from && render.PinnedNode(&vmi.Spec) == from,
			render.PinnedNode(&vm.Spec.Template.Spec) + " " + render.PinnedNode(&vmi.Spec)
	})
	if vmi.Status.NodeName != from || !vmi.DeletionTimestamp.IsZero() {
		t.Errorf("the VMI: node %s, deleting %v; want it running on %s", vmi.Status.NodeName, vmi.DeletionTimestamp, from)
	}
	if got := awaitEvents(t, c, isov1.ReasonMoveFailed+": "); len(got) != 1 {
		t.Errorf("MoveFailed Events %v, want one", got)
	}

	// After the backoff, the move is tried again, and succeeds.
	fail = false
	clk.Step(move.Backoff(1) + time.Second)
	touch(t, vmi, "after the backoff")
	waitForCrawler(t, c, "the second try to succeed", func(c *isov1.CrawlerVM) bool {
		return c.Status.LastMove != nil && c.Status.LastMove.Result == isov1.MoveSucceeded && c.Status.Placement.Node == to
	})
}

// A migration that someone aborts (kubectl delete vmim; KubeVirt aborts a deleted
// migration) ends the move as failed: the crawler runs on where it was, the same VMI, the
// node it was to move to is released, and the move is tried again after its backoff.
func TestAbortedMigrationLeavesTheCrawlerWhereItRuns(t *testing.T) {
	ns := namespace(t)
	createNode(t, rtNode("abort-1", "it", "abort"), 16)
	createNode(t, rtNode("abort-2", "it", "abort"), 16)
	migrations(t, ns, func(*kubevirtv1.VirtualMachineInstanceMigration) virtsim.Outcome { return virtsim.Hold })
	c, vmi := placedCrawler(t, ns, "aborted", "abort", withOnRefuted(isov1.RefutedReplace))
	from := c.Status.Placement.Node
	to := map[string]string{"abort-1": "abort-2", "abort-2": "abort-1"}[from]
	host := float64(c.Status.Sizing.HostCPUs)
	before := exclusiveCPUs(t, to)
	refute(t, c)
	waitForCrawler(t, c, "a migration under way", func(c *isov1.CrawlerVM) bool {
		return c.Status.Move != nil && c.Status.Move.Migration != ""
	})
	eventually(t, "the reservation held on "+to, func() (bool, string) {
		v := exclusiveCPUs(t, to)
		return v >= before+host, fmt.Sprint(v)
	})
	mig := &kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.Status.Move.Migration}}
	if err := k8s.Delete(context.Background(), mig); err != nil {
		t.Fatalf("aborting migration %s: %v", mig.Name, err)
	}
	waitForCrawler(t, c, "the aborted move", func(c *isov1.CrawlerVM) bool {
		return c.Status.Move == nil && c.Status.LastMove != nil
	})
	last := c.Status.LastMove
	if last.Result != isov1.MoveFailed || last.RetryAfter == nil || c.Status.Placement.Node != from ||
		!hasCondition(c, isov1.ConditionMoving, metav1.ConditionFalse, isov1.ReasonMoveFailed) ||
		(!strings.Contains(last.Message, "aborted") && !strings.Contains(last.Message, "deleted")) {
		t.Errorf("after the abort: node %s, lastMove %+v, %s; want it on %s, failed with the abort said and a retry time",
			c.Status.Placement.Node, last, condition(c, isov1.ConditionMoving), from)
	}
	eventually(t, "node "+to+" released", func() (bool, string) {
		v := exclusiveCPUs(t, to)
		return v < before+host, fmt.Sprint(v)
	})
	got := waitForVMI(t, client.ObjectKeyFromObject(c), func(*kubevirtv1.VirtualMachineInstance) bool { return true })
	if got.UID != vmi.UID || got.Status.NodeName != from || !got.DeletionTimestamp.IsZero() {
		t.Errorf("the VMI: UID %s (was %s) on %s, deleting %v; want the same VMI running on %s", got.UID, vmi.UID, got.Status.NodeName, got.DeletionTimestamp, from)
	}
	if len(c.Status.Outages) != 0 {
		t.Errorf("an aborted live migration was counted as an outage: %+v", c.Status.Outages)
	}
}

// A move whose status write lost a conflict after it created its migration (seen in a
// drain on the local cluster's node VMs) does not have the migration's name in
// status.move. It finds the migration again by the name the move gives it: KubeVirt's
// admission refuses a second migration while the first is in flight, and a refusal is no
// reason to restart the crawler. The same VMI moves live.
func TestMoveFindsItsUnrecordedMigration(t *testing.T) {
	ns := namespace(t)
	createNode(t, rtNode("unrec-1", "it", "unrec"), 16)
	createNode(t, rtNode("unrec-2", "it", "unrec"), 16)
	release := heldMigrations(t, ns)
	c, vmi := placedCrawler(t, ns, "unrecorded", "unrec", withOnRefuted(isov1.RefutedReplace))
	from := c.Status.Placement.Node
	refute(t, c)
	waitForCrawler(t, c, "a migration under way", func(c *isov1.CrawlerVM) bool {
		return c.Status.Move != nil && c.Status.Move.Migration != ""
	})
	name := c.Status.Move.Migration
	// What the lost write leaves: the move, without its migration.
	if err := k8s.Status().Patch(context.Background(), c, client.RawPatch(types.MergePatchType, []byte(`{"status":{"move":{"migration":null}}}`))); err != nil {
		t.Fatal(err)
	}
	touch(t, vmi, "after the lost write")
	waitForCrawler(t, c, "the move's migration found again", func(c *isov1.CrawlerVM) bool {
		return c.Status.Move != nil && c.Status.Move.Migration == name
	})
	if got := waitForVMI(t, client.ObjectKeyFromObject(c), func(*kubevirtv1.VirtualMachineInstance) bool { return true }); got.UID != vmi.UID || !got.DeletionTimestamp.IsZero() ||
		c.Status.Move.Mode != isov1.MoveLive {
		t.Fatalf("VMI uid %s (was %s), deleting %v, move %+v: want the same VMI migrating live", got.UID, vmi.UID, got.DeletionTimestamp, c.Status.Move)
	}
	migs := &kubevirtv1.VirtualMachineInstanceMigrationList{}
	if err := k8s.List(context.Background(), migs, client.InNamespace(ns)); err != nil || len(migs.Items) != 1 {
		t.Errorf("migrations: %d (%v), want the move's one", len(migs.Items), err)
	}
	release()
	waitForCrawler(t, c, "the move to end", func(c *isov1.CrawlerVM) bool {
		return c.Status.Move == nil && c.Status.LastMove != nil
	})
	if l := c.Status.LastMove; l.Result != isov1.MoveSucceeded || l.Mode != isov1.MoveLive || l.From != from || len(c.Status.Outages) > 0 {
		t.Errorf("last move %+v, outages %+v: want a live move, no outage", l, c.Status.Outages)
	}
}

// A drain hands the crawler to isochron: the eviction of its launcher is refused and marks
// the VMI for evacuation (evictionStrategy External), and isochron moves it live to a node
// the model chose. With nowhere to go it stays, says what is missing, and the drain waits.
func TestDrainHandsTheCrawlerToIsochron(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("drain-1", "it", "drain"), 16)
	c, vmi := placedCrawler(t, ns, "drained", "drain")

	// The only node, cordoned (kubectl drain's first step): the eviction is refused, and
	// the crawler says the drain waits.
	cordonNode(t, "drain-1")
	if err := kv.Evict(ctx, client.ObjectKeyFromObject(vmi)); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction: %v, want it refused (429)", err)
	}
	waitForCrawler(t, c, "MoveBlocked", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionMoving, metav1.ConditionFalse, isov1.ReasonMoveBlocked)
	})
	if msg := condition(c, isov1.ConditionMoving); !strings.Contains(msg, "node drain-1 is being drained") || !strings.Contains(msg, "the drain waits") {
		t.Errorf("%s: want it to say which node drains and that the drain waits", msg)
	}
	if get(t, vmi); !vmi.DeletionTimestamp.IsZero() || vmi.Status.NodeName != "drain-1" {
		t.Errorf("the crawler with nowhere to go was not kept running: %+v", vmi.Status)
	}

	// A node joins: the crawler moves there, live, and the evacuation ends.
	createNode(t, rtNode("drain-2", "it", "drain"), 16)
	waitForCrawler(t, c, "the evacuation to drain-2", func(c *isov1.CrawlerVM) bool {
		l := c.Status.LastMove
		return l != nil && l.Reason == isov1.MoveEvacuation && l.Result == isov1.MoveSucceeded && c.Status.Placement.Node == "drain-2"
	})
	get(t, vmi)
	if vmi.Status.NodeName != "drain-2" || vmi.Status.EvacuationNodeName != "" || c.Status.LastMove.Mode != isov1.MoveLive {
		t.Errorf("VMI on %s, evacuation %q, mode %s: want it live-migrated to drain-2 and the evacuation over", vmi.Status.NodeName, vmi.Status.EvacuationNodeName, c.Status.LastMove.Mode)
	}
	if err := kv.Evict(ctx, client.ObjectKeyFromObject(vmi)); !apierrors.IsTooManyRequests(err) {
		t.Errorf("eviction on drain-2: %v, want it refused again (the next drain is isochron's too)", err)
	}
	if get(t, c); c.Status.Move == nil || c.Status.Move.To == "drain-2" {
		// Evicted from drain-2 with drain-1 still cordoned: no node, or drain-1 is
		// avoided: the crawler never goes back to a draining node.
		if c.Status.Move != nil {
			t.Errorf("moving to %s", c.Status.Move.To)
		}
	}
}

// A VMI KubeVirt reports not live-migratable moves cold: it restarts on the node the model
// chose, and the crawler says why.
func TestNotLiveMigratableMovesCold(t *testing.T) {
	ns := namespace(t)
	createNode(t, rtNode("cold-1", "it", "cold"), 16)
	createNode(t, rtNode("cold-2", "it", "cold"), 16)
	c, vmi := placedCrawler(t, ns, "frozen", "cold", withOnRefuted(isov1.RefutedReplace))
	from := c.Status.Placement.Node
	to := map[string]string{"cold-1": "cold-2", "cold-2": "cold-1"}[from]
	if err := kubelet.SetLiveMigratable(context.Background(), k8s, vmi, false, "InterfaceNotLiveMigratable", "cannot migrate VMI which does not use masquerade"); err != nil {
		t.Fatal(err)
	}
	refute(t, c)
	next := waitForVMI(t, client.ObjectKeyFromObject(vmi), func(v *kubevirtv1.VirtualMachineInstance) bool { return v.UID != vmi.UID })
	if render.PinnedNode(&next.Spec) != to {
		t.Errorf("the new VMI is pinned to %s, want %s", render.PinnedNode(&next.Spec), to)
	}
	waitForCrawler(t, c, "a cold move", func(c *isov1.CrawlerVM) bool {
		return c.Status.Move != nil && c.Status.Move.Mode == isov1.MoveCold
	})
	if !strings.Contains(c.Status.Move.Message, "not live-migratable (InterfaceNotLiveMigratable") {
		t.Errorf("move message %q: want KubeVirt's reason", c.Status.Move.Message)
	}
	setVMIPhase(t, next, kubevirtv1.Running, to)
	waitForCrawler(t, c, "the cold move to end", func(c *isov1.CrawlerVM) bool {
		return c.Status.LastMove != nil && c.Status.LastMove.Result == isov1.MoveSucceeded
	})
	if l := c.Status.LastMove; l.Mode != isov1.MoveCold || l.MigrationTime != nil || !slices.Contains([]string{to}, c.Status.Placement.Node) {
		t.Errorf("lastMove %+v on %s: want a cold move to %s", l, c.Status.Placement.Node, to)
	}
	waitForCrawler(t, c, "the cold move's outage to end", func(c *isov1.CrawlerVM) bool {
		o := outageOf(c)
		return o != nil && o.Cause == isov1.OutageMove && o.End != nil
	})
}

// setNodeReady reports node's Ready condition as its kubelet (True) or the node lifecycle
// controller (Unknown, when the kubelet went silent) would, changed at when.
func setNodeReady(t *testing.T, name string, status corev1.ConditionStatus, when time.Time) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	get(t, n)
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status, n.Status.Conditions[i].Reason = status, "NodeStatusUnknown"
			n.Status.Conditions[i].LastTransitionTime = metav1.NewTime(when)
		}
	}
	if err := k8s.Status().Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
}

// A lost node: its crawler is reported (Ready=False NodeLost, a Warning Event, the metric)
// once the node has not been ready for the grace, and nothing starts a second copy; once
// the node is fenced (the out-of-service taint), the crawler restarts on a node the model
// chose, its VM re-pinned first.
func TestLostNodeIsReportedThenFencedThenRecovered(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("lost-1", "it", "lost"), 16)
	createNode(t, rtNode("lost-2", "it", "lost"), 16)
	c, vmi := placedCrawler(t, ns, "survivor", "lost")
	from := c.Status.Placement.Node
	to := map[string]string{"lost-1": "lost-2", "lost-2": "lost-1"}[from]

	// Its kubelet last renewed the node's Lease 90 s ago: the outage starts there.
	renewed := nodeLease(t, from, time.Now().Add(-90*time.Second))
	// Not ready for a minute: past the 30 s grace.
	// A minute ago by the node's clock (KubeVirt's and the node's times are the real
	// time; the reconciler's clock may be ahead by what other tests stepped it).
	setNodeReady(t, from, corev1.ConditionUnknown, time.Now().Add(-time.Minute))
	waitForCrawler(t, c, "Ready=False NodeLost", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionFalse, isov1.ReasonNodeLost)
	})
	if msg := condition(c, isov1.ConditionReady); !strings.Contains(msg, "presumed down") || !strings.Contains(msg, "out-of-service") {
		t.Errorf("%s: want it to say the crawler is presumed down and how to fence the node", msg)
	}
	awaitGauge(t, "isochron_crawler_node_lost", map[string]string{"namespace": ns, "name": c.Name}, "1", is(1))
	eventually(t, "a NodeLost Event", func() (bool, string) {
		return len(eventsOf(t, c, isov1.ReasonNodeLost)) == 1, fmt.Sprint(events(t, c))
	})
	// Not fenced: no move, the VMI untouched, no second copy.
	touch(t, vmi, "not fenced")
	if get(t, c); c.Status.Move != nil || c.Status.Placement.Node != from {
		t.Errorf("moved before the node was fenced: %+v", c.Status.Move)
	}
	if get(t, vmi); !vmi.DeletionTimestamp.IsZero() {
		t.Error("the VMI on the lost node was deleted before the node was fenced")
	}

	// Fenced: the crawler starts on the other node.
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: from}}
	get(t, n)
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	if err := k8s.Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	next := waitForVMI(t, client.ObjectKeyFromObject(vmi), func(v *kubevirtv1.VirtualMachineInstance) bool { return v.UID != vmi.UID })
	if render.PinnedNode(&next.Spec) != to {
		t.Errorf("the new VMI is pinned to %s, want %s", render.PinnedNode(&next.Spec), to)
	}
	setVMIPhase(t, next, kubevirtv1.Running, to)
	waitForCrawler(t, c, "Ready on "+to, func(c *isov1.CrawlerVM) bool {
		l := c.Status.LastMove
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning) && l != nil && l.Result == isov1.MoveSucceeded
	})
	if l := c.Status.LastMove; l.Reason != isov1.MoveNodeLost || l.Mode != isov1.MoveCold || l.From != from || l.To != to || c.Status.Placement.Node != to {
		t.Errorf("lastMove %+v, placed on %s: want a cold move from %s to %s for the lost node", l, c.Status.Placement.Node, from, to)
	}
	awaitGauge(t, "isochron_crawler_node_lost", map[string]string{"namespace": ns, "name": c.Name}, "0 after the recovery",
		func(v float64, _ bool) bool { return v == 0 })
	// One outage, of the node loss, from the node's last Lease renewal: more than the 26 s
	// a month that 99.999% allows.
	o := outageOf(c)
	if len(c.Status.Outages) != 1 || o.Cause != isov1.OutageNodeLoss || o.Duration == nil || o.Duration.Duration < 89*time.Second {
		t.Errorf("outages %+v: want one NodeLoss outage of 90 s or more", c.Status.Outages)
	}
	if d := o.Start.Sub(renewed); d < -time.Second || d > time.Second {
		t.Errorf("the outage starts at %s, want the node's last Lease renewal %s", o.Start.UTC(), renewed.UTC())
	}
	if !hasCondition(c, isov1.ConditionDowntimeWithinBudget, metav1.ConditionFalse, isov1.ReasonBudgetSpent) {
		t.Errorf("%s: want the budget spent", condition(c, isov1.ConditionDowntimeWithinBudget))
	}
	// The metric follows the status write (a clean clone's make test on a loaded machine
	// read 0 once): wait for it.
	eventually(t, "isochron_crawler_downtime_seconds_total{cause=NodeLoss} 60 or more", func() (bool, string) {
		v, _ := gauge(t, "isochron_crawler_downtime_seconds_total", map[string]string{"namespace": ns, "name": c.Name, "cause": "NodeLoss"})
		return v >= 59, fmt.Sprintf("%v", v)
	})
}

// Deleting a Node does not stop its machine: a crawler placed there is presumed down, not
// fenced, and no second copy starts (its VMI is not replaced) until someone attests the
// machine is off (the annotation isochron.io/fenced-node on the crawler); then it starts
// on a node the model chose.
func TestDeletedNodeIsNoProofTheCrawlerStopped(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("gone-1", "it", "gone"), 16)
	createNode(t, rtNode("gone-2", "it", "gone"), 16)
	c, vmi := placedCrawler(t, ns, "orphan", "gone")
	from := c.Status.Placement.Node
	to := map[string]string{"gone-1": "gone-2", "gone-2": "gone-1"}[from]
	if err := k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: from}}); err != nil {
		t.Fatal(err)
	}
	waitForCrawler(t, c, "Ready=False NodeLost", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionFalse, isov1.ReasonNodeLost)
	})
	if msg := condition(c, isov1.ConditionReady); !strings.Contains(msg, "does not stop its machine") || !strings.Contains(msg, isov1.AnnotationFencedNode+"="+from) {
		t.Errorf("%s: want it to say a deleted Node is no proof and how to attest the machine is off", msg)
	}
	// Not fenced: no move, the VMI untouched, no second copy, even once KubeVirt's pod
	// garbage collection would have taken the launcher pod.
	touch(t, vmi, "not fenced")
	if get(t, c); c.Status.Move != nil || c.Status.Placement.Node != from {
		t.Errorf("moved off a deleted node nobody said was off: %+v", c.Status.Move)
	}
	if get(t, vmi); !vmi.DeletionTimestamp.IsZero() {
		t.Error("the VMI on the deleted node was replaced before anyone said its machine was off")
	}

	// The administrator powered the machine off and says so.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+isov1.AnnotationFencedNode+`":"`+from+`"}}}`))
	if err := k8s.Patch(ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	next := waitForVMI(t, client.ObjectKeyFromObject(vmi), func(v *kubevirtv1.VirtualMachineInstance) bool { return v.UID != vmi.UID })
	if render.PinnedNode(&next.Spec) != to {
		t.Errorf("the new VMI is pinned to %s, want %s", render.PinnedNode(&next.Spec), to)
	}
}

// outageOf is the crawler's newest outage, nil for none.
func outageOf(c *isov1.CrawlerVM) *isov1.Outage {
	if len(c.Status.Outages) == 0 {
		return nil
	}
	return &c.Status.Outages[0]
}

// A crashed crawler is restarted by KubeVirt (runStrategy Always), with nobody acting, and
// the outage is recorded with its cause and duration, once. A VMI that keeps failing
// before it ever runs is KubeVirt's crash loop, which the crawler reports.
func TestCrashedCrawlerRestartsAndItsOutageIsCounted(t *testing.T) {
	ns := namespace(t)
	createNode(t, rtNode("crash-1", "it", "crash"), 16)
	c, vmi := placedCrawler(t, ns, "crasher", "crash")
	waitForCrawler(t, c, "Ready", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning)
	})
	// virt-handler reports the guest gone (QEMU killed): KubeVirt starts a new VMI.
	setVMIPhase(t, vmi, kubevirtv1.Failed, "crash-1")
	next := waitForVMI(t, client.ObjectKeyFromObject(vmi), func(v *kubevirtv1.VirtualMachineInstance) bool { return v.UID != vmi.UID })
	waitForCrawler(t, c, "an outage of cause Crash", func(c *isov1.CrawlerVM) bool {
		o := outageOf(c)
		return o != nil && o.Cause == isov1.OutageCrash && o.End == nil
	})
	setVMIPhase(t, next, kubevirtv1.Running, "crash-1")
	waitForCrawler(t, c, "the outage to end", func(c *isov1.CrawlerVM) bool {
		o := outageOf(c)
		return o != nil && o.End != nil && hasCondition(c, isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning)
	})
	if o := outageOf(c); len(c.Status.Outages) != 1 || o.Duration == nil || o.Duration.Duration < 0 || o.Duration.Duration > time.Minute {
		t.Errorf("outages %+v: want one crash of a few seconds", c.Status.Outages)
	}
	if !hasCondition(c, isov1.ConditionDowntimeWithinBudget, metav1.ConditionTrue, isov1.ReasonWithinBudget) {
		t.Errorf("%s, want a short crash within the budget", condition(c, isov1.ConditionDowntimeWithinBudget))
	}
	touch(t, next, "after the outage")
	awaitGauge(t, "isochron_crawler_outages_total", map[string]string{"namespace": ns, "name": c.Name, "cause": "Crash"}, "1", is(1))
	if got := awaitEvents(t, c, isov1.EventReasonOutageEnded+": "); len(got) != 1 {
		t.Errorf("OutageEnded Events %v, want one", got)
	}

	// Failing before it ever runs: KubeVirt's crash-loop backoff, reported.
	next = waitForVMI(t, client.ObjectKeyFromObject(vmi), func(v *kubevirtv1.VirtualMachineInstance) bool { return true })
	setVMIPhase(t, next, kubevirtv1.Failed, "crash-1") // it ran: a crash, restarted at once
	third := waitForVMI(t, client.ObjectKeyFromObject(vmi), func(v *kubevirtv1.VirtualMachineInstance) bool { return v.UID != next.UID })
	third.Status.PhaseTransitionTimestamps = nil
	if err := k8s.Status().Update(context.Background(), third); err != nil && !apierrors.IsNotFound(err) {
		t.Log(err) // no status subresource on VMIs: the phase below is what counts
	}
	setVMIPhase(t, third, kubevirtv1.Scheduling, "")
	setVMIPhase(t, third, kubevirtv1.Failed, "") // never ran
	waitForCrawler(t, c, "Ready=False VMCrashLoop", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionFalse, isov1.ReasonVMCrashLoop)
	})
	if msg := condition(c, isov1.ConditionReady); !strings.Contains(msg, "crash-loop backoff") {
		t.Errorf("%s: want it to say KubeVirt's backoff holds the next start", msg)
	}
}

// A migration someone else asks for (virtctl migrate creates one without a target) would
// pin its target to the node the VMI runs on and never be scheduled: isochron deletes it
// and moves the crawler live to a node the model chose. The first write of that move
// loses a conflict (as one from a stale cache does under load): the request is not lost
// with it.
func TestForeignMigrationIsTakenOver(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("ask-1", "it", "ask"), 16)
	createNode(t, rtNode("ask-2", "it", "ask"), 16)
	c, vmi := placedCrawler(t, ns, "asked", "ask")
	from := c.Status.Placement.Node
	to := map[string]string{"ask-1": "ask-2", "ask-2": "ask-1"}[from]
	lost := conflicts.arm(t, client.ObjectKeyFromObject(c), `"move":`, 1)
	asked := &kubevirtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "kubevirt-migrate-vm-"},
		Spec:       kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
	}
	if err := k8s.Create(ctx, asked); err != nil {
		t.Fatal(err)
	}
	waitForCrawler(t, c, "the move to "+to, func(c *isov1.CrawlerVM) bool {
		l := c.Status.LastMove
		return l != nil && l.Reason == isov1.MoveRequested && l.Result == isov1.MoveSucceeded && c.Status.Placement.Node == to
	})
	eventually(t, "the asked-for migration gone", func() (bool, string) {
		return !get(t, asked), fmt.Sprint(asked.Status.Phase)
	})
	if got := awaitEvents(t, c, isov1.EventReasonMigrationTakenOver+": "); len(got) != 1 || !strings.Contains(got[0], asked.Name) {
		t.Errorf("MigrationTakenOver Events %v: want one naming %s", got, asked.Name)
	}
	if get(t, vmi); vmi.Status.NodeName != to {
		t.Errorf("the VMI runs on %s, want %s", vmi.Status.NodeName, to)
	}
	if lost.count() != 1 {
		t.Errorf("%d writes of the move lost a conflict, want 1: the test did not try what it says", lost.count())
	}
}

// The kubelet of the crawler's node refuses its launcher for a reason of the node (here
// the CPU Manager cannot pin its CPUs): the VMI fails before it ever runs, which KubeVirt's
// crash-loop backoff would repeat there forever; isochron starts it on another node.
func TestRejectedLauncherMovesTheCrawler(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("rej-1", "it", "rej"), 16)
	createNode(t, rtNode("rej-2", "it", "rej"), 16)
	c := crawler(ns, "rejected", withSelector("it", "rej"))
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	vmi := waitForVMI(t, client.ObjectKeyFromObject(c), func(*kubevirtv1.VirtualMachineInstance) bool { return true })
	get(t, c)
	from := c.Status.Placement.Node
	to := map[string]string{"rej-1": "rej-2", "rej-2": "rej-1"}[from]
	// The launcher pod, bound to the node, failed by its kubelet's admission.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "virt-launcher-rejected-x",
			Labels: map[string]string{kubevirtv1.AppLabel: "virt-launcher", kubevirtv1.CreatedByLabel: string(vmi.UID), isov1.LabelCrawlerVM: c.Name}},
		Spec: corev1.PodSpec{NodeName: from, Containers: []corev1.Container{{Name: "compute", Image: "virt-launcher"}}},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: "TopologyAffinityError", Message: "Pod was rejected: Resources cannot be allocated with Topology locality"}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	setVMIPhase(t, vmi, kubevirtv1.Failed, "") // it never ran
	waitForCrawler(t, c, "a cold move away from "+from, func(c *isov1.CrawlerVM) bool {
		m := c.Status.Move
		return m != nil && m.Reason == isov1.MoveNodeRejected && m.To == to && m.Mode == isov1.MoveCold
	})
	if !strings.Contains(c.Status.Move.Message, "TopologyAffinityError") {
		t.Errorf("move message %q: want the kubelet's reason", c.Status.Move.Message)
	}
	next := waitForVMI(t, client.ObjectKeyFromObject(c), func(v *kubevirtv1.VirtualMachineInstance) bool {
		return v.UID != vmi.UID && render.PinnedNode(&v.Spec) == to
	})
	setVMIPhase(t, next, kubevirtv1.Running, to)
	waitForCrawler(t, c, "Ready on "+to, func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning) && c.Status.Move == nil
	})
}

// The crawler's VMI stopped (a crash) and KubeVirt's next launcher cannot be scheduled
// on the crawler's node, which was cordoned meanwhile: for the grace the crawler waits
// (an uncordon would end it), then it moves cold to the other node, and its outage ends
// there.
func TestUnschedulableLauncherMovesTheCrawler(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("ush-1", "it", "ush"), 16)
	createNode(t, rtNode("ush-2", "it", "ush"), 16)
	c, vmi := placedCrawler(t, ns, "unschedulable", "ush")
	from := c.Status.Placement.Node
	to := map[string]string{"ush-1": "ush-2", "ush-2": "ush-1"}[from]
	waitForCrawler(t, c, "Ready on "+from, func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning)
	})
	cordonNode(t, from)
	setVMIPhase(t, vmi, kubevirtv1.Scheduling, "") // the guest crashed; KubeVirt starts it again
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "virt-launcher-unschedulable-x",
			Labels: map[string]string{kubevirtv1.AppLabel: "virt-launcher", kubevirtv1.CreatedByLabel: string(vmi.UID), isov1.LabelCrawlerVM: c.Name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "compute", Image: "virt-launcher"}}},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
		Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(clk.Now()),
		Message: "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were unschedulable."}}}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// Within the grace it waits where it is, saying why.
	waitForCrawler(t, c, "Ready=False LauncherUnschedulable", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionFalse, isov1.ReasonLauncherUnschedulable)
	})
	if c.Status.Move != nil {
		t.Fatalf("the crawler moved within the grace: %+v", c.Status.Move)
	}
	clk.Step(move.DefaultUnschedulableGrace + time.Second)
	touch(t, vmi, "after the grace") // a reconcile now, not at the requeue the real clock sets
	waitForCrawler(t, c, "a cold move away from "+from, func(c *isov1.CrawlerVM) bool {
		m := c.Status.Move
		return m != nil && m.Reason == isov1.MoveNodeUnschedulable && m.To == to && m.Mode == isov1.MoveCold
	})
	if !strings.Contains(c.Status.Move.Message, "node "+from+" is cordoned") {
		t.Errorf("move message %q: want why the launcher cannot be scheduled", c.Status.Move.Message)
	}
	next := waitForVMI(t, client.ObjectKeyFromObject(c), func(v *kubevirtv1.VirtualMachineInstance) bool {
		return v.UID != vmi.UID && render.PinnedNode(&v.Spec) == to
	})
	setVMIPhase(t, next, kubevirtv1.Running, to)
	waitForCrawler(t, c, "Ready on "+to+", its outage ended", func(c *isov1.CrawlerVM) bool {
		n := len(c.Status.Outages)
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning) && c.Status.Move == nil &&
			n > 0 && c.Status.Outages[n-1].End != nil
	})
	if l := c.Status.LastMove; l == nil || l.Reason != isov1.MoveNodeUnschedulable || l.Result != isov1.MoveSucceeded {
		t.Errorf("last move %+v: want a NodeUnschedulable move that succeeded", l)
	}
}

// nodeLease creates or updates node's Lease in kube-node-lease, renewed at renewed (as
// its kubelet does), and returns that time.
func nodeLease(t *testing.T, node string, renewed time.Time) time.Time {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: corev1.NamespaceNodeLease}}
	if err := k8s.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	at := metav1.NewMicroTime(renewed)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: node},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &at}}
	if err := k8s.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	return at.Time
}

// A migration the API server refuses (an administrator's admission policy, a quota,
// KubeVirt's own admission) does not restart the guest: the move fails saying why, the
// crawler runs on where it was, the same VMI, and the move is tried again after its
// backoff.
func TestRefusedMigrationLeavesTheGuestRunning(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("deny-1", "it", "deny"), 16)
	createNode(t, rtNode("deny-2", "it", "deny"), 16)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-migrations-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"kubevirt.io"}, APIVersions: []string{"*"}, Resources: []string{"virtualmachineinstancemigrations"}},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "ns", Expression: "request.namespace == '" + ns + "'"}},
			Validations:     []admissionregistrationv1.Validation{{Expression: "false", Message: "migrations are frozen in " + ns}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	unfreeze := func() {
		_ = k8s.Delete(ctx, binding)
		_ = k8s.Delete(ctx, policy)
	}
	t.Cleanup(unfreeze)
	eventually(t, "the policy refusing migrations", func() (bool, string) {
		probe := &kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}, Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: "x"}}
		err := k8s.Create(ctx, probe, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "migrations are frozen"), fmt.Sprint(err)
	})

	c, vmi := placedCrawler(t, ns, "frozen", "deny", withOnRefuted(isov1.RefutedReplace))
	from := c.Status.Placement.Node
	to := map[string]string{"deny-1": "deny-2", "deny-2": "deny-1"}[from]
	refute(t, c)
	waitForCrawler(t, c, "the refused move", func(c *isov1.CrawlerVM) bool {
		return c.Status.Move == nil && c.Status.LastMove != nil && c.Status.LastMove.Result == isov1.MoveFailed
	})
	if last := c.Status.LastMove; c.Status.Placement.Node != from || last.RetryAfter == nil || last.Mode != isov1.MoveLive ||
		!strings.Contains(last.Message, "refused migration") || !strings.Contains(last.Message, "migrations are frozen in "+ns) {
		t.Errorf("after the refusal: node %s, lastMove %+v; want it on %s, live, the API server's reason and a retry time", c.Status.Placement.Node, last, from)
	}
	now := &kubevirtv1.VirtualMachineInstance{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(vmi), now); err != nil || now.UID != vmi.UID || !now.DeletionTimestamp.IsZero() {
		t.Errorf("the VMI after a refused migration: %v (UID %s, was %s; deleting %v): want the same VMI running on", err, now.UID, vmi.UID, now.DeletionTimestamp)
	}

	// Migrations allowed again: after the backoff the move is tried again, and succeeds.
	unfreeze()
	eventually(t, "the policy gone", func() (bool, string) {
		probe := &kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}, Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: "x"}}
		err := k8s.Create(ctx, probe, client.DryRunAll) // KubeVirt's own admission still refuses it: no such VMI
		return err == nil || !strings.Contains(err.Error(), "migrations are frozen"), fmt.Sprint(err)
	})
	clk.Step(move.Backoff(1) + time.Second)
	touch(t, vmi, "after the backoff")
	waitForCrawler(t, c, "the second try to succeed", func(c *isov1.CrawlerVM) bool {
		return c.Status.LastMove != nil && c.Status.LastMove.Result == isov1.MoveSucceeded && c.Status.Placement.Node == to
	})
}

// A migration asked for with a target (kubectl isochron move --to, or virtctl's
// addedNodeSelector) moves the crawler there when the model says that node holds it, and
// is refused with the model's reasons when it does not. Without the target the model
// would choose the other free node (it packs: the smaller one).
func TestMigrationWithATargetGoesThereOrIsRefused(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("to-1", "it", "to"), 16)
	c, vmi := placedCrawler(t, ns, "targeted", "to")
	from := c.Status.Placement.Node
	createNode(t, rtNode("to-big", "it", "to"), 32)
	createNode(t, rtNode("to-small", "it", "to"), 16)
	createNode(t, rtNode("to-tiny", "it", "to"), 2)
	ask := func(node string) *kubevirtv1.VirtualMachineInstanceMigration {
		m := &kubevirtv1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "kubectl-isochron-move-"},
			Spec:       kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name, AddedNodeSelector: map[string]string{corev1.LabelHostname: node}},
		}
		if err := k8s.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	asked := ask("to-big")
	waitForCrawler(t, c, "the move to to-big", func(c *isov1.CrawlerVM) bool {
		l := c.Status.LastMove
		return l != nil && l.Reason == isov1.MoveRequested && l.Result == isov1.MoveSucceeded && c.Status.Placement.Node != from
	})
	if c.Status.Placement.Node != "to-big" {
		t.Fatalf("moved to %s, want to-big, the node asked for", c.Status.Placement.Node)
	}
	eventually(t, "the asked-for migration gone", func() (bool, string) { return !get(t, asked), fmt.Sprint(asked.Status.Phase) })

	clk.Step(move.DefaultBudget.Interval + time.Second) // a crawler moves on request once per interval
	refused := ask("to-tiny")
	eventually(t, "the migration to to-tiny refused", func() (bool, string) { return !get(t, refused), fmt.Sprint(refused.Status.Phase) })
	got := awaitEvents(t, c, isov1.EventReasonMigrationRefused+": ")
	if len(got) != 1 || !strings.Contains(got[0], "kubernetes.io/hostname=to-tiny") || !strings.Contains(got[0], "to-tiny: needs") {
		t.Errorf("MigrationRefused Events %v: want one naming the node asked for and why it cannot hold the crawler", got)
	}
	// The other nodes are refused as not the one asked for, not as the crawler's own
	// selector's (which the user did not change).
	if len(got) == 1 && (!strings.Contains(got[0], "not the node the move asks for (kubernetes.io/hostname=to-tiny)") || strings.Contains(got[0], "spec.placement.nodeSelector")) {
		t.Errorf("MigrationRefused %q: want the other nodes refused as not the node the move asks for", got[0])
	}

	// A node that does not exist: every node, the crawler's own too, is not the one asked
	// for, and the refusal says so.
	nowhere := ask("to-nowhere")
	eventually(t, "the migration to to-nowhere refused", func() (bool, string) { return !get(t, nowhere), fmt.Sprint(nowhere.Status.Phase) })
	var refusal string
	eventually(t, "a MigrationRefused Event for to-nowhere", func() (bool, string) {
		evs := events(t, c)
		for _, e := range evs {
			if strings.HasPrefix(e, isov1.EventReasonMigrationRefused+": ") && strings.Contains(e, "hostname=to-nowhere") {
				refusal = e
			}
		}
		return refusal != "", strings.Join(evs, " | ")
	})
	if !strings.Contains(refusal, "not the node the move asks for (kubernetes.io/hostname=to-nowhere)") || strings.Contains(refusal, "the node it runs on") {
		t.Errorf("MigrationRefused %q: want every node, to-big (its own) too, refused as not the node the move asks for", refusal)
	}
	if get(t, c); c.Status.Placement.Node != "to-big" || c.Status.Move != nil {
		t.Errorf("after refused moves: on %s, moving %+v; want on to-big, not moving", c.Status.Placement.Node, c.Status.Move)
	}
}
