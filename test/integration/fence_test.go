package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/test/support/scale"
)

// pausableLock is a replica's leader election lock that a test can pause as a SIGSTOP,
// a long GC pause or a frozen cgroup would, from the cluster's point of view: the Lease is
// no longer renewed, while the replica, which does not notice, believes it renews it
// (its renewals succeed without reaching the API server) and goes on deciding.
type pausableLock struct {
	resourcelock.Interface
	paused atomic.Bool
	mu     sync.Mutex
	last   *resourcelock.LeaderElectionRecord
}

func (l *pausableLock) pause() { l.paused.Store(true) }

func (l *pausableLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if l.paused.Load() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.last != nil {
			r := *l.last
			raw, err := json.Marshal(r)
			return &r, raw, err
		}
	}
	return l.Interface.Get(ctx)
}

func (l *pausableLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, r, l.Interface.Create)
}

func (l *pausableLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, r, l.Interface.Update)
}

func (l *pausableLock) write(ctx context.Context, r resourcelock.LeaderElectionRecord, w func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	if !l.paused.Load() {
		if err := w(ctx, r); err != nil {
			return err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = &r
	return nil
}

// gate holds a replica's status writes of chosen crawlers until the test lets them
// through: a replica paused between a decision and its write, or one whose write is
// slow to land.
type gate struct {
	mu    sync.Mutex
	holds map[client.ObjectKey]*held
}

type held struct {
	arrived, released chan struct{}
	// answered has the API server's answer to the first write held.
	answered chan error
	once     sync.Once
}

// hold holds the status writes of the crawler at key; arrived is closed by the first,
// release lets them (and the next ones) through, and answered then has the API server's
// answer to the first.
func (g *gate) hold(t *testing.T, key client.ObjectKey) (arrived <-chan struct{}, release func(), answered <-chan error) {
	t.Helper()
	h := &held{arrived: make(chan struct{}), released: make(chan struct{}), answered: make(chan error, 1)}
	g.mu.Lock()
	if g.holds == nil {
		g.holds = map[client.ObjectKey]*held{}
	}
	g.holds[key] = h
	g.mu.Unlock()
	var once sync.Once
	release = func() { once.Do(func() { close(h.released) }) }
	t.Cleanup(release)
	return h.arrived, release, h.answered
}

func (g *gate) newClient(config *rest.Config, options client.Options) (client.Client, error) {
	direct, err := client.NewWithWatch(config, options)
	if err != nil {
		return nil, err
	}
	return interceptor.NewClient(direct, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			g.mu.Lock()
			h := g.holds[client.ObjectKeyFromObject(obj)]
			g.mu.Unlock()
			if _, crawler := obj.(*isov1.CrawlerVM); h == nil || !crawler || sub != "status" {
				return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
			}
			first := false
			h.once.Do(func() { first = true; close(h.arrived) })
			select {
			case <-h.released:
			case <-ctx.Done():
				return ctx.Err()
			}
			err := cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
			if first {
				h.answered <- err
			}
			return err
		},
	}), nil
}

// overbookingWatch records, from a watch of the crawlers of a namespace, every moment a
// node held more than it has (scale.Violations on what the watch has seen so far), and
// the reservations each replica identity wrote.
type overbookingWatch struct {
	mu    sync.Mutex
	seen  []string
	wrote map[string][]string // decidedBy -> "crawler on node"
	stop  context.CancelFunc
}

func watchOverbooking(t *testing.T, ns string, nodes []*corev1.Node) *overbookingWatch {
	t.Helper()
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := c.GetInformer(context.Background(), &isov1.CrawlerVM{})
	if err != nil {
		t.Fatal(err)
	}
	w := &overbookingWatch{wrote: map[string][]string{}}
	latest := map[string]isov1.CrawlerVM{}
	look := func(o any) {
		cvm, ok := o.(*isov1.CrawlerVM)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		latest[cvm.Name] = *cvm
		all := make([]isov1.CrawlerVM, 0, len(latest))
		for _, c := range latest {
			all = append(all, c)
		}
		if p := cvm.Status.Placement; p != nil && cvm.Status.DecidedBy != "" {
			w.wrote[cvm.Status.DecidedBy] = append(w.wrote[cvm.Status.DecidedBy], cvm.Name+" on "+p.Node)
		}
		for _, v := range scale.Violations(nodes, all) {
			if strings.Contains(v, "oversubscribed") && !slices.Contains(w.seen, v) {
				w.seen = append(w.seen, v)
			}
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: look, UpdateFunc: func(_, o any) { look(o) }}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = cancel
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the overbooking watch did not sync")
	}
	t.Cleanup(cancel)
	return w
}

