package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// The tenant as attacker of the drains: what a namespace editor can write (an eviction of
// its own crawler's launcher, a VMI of its own that carries isochron's label and KubeVirt's
// eviction marker) moves nothing for anyone else. Only a cordon, which needs the Node,
// makes a node one being drained.

// cordonNode cordons node name, as kubectl drain does first.
func cordonNode(t *testing.T, name string) {
	t.Helper()
	node := &corev1.Node{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, node); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Unschedulable = true
	if err := k8s.Patch(context.Background(), node, patch); err != nil {
		t.Fatal(err)
	}
}

// evict evicts the launcher of vmi, which KubeVirt refuses (429) and answers by marking
// the VMI for evacuation (evictionStrategy External).
func evict(t *testing.T, vmi *kubevirtv1.VirtualMachineInstance) {
	t.Helper()
	if err := kv.Evict(context.Background(), client.ObjectKeyFromObject(vmi)); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction of VMI %s: %v, want it refused (429) and the VMI marked for evacuation", vmi.Name, err)
	}
}

// A tenant marks two nodes "being drained" the only ways it can: it evicts its own
// crawler's launcher on dt-1, and creates on dt-2 a VMI of its own that carries isochron's
// crawler label and KubeVirt's eviction marker (KubeVirt's mutator keeps a status given at
// create). A real drain of dt-3 (cordoned, then the eviction) must still move another
// namespace's crawler to dt-1 or dt-2. Before, every node any crawler-labelled VMI marked
// was avoided by every move: "0/3 nodes fit: ... node is being drained; the drain waits".
func TestTenantEvictionsFreezeNoOneElsesDrain(t *testing.T) {
	ctx := context.Background()
	tenant, other := namespace(t), namespace(t)
	createNode(t, rtNode("dt-3", "zone", "dt"), 16)
	drained := crawler(other, "drained", withSelector("zone", "dt"), withProbeDuration(10*time.Second))
	if err := k8s.Create(ctx, drained); err != nil {
		t.Fatal(err)
	}
	drainedVMI := waitForVMI(t, client.ObjectKeyFromObject(drained), func(*kubevirtv1.VirtualMachineInstance) bool { return true })
	setVMIPhase(t, drainedVMI, kubevirtv1.Running, "dt-3")
	createNode(t, rtNode("dt-1", "zone", "dt", "it", "dt-a"), 16)
	createNode(t, rtNode("dt-2", "zone", "dt"), 16)

	// The tenant's own crawler, which only dt-1 can hold, and its eviction there.
	own, ownVMI := placedCrawler(t, tenant, "own", "dt-a")
	if own.Status.Placement.Node != "dt-1" {
		t.Fatalf("the tenant's crawler is on %s, want dt-1", own.Status.Placement.Node)
	}
	evict(t, ownVMI)
	waitForCrawler(t, own, "the tenant's request blocked (no other node it may use)", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionMoving, metav1.ConditionFalse, isov1.ReasonMoveBlocked)
	})
	if msg := condition(own, isov1.ConditionMoving); !strings.Contains(msg, "which is not cordoned: isochron takes it as a request to move the crawler") || strings.Contains(msg, "being drained") {
		t.Errorf("%s: want the eviction on a node nobody cordoned taken as a request, not as a drain", msg)
	}

	// The decoy on dt-2, its status given at create (a VMI has no status subresource).
	decoy := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "decoy", Labels: map[string]string{isov1.LabelCrawlerVM: "decoy"}},
		Spec:       *ownVMI.Spec.DeepCopy(),
		Status:     kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Running, NodeName: "dt-2", EvacuationNodeName: "dt-2"},
	}
	if err := k8s.Create(ctx, decoy); err != nil {
		t.Fatal(err)
	}
	if get(t, decoy); decoy.Status.EvacuationNodeName != "dt-2" {
		t.Fatalf("the decoy's status %+v: want its eviction marker kept, as KubeVirt keeps it", decoy.Status)
	}

	// The administrator drains dt-3.
	cordonNode(t, "dt-3")
	evict(t, drainedVMI)
	waitForCrawler(t, drained, "the drained crawler on dt-1 or dt-2", func(c *isov1.CrawlerVM) bool {
		l := c.Status.LastMove
		return l != nil && l.Reason == isov1.MoveEvacuation && l.Result == isov1.MoveSucceeded && c.Status.Placement.Node != "dt-3"
	})
	if got := awaitEvents(t, drained, isov1.EventReasonMoving+": "); !strings.Contains(got[0], "node dt-3 is being drained (it is cordoned") {
		t.Errorf("Moving %q: want it to say dt-3 is being drained", got[0])
	}
}

