package placer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/sizing"
)

// The placer's protocol, on a fake cache: every test decides on nodes that hold one
// crawler each (a crawler of these specs takes 3 exclusive CPUs; a node of 5 CPUs has 3
// allocatable) unless it says otherwise.

var t0 = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, isov1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// crawler is a dedicated crawler created at t0+age, holding a reservation on node when
// node is set.
func crawler(name string, age time.Duration, node string) *isov1.CrawlerVM {
	c := &isov1.CrawlerVM{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(t0.Add(age))},
		Spec: isov1.CrawlerVMSpec{RPS: 400, ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}},
			Guest: isov1.Guest{Image: "quay.io/isochron/crawler:0.1", Memory: resource.MustParse("1Gi")}},
	}
	if node != "" {
		c.Status.Sizing = &isov1.Sizing{VCPUs: 2, HostCPUs: 3, CPURequest: resource.MustParse("2"), Memory: resource.MustParse("1Gi"), Hugepages: resource.NewQuantity(1<<30, resource.BinarySI)}
		c.Status.Placement = &isov1.PlacementStatus{Node: node}
		c.Status.Conditions = []metav1.Condition{{Type: isov1.ConditionPlaced, Status: metav1.ConditionTrue, Reason: isov1.ReasonPlaced, LastTransitionTime: metav1.NewTime(t0.Add(age))}}
	}
	return c
}

// rtNode is a real-time node of cpus CPUs, 2 of them reserved for the host, as its
// kubelet reports it.
func rtNode(name string, cpus int64) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:                   *resource.NewQuantity(cpus, resource.DecimalSI),
		corev1.ResourceMemory:                resource.MustParse("64Gi"),
		corev1.ResourceName("hugepages-2Mi"): resource.MustParse("32Gi"),
		corev1.ResourcePods:                  resource.MustParse("110"),
	}
	alloc := capacity.DeepCopy()
	alloc[corev1.ResourceCPU] = *resource.NewQuantity(cpus-2, resource.DecimalSI)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			kubevirtv1.NodeSchedulable: "true", kubevirtv1.CPUManager: "true", kubevirtv1.RealtimeLabel: "true", corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: alloc,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// rig is a placer on a fake cache of nodes and crawlers, with what it wakes.
type rig struct {
	*Placer
	mu         sync.Mutex
	released   []string
	overbooked []string
}

func newRig(t *testing.T, cpus int64, nodes []string, crawlers ...*isov1.CrawlerVM) *rig {
	t.Helper()
	var objs []client.Object
	for _, n := range nodes {
		objs = append(objs, rtNode(n, cpus))
	}
	for _, c := range crawlers {
		objs = append(objs, c)
	}
	c := fake.NewClientBuilder().WithScheme(scheme()).WithObjects(objs...).Build()
	r := &rig{}
	r.Placer = New(c, c, Options{
		Released: func(node string) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.released = append(r.released, node)
		},
		Overbooked: func(key types.NamespacedName) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.overbooked = append(r.overbooked, key.String())
		},
	})
	return r
}

func (r *rig) woken() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.released...)
}

// place is a request for c's spec.
func place(c *isov1.CrawlerVM, avoid ...string) Request {
	req := inventory.Request(c, false, sizing.Resources{})
	for _, n := range avoid {
		req.Avoid = append(req.Avoid, placement.Avoid{Node: n, Why: "avoided"})
	}
	return Request{Crawler: c, Decide: &req}
}