func (w *overbookingWatch) overbooked() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}

func (w *overbookingWatch) writtenBy(id string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.wrote[id])
}

// waitLeader waits until the manager's Lease names id.
func waitLeader(t *testing.T, id string) {
	t.Helper()
	waitFor(t, time.Minute, "the Lease held by "+id, func() (bool, string) {
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: isov1.LeaderLease}, l); err != nil {
			return false, err.Error()
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return holder == id, "held by " + holder
	})
}

// fiveCPUs is a crawler of 4 dedicated vCPUs (5 exclusive CPUs with its emulator thread)
// selecting the nodes labelled by sel: two fit a node of 14 allocatable CPUs.
func fiveCPUs(ns, name string, sel map[string]string) *isov1.CrawlerVM {
	c := scale.Crawler(ns, name, 1000, false)
	c.Spec.Placement = &isov1.Placement{NodeSelector: sel}
	return c
}

// A paused leader writes no stale decision. Leader A decides crawler X onto the node's
// last free slot and is paused before its write lands (its status write held; its Lease
// no longer renewed, which it does not notice). B takes the Lease over, and gives that
// slot to crawler C3: X, which selects a label the node has since lost, does not fit
// anywhere for B. A resumes: its write of X, on X's unchanged resourceVersion, would
// overbook the node (15 of 14 CPUs); the leader fence refuses it, because A no longer
// holds the Lease. Without the fence the watch sees the node overbooked and the test
// fails.
func TestPausedLeaderWritesNoStaleDecision(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "paused-leader")
	nodes := registerNodes(t, "pause", 1, 16) // 14 allocatable CPUs: two crawlers of 5
	node := nodes[0]
	setLabel(t, node.Name, "late", "yes")
	watch := watchOverbooking(t, ns, nodes)
	pool := map[string]string{"pool": "pause"}

	a := startMember(t, "paused-a", 4, nil)
	defer a.stop()
	waitLeader(t, a.id)
	createAll(t, []*isov1.CrawlerVM{fiveCPUs(ns, "c1", pool)})
	waitDecided(t, ns, 1, time.Minute)

	// A decides X and pauses before its write lands.
	x := fiveCPUs(ns, "x", map[string]string{"pool": "pause", "late": "yes"})
	aArrived, aRelease, aAnswered := a.gate.hold(t, client.ObjectKeyFromObject(x))
	createAll(t, []*isov1.CrawlerVM{x})
	waitArrived(t, aArrived, "A's write of its decision for x")
	a.lock.pause()
	setLabel(t, node.Name, "late", "") // x fits nowhere now, for anyone deciding afresh

	// B takes over; its own write for x waits, so that x's resourceVersion stays the one A
	// read, as when A's write lands before B has reached x.
	bGate := &gate{}
	bArrived, bRelease, _ := bGate.hold(t, client.ObjectKeyFromObject(x))
	b := startMember(t, "paused-b", 4, bGate)
	defer b.stop()
	waitLeader(t, b.id)
	waitArrived(t, bArrived, "B's write of its decision for x")
	createAll(t, []*isov1.CrawlerVM{fiveCPUs(ns, "c3", pool)})
	waitFor(t, time.Minute, "c3 placed by B on the slot A gave x", func() (bool, string) {
		c := &isov1.CrawlerVM{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c3"}, c); err != nil {
			return false, err.Error()
		}
		return c.Status.Placement != nil && c.Status.DecidedBy == b.id, fmt.Sprintf("%+v by %s", c.Status.Placement, c.Status.DecidedBy)
	})

	// A resumes: its stale write goes out, and the API server refuses it. Then B's.
	aRelease()
	select {
	case err := <-aAnswered:
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "does not hold the manager's leader election Lease") {
			t.Errorf("the paused leader's write of its decision for x: %v, want it refused by the leader fence", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the paused leader's write was never answered")
	}
	bRelease()
	list := waitDecided(t, ns, 3, time.Minute)
	if over := watch.overbooked(); len(over) > 0 {
		t.Errorf("the node held more than it has at some point: %v", over)
	}
	if wrote := watch.writtenBy(a.id); slices.ContainsFunc(wrote, func(s string) bool { return strings.HasPrefix(s, "x on ") }) {
		t.Errorf("the paused leader's decision for x landed: %v", wrote)
	}
	for _, v := range scale.Violations(nodes, list.Items) {
		t.Error(v)
	}
}