// Moves asked for outside isochron, which any namespace editor can make (an eviction on a
// node nobody cordoned, a migration), have a budget: a crawler moves on request once per
// --requested-move-interval, a namespace's crawlers at most --requested-moves-per-namespace
// times in it (2 in these tests), with an Event that says until when. Another
// namespace's budget is its own.
func TestRequestedMovesHaveABudget(t *testing.T) {
	ctx := context.Background()
	ns, other := namespace(t), namespace(t)
	createNode(t, rtNode("bud-1", "it", "bud"), 16)
	createNode(t, rtNode("bud-2", "it", "bud"), 16)
	a, aVMI := placedCrawler(t, ns, "a", "bud")
	b, bVMI := placedCrawler(t, ns, "b", "bud")
	c, cVMI := placedCrawler(t, ns, "c", "bud")
	d, dVMI := placedCrawler(t, other, "d", "bud")
	movedOnRequest := func(c *isov1.CrawlerVM, from string) {
		t.Helper()
		waitForCrawler(t, c, c.Name+" moved on request", func(c *isov1.CrawlerVM) bool {
			l := c.Status.LastMove
			return l != nil && l.Reason == isov1.MoveRequested && l.Result == isov1.MoveSucceeded && c.Status.Placement.Node != from
		})
	}
	ask := func(vmi *kubevirtv1.VirtualMachineInstance) *kubevirtv1.VirtualMachineInstanceMigration {
		t.Helper()
		m := &kubevirtv1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, GenerateName: "kubevirt-migrate-vm-"},
			Spec:       kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
		}
		if err := k8s.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		return m
	}

	// a's self-eviction moves it, once.
	from := a.Status.Placement.Node
	evict(t, aVMI)
	movedOnRequest(a, from)
	get(t, aVMI)
	evict(t, aVMI)
	got := awaitEvents(t, a, isov1.EventReasonMoveDeferred+": ")
	if !strings.Contains(got[0], "--requested-move-interval") || !strings.Contains(got[0], "it stays until") {
		t.Errorf("MoveDeferred %q: want it to name the interval and until when", got[0])
	}
	if get(t, a); a.Status.Move != nil {
		t.Errorf("a moves again (%+v), within its interval", a.Status.Move)
	}

	// b's migration spends the namespace's second move; c's is refused.
	from = b.Status.Placement.Node
	ask(bVMI)
	movedOnRequest(b, from)
	from = c.Status.Placement.Node
	refused := ask(cVMI)
	eventually(t, "c's migration deleted", func() (bool, string) { return !get(t, refused), fmt.Sprint(refused.Status.Phase) })
	got = awaitEvents(t, c, isov1.EventReasonMigrationRefused+": ")
	if !strings.Contains(got[0], "moved on request 2 times") || !strings.Contains(got[0], "--requested-moves-per-namespace") || !strings.Contains(got[0], "ask again after") {
		t.Errorf("MigrationRefused %q: want the namespace's spent budget, the flag and when to ask again", got[0])
	}
	if get(t, c); c.Status.Move != nil || c.Status.LastMove != nil || c.Status.Placement.Node != from {
		t.Errorf("c moved (%+v, %+v) beyond its namespace's budget", c.Status.Move, c.Status.LastMove)
	}

	// Another namespace still moves.
	from = d.Status.Placement.Node
	ask(dVMI)
	movedOnRequest(d, from)
}