// reserve reserves req and fails the test on an error.
func (r *rig) reserve(t *testing.T, req Request) Reservation {
	t.Helper()
	res, err := r.Reserve(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// admit is the cache showing c (a reconcile's first step).
func (r *rig) admit(t *testing.T, c *isov1.CrawlerVM) Admission {
	t.Helper()
	a, err := r.Admit(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// written is c with the reservation res holds, as its status write records it.
func written(c *isov1.CrawlerVM, res Reservation) *isov1.CrawlerVM {
	c = c.DeepCopy()
	if d := res.Decision; d.Placed() {
		c.Status.Sizing = inventory.SizingStatus(d.Sizing)
		c.Status.Placement = &isov1.PlacementStatus{Node: d.Node}
	}
	return c
}

// A batch decides the oldest crawler first, whatever order the workers queued them in:
// with room for two, the youngest of three waits.
func TestBatchDecidesTheOldestFirst(t *testing.T) {
	for name, order := range map[string][]int{"queued oldest first": {0, 1, 2}, "queued youngest first": {2, 1, 0}, "mixed": {1, 2, 0}} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, 5, []string{"n1", "n2"})
			cs := []*isov1.CrawlerVM{crawler("old", 0, ""), crawler("mid", time.Second, ""), crawler("young", 2*time.Second, "")}
			if err := r.ensureLedger(context.Background()); err != nil {
				t.Fatal(err)
			}
			// Hold the decision lock while the three queue: whoever takes it next decides all.
			r.decide.Lock(t0)
			got := make([]Reservation, 3)
			var wg sync.WaitGroup
			for queued, i := range order {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i], _ = r.Reserve(context.Background(), place(cs[i]))
				}()
				awaitQueued(t, r.Placer, queued+1)
			}
			r.decide.Unlock()
			wg.Wait()
			placed := map[string]bool{}
			for i, res := range got {
				placed[cs[i].Name] = res.Decision.Placed()
			}
			if diff := cmp.Diff(map[string]bool{"old": true, "mid": true, "young": false}, placed); diff != "" {
				t.Errorf("placed (-want +got):\n%s", diff)
			}
		})
	}
}

// awaitQueued waits until n requests wait in p's queue.
func awaitQueued(t *testing.T, p *Placer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.pending.mu.Lock()
		have := len(p.pending.waiting)
		p.pending.mu.Unlock()
		if have >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued, want %d", have, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A crawler whose last decision has not reached the cache is not decided again: the
// cache's copy predates it, and a second decision would place it twice.
func TestAssumedIsNotDecidedTwice(t *testing.T) {
	r := newRig(t, 8, []string{"n1"})
	a := crawler("a", 0, "")
	r.admit(t, a)
	first := r.reserve(t, place(a))
	if !first.Taken || !first.Decision.Placed() || !first.Changed() {
		t.Fatalf("first decision: %+v, want it placed and changed", first)
	}
	first.Commit()
	if again := r.reserve(t, place(a)); again.Taken {
		t.Errorf("decided again on the copy that predates the first decision: %+v", again.Decision)
	}
	if adm := r.admit(t, a); !adm.Behind { // a copy still without the reservation: the cache is behind
		t.Error("a copy that predates the decision is not said to be behind")
	}
	if again := r.reserve(t, place(a)); again.Taken {
		t.Errorf("decided again on a stale copy: %+v", again.Decision)
	}
	if adm := r.admit(t, written(a, first)); adm.Behind { // the cache shows the decision
		t.Error("the copy that shows the decision is said to be behind")
	}
	if again := r.reserve(t, place(written(a, first))); !again.Taken || again.Decision.Node != "n1" {
		t.Errorf("not decided once the cache shows the decision: %+v", again)
	}
}

// A decision whose write failed is undone: the capacity it took is free again; committed,
// it stays taken.
func TestUndoAfterAFailedWrite(t *testing.T) {
	for name, tc := range map[string]struct {
		undo      bool
		bPlacedOn string
	}{
		"the write failed: undone": {undo: true, bPlacedOn: "n1"},
		"the write landed":         {undo: false, bPlacedOn: ""},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, 5, []string{"n1"})
			a, b := crawler("a", 0, ""), crawler("b", time.Second, "")
			res := r.reserve(t, place(a))
			if res.Decision.Node != "n1" {
				t.Fatalf("a: %+v, want n1", res.Decision)
			}
			if tc.undo {
				res.Undo()
			} else {
				res.Commit()
			}
			if got := r.reserve(t, place(b)).Decision.Node; got != tc.bPlacedOn {
				t.Errorf("b placed on %q, want %q", got, tc.bPlacedOn)
			}
			if again := r.reserve(t, place(a)); again.Taken == !tc.undo {
				t.Errorf("a decided again: %v, want %v (undone, nothing is assumed for it)", again.Taken, tc.undo)
			}
		})
	}
}