// A new leader finds and undoes an overbooking it inherits. A node holds three crawlers
// of 5 CPUs in its 14 (a decision the last leader wrote as it lost its Lease, admitted in
// the moment before the API server saw the new holder); the new leader builds its ledger
// from the API server, finds the node over, and re-decides the youngest reservation: it
// is placed on the node with room, and says why in an Event.
func TestNewLeaderUndoesAnOverbookingItInherits(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "inherited")
	nodes := registerNodes(t, "ob", 2, 16)
	setLabel(t, nodes[0].Name, "slot", "first")
	first := map[string]string{"pool": "ob", "slot": "first"}

	a := startMember(t, "inherit-a", 4, nil)
	waitLeader(t, a.id)
	createAll(t, []*isov1.CrawlerVM{fiveCPUs(ns, "c1", first), fiveCPUs(ns, "c2", first)})
	list := waitDecided(t, ns, 2, time.Minute)
	a.stop()

	// The last leader's late write: c3 on the first node too, the youngest reservation
	// there, decided by the Lease's holder.
	c3 := fiveCPUs(ns, "c3", map[string]string{"pool": "ob"})
	createAll(t, []*isov1.CrawlerVM{c3})
	c3.Status = *list.Items[0].Status.DeepCopy()
	c3.Status.DecidedBy = a.id
	for i := range c3.Status.Conditions {
		c3.Status.Conditions[i].LastTransitionTime = metav1.Now()
		c3.Status.Conditions[i].ObservedGeneration = c3.Generation
	}
	c3.Status.VMI = nil
	if err := env.Client.Status().Update(ctx, c3); err != nil {
		t.Fatalf("writing c3's reservation as the last leader: %v", err)
	}
	if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if v := scale.Violations(nodes, list.Items); len(v) == 0 {
		t.Fatalf("the first node is not overbooked: the test sets nothing up")
	}

	b := startMember(t, "inherit-b", 4, nil)
	defer b.stop()
	waitFor(t, time.Minute, "c3 re-placed off the overbooked node", func() (bool, string) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(c3), c3); err != nil {
			return false, err.Error()
		}
		p := c3.Status.Placement
		return p != nil && p.Node == nodes[1].Name && c3.Status.DecidedBy == b.id, fmt.Sprintf("%+v by %s", p, c3.Status.DecidedBy)
	})
	if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, v := range scale.Violations(nodes, list.Items) {
		t.Error(v)
	}
	if placed := apimeta.FindStatusCondition(c3.Status.Conditions, isov1.ConditionPlaced); placed == nil || placed.Status != metav1.ConditionTrue {
		t.Errorf("c3: %+v, want placed", placed)
	}
	waitFor(t, time.Minute, "an Overbooked Event on c3", func() (bool, string) {
		evs := &corev1.EventList{}
		if err := env.Client.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var got []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "c3" && e.Reason == isov1.ReasonOverbooked {
				if strings.Contains(e.Message, "Node "+nodes[0].Name+" holds more than it has (CPU: 15") &&
					strings.Contains(e.Message, "placed on node "+nodes[1].Name) {
					return true, ""
				}
				got = append(got, e.Message)
			}
		}
		return false, fmt.Sprint(got)
	})
}

func waitArrived(t *testing.T, arrived <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatalf("%s never came", what)
	}
}

// setLabel sets (or with "" removes) a label of a node.
func setLabel(t *testing.T, name, key, value string) {
	t.Helper()
	n := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	if value == "" {
		delete(n.Labels, key)
	} else {
		n.Labels[key] = value
	}
	if err := env.Client.Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
}