// A move holds both nodes until its end is committed; what the end releases wakes the
// crawlers waiting for that node, once committed, and only then.
func TestMoveHoldsBothNodesAndItsEndWakesTheWaiting(t *testing.T) {
	a := crawler("a", 0, "n1")
	r := newRig(t, 5, []string{"n1", "n2"}, a)
	r.admit(t, a)
	req := place(a, "n1")
	held, _ := inventory.Resident(a)
	req.Decide.Size = &held.Sizing
	req.Leaving = "n1"
	moved := r.reserve(t, req)
	if moved.Decision.Node != "n2" {
		t.Fatalf("move: %+v, want n2", moved.Decision)
	}
	moved.Commit()
	c := crawler("c", time.Second, "")
	if got := r.reserve(t, place(c)); got.Decision.Placed() {
		t.Fatalf("c placed on %s while the move holds both nodes", got.Decision.Node)
	}
	moving := written(a, moved)
	moving.Status.Move = &isov1.Move{From: "n1", To: "n2"}
	r.admit(t, moving)
	end := r.reserve(t, Request{Crawler: moving, Keep: "n2"})
	if got := r.reserve(t, place(c)); got.Decision.Placed() {
		t.Errorf("c placed on %s before the move's end was written", got.Decision.Node)
	}
	if len(r.woken()) != 0 {
		t.Errorf("woken %v before the end was written", r.woken())
	}
	end.Commit()
	if diff := cmp.Diff([]string{"n1"}, r.woken()); diff != "" {
		t.Errorf("nodes whose waiting crawlers were woken (-want +got):\n%s", diff)
	}
	if got := r.reserve(t, place(c)); got.Decision.Node != "n1" {
		t.Errorf("c: %+v, want n1 once the move's end was written", got.Decision)
	}
}

// The planner is kept from batch to batch while it holds exactly the ledger and the
// nodes, and built afresh once something else changed the ledger.
func TestPlannerKeptAndRebuilt(t *testing.T) {
	other := crawler("other", 0, "")
	r := newRig(t, 16, []string{"n1", "n2"}, other)
	keptAfter := func(c *isov1.CrawlerVM) *placement.Planner {
		r.reserve(t, place(c)).Commit()
		return r.kept.planner
	}
	first := keptAfter(crawler("a", time.Second, ""))
	if got := keptAfter(crawler("b", 2*time.Second, "")); got != first {
		t.Error("a second batch built a new planner though nothing else changed the ledger")
	}
	r.admit(t, crawler("other", 0, "n2")) // a reservation this process did not decide
	if got := keptAfter(crawler("c", 3*time.Second, "")); got == first {
		t.Error("the planner was kept though the ledger took in a reservation it does not hold")
	}
}

// What the ledger lets go of outside a decision of this process wakes the crawlers waiting
// for its node: the ones the crawler's own event woke may have been decided while the
// ledger still held it, and nothing else would bring them back.
func TestLedgerReleasesWakeTheWaiting(t *testing.T) {
	for name, tc := range map[string]struct {
		event func(r *rig)
		want  []string
	}{
		"a deleted crawler is forgotten":                  {event: func(r *rig) { r.Forget("ns/a") }, want: []string{"n1"}},
		"the cache shows a release another replica wrote": {event: func(r *rig) { r.admit(t, crawler("a", 0, "")) }, want: []string{"n1"}},
		"the cache shows a move another replica wrote":    {event: func(r *rig) { r.admit(t, crawler("a", 0, "n2")) }, want: []string{"n1"}},
		"the cache confirms the reservation: nobody":      {event: func(r *rig) { r.admit(t, crawler("a", 0, "n1")) }},
		"forgetting a crawler that held nothing: nobody":  {event: func(r *rig) { r.Forget("ns/waiting") }},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, 8, []string{"n1", "n2"}, crawler("a", 0, "n1"))
			r.admit(t, crawler("a", 0, "n1")) // the cache confirms what the leader listed
			tc.event(r)
			if diff := cmp.Diff(tc.want, r.woken()); diff != "" {
				t.Errorf("nodes whose waiting crawlers were woken (-want +got):\n%s", diff)
			}
		})
	}
}

// A new leader that inherits a node holding more than it has re-decides its youngest
// reservation, and only that one, until a change of it is committed.
func TestOverbookedNodeReleasesTheYoungestFirst(t *testing.T) {
	old, young := crawler("old", 0, "n1"), crawler("young", time.Minute, "n1")
	r := newRig(t, 5, []string{"n1", "n2"}, young, old)
	if a := r.admit(t, old); a.Overbooked != "" {
		t.Errorf("the oldest reservation marked: %q", a.Overbooked)
	}
	if diff := cmp.Diff([]string{"ns/young"}, r.overbooked); diff != "" {
		t.Errorf("crawlers woken to be re-decided (-want +got):\n%s", diff)
	}
	a := r.admit(t, young)
	if a.Overbooked == "" {
		t.Fatal("the youngest reservation of the overbooked node is not marked")
	}
	req := place(young, "n1")
	req.OrDrop = true
	res := r.reserve(t, req)
	if res.Decision.Node != "n2" {
		t.Fatalf("re-decided: %+v, want n2", res.Decision)
	}
	if a := r.admit(t, young); a.Overbooked == "" {
		t.Error("the mark went before the change was committed")
	}
	res.Commit()
	if a := r.admit(t, written(young, res)); a.Overbooked != "" {
		t.Errorf("still marked once the change was committed: %q", a.Overbooked)
	}
}

// What a request holds once decided: the reservations it assumes and the keys it drops.
func TestRequestAfter(t *testing.T) {
	a := crawler("a", 0, "n1")
	req := place(a)
	d := placement.Decision{Node: "n2", Sizing: placement.Decision{}.Sizing}
	d.Sizing.HostCPUs = 3
	at := func(node string, key string) string { return fmt.Sprintf("%s@%s", key, node) }
	for name, tc := range map[string]struct {
		req   Request
		d     placement.Decision
		holds []string
		drops []string
	}{
		"placed":                      {req: req, d: d, holds: []string{at("n2", "ns/a")}},
		"placed away from its VM":     {req: Request{Crawler: a, Decide: req.Decide, Leaving: "n1"}, d: d, holds: []string{at("n2", "ns/a"), at("n1", "ns/a (leaving)")}},
		"placed where its VM runs":    {req: Request{Crawler: a, Decide: req.Decide, Leaving: "n2"}, d: d, holds: []string{at("n2", "ns/a")}},
		"nothing fits: kept":          {req: req},
		"nothing fits: dropped":       {req: Request{Crawler: a, Decide: req.Decide, OrDrop: true}, drops: []string{"ns/a", "ns/a (leaving)"}},
		"a move's end keeps one node": {req: Request{Crawler: a, Keep: "n3"}, holds: []string{at("n3", "ns/a")}, drops: []string{"ns/a (leaving)"}},
		"a release":                   {req: Request{Crawler: a}, drops: []string{"ns/a", "ns/a (leaving)"}},
	} {
		t.Run(name, func(t *testing.T) {
			holds, drops := tc.req.after(tc.d)
			var got []string
			for _, h := range holds {
				got = append(got, at(h.Node, h.Key))
				if h.Workload.Key != h.Key {
					t.Errorf("%s: workload key %s", h.Key, h.Workload.Key)
				}
			}
			if diff := cmp.Diff(tc.holds, got); diff != "" {
				t.Errorf("holds (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.drops, drops); diff != "" {
				t.Errorf("drops (-want +got):\n%s", diff)
			}
		})
	}
}
