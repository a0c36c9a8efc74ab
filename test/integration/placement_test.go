// Package integration holds the placement tests that need their own control plane and
// their own operator replicas: decisions under concurrency, a leader handing over, and
// convergence at scale, all on a real kube-apiserver and etcd.
package integration

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/test/support/kubelet"
	"isochron.io/isochron/test/support/scale"
	"isochron.io/isochron/test/support/testenv"
	"isochron.io/isochron/test/support/virtsim"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	var err error
	env, err = testenv.Start("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The leader fence of config/default, on the Lease the replicas hold: every test here
	// runs its replicas behind it.
	if _, err := env.InstallLeaderFence(context.Background(), "default"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		env.Stop()
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// replica runs one operator replica with leader election, as the Deployment does, and
// returns the function that kills it (without releasing the lease, as a crash would).
func replica(t *testing.T, name string, concurrency int) (stop func()) {
	t.Helper()
	return startMember(t, name, concurrency, nil).stop
}

// member is one operator replica: its leader-election identity, its lock (which a test
// may pause: fence_test.go), the gate its status writes pass, and the function that
// kills it.
type member struct {
	id   string
	lock *pausableLock
	gate *gate
	stop func()
}

// startMember runs one operator replica with leader election, as the Deployment does:
// the manager's Lease in namespace default, held under an identity of its own that the
// replica writes with its decisions, for the leader fence TestMain installs. Its status
// writes pass g (nil: a gate of its own), which a test may arm before it starts.
func startMember(t *testing.T, name string, concurrency int, g *gate) *member {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 200, 400 // as the manager's defaults (cmd/manager)
	renew := 1500 * time.Millisecond
	lock, err := controllers.NewLeaderLock(cfg, "default", renew)
	if err != nil {
		t.Fatal(err)
	}
	if g == nil {
		g = &gate{}
	}
	m := &member{id: lock.Identity(), lock: &pausableLock{Interface: lock}, gate: g}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                              env.Scheme,
		Cache:                               controllers.ManagerCacheOptions(),
		Metrics:                             metricsserver.Options{BindAddress: "0"},
		LeaderElection:                      true,
		LeaderElectionResourceLockInterface: m.lock,
		LeaseDuration:                       ptr.To(2 * time.Second),
		RenewDeadline:                       ptr.To(renew),
		RetryPeriod:                         ptr.To(200 * time.Millisecond),
		Controller:                          ctrlConfig(name),
		NewClient:                           m.gate.newClient,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every replica reads the one probe master key, as the manager does at its start (the
	// first creates it).
	master, err := controllers.LoadProbeMasterKey(context.Background(), env.Client, "default", controllers.DefaultProbeMasterKeySecret)
	if err != nil {
		t.Fatal(err)
	}
	// Each replica its own metrics, as each process has.
	r := controllers.NewCrawlerVMReconciler(mgr, controllers.WithConcurrency(concurrency), controllers.WithRegistry(prometheus.NewRegistry()),
		controllers.WithProbeMasterKey(master), controllers.WithLeaderIdentity(m.id))
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mgr.Start(ctx)
	}()
	var once sync.Once
	m.stop = func() { once.Do(func() { cancel(); <-done }) }
	return m
}

func createAll(t *testing.T, objs []*isov1.CrawlerVM) {
	t.Helper()
	if err := scale.CreateAll(context.Background(), env.Client, objs, 8); err != nil {
		t.Fatal(err)
	}
}

// decided counts the crawlers of ns whose Placed condition is set for their generation.
func decided(t *testing.T, ns string) (placed, unplaced int, list *isov1.CrawlerVMList) {
	t.Helper()
	list = &isov1.CrawlerVMList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		c := &list.Items[i]
		p := apimeta.FindStatusCondition(c.Status.Conditions, isov1.ConditionPlaced)
		switch {
		case p == nil || p.ObservedGeneration != c.Generation:
		case p.Status == metav1.ConditionTrue:
			placed++
		default:
			unplaced++
		}
	}
	return placed, unplaced, list
}

func waitDecided(t *testing.T, ns string, n int, timeout time.Duration) *isov1.CrawlerVMList {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		placed, unplaced, list := decided(t, ns)
		if placed+unplaced == n {
			return list
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d placed, %d unplaced of %d", timeout, placed, unplaced, n)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkNoOversubscription verifies the final state: on every node the exclusive CPUs and
// shared requests fit allocatable, every crawler there is predicted within its budget,
// and every placed crawler has exactly one VMI, bound to its node.
func checkNoOversubscription(t *testing.T, ns string, nodes []*corev1.Node, list *isov1.CrawlerVMList) {
	t.Helper()
	ctx := context.Background()
	for _, v := range scale.Violations(nodes, list.Items) {
		t.Error(v)
	}
	// Decisions come first, VMIs after (as kube-scheduler binds and the kubelet starts):
	// wait for one VMI per placed crawler.
	placed, _, _ := decided(t, ns)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		vmis := &kubevirtv1.VirtualMachineInstanceList{}
		if err := env.Client.List(ctx, vmis, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(vmis.Items) == placed {
			break
		}
		if len(vmis.Items) > placed || time.Now().After(deadline) {
			t.Fatalf("%d VMIs for %d placed crawlers", len(vmis.Items), placed)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for i := range list.Items {
		c := &list.Items[i]
		r, ok := inventory.Resident(c)
		if !ok {
			continue
		}
		vmi := &kubevirtv1.VirtualMachineInstance{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), vmi); err != nil {
			t.Errorf("crawler %s placed on %s has no VMI: %v", c.Name, r.Node, err)
			continue
		}
		if got := vmi.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values; len(got) != 1 || got[0] != r.Node {
			t.Errorf("VMI %s bound to %v, crawler placed on %s", vmi.Name, got, r.Node)
		}
	}
}

// waitSomeDecided waits, a minute at most, until n crawlers of ns are decided.
func waitSomeDecided(t *testing.T, ns string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, u, _ := decided(t, ns)
		if p+u >= n || time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func namespace(t *testing.T, name string) string {
	t.Helper()
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

func registerNodes(t *testing.T, prefix string, count int, cpus int64) []*corev1.Node {
	t.Helper()
	var nodes []*corev1.Node
	for i := 0; i < count; i++ {
		n := testenv.RTNode(fmt.Sprintf("%s-%02d", prefix, i), cpus, "pool", prefix)
		if err := testenv.RegisterNode(context.Background(), env.Client, n); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// Two replicas, four workers each: the leader decides concurrently, is killed halfway,
// and the other takes over from what the API server holds. No node is oversubscribed,
// no crawler is placed twice, nobody is predicted over budget.
func TestLeaderHandOverUnderConcurrency(t *testing.T) {
	ns := namespace(t, "handover")
	nodes := registerNodes(t, "ho", 8, 16)
	stopA := replica(t, "a", 4)
	objs := scale.Mix(ns, "ho", 80, 1)
	createAll(t, objs)
	// Let the first leader decide part of the crawlers, then kill it mid-flight.
	waitSomeDecided(t, ns, 20)
	stopA()
	stopB := replica(t, "b", 4)
	defer stopB()
	list := waitDecided(t, ns, len(objs), 2*time.Minute)
	placed, unplaced, _ := decided(t, ns)
	t.Logf("%d placed, %d unplaced on %d nodes", placed, unplaced, len(nodes))
	if placed == 0 || unplaced == 0 {
		t.Errorf("want a mix of placed and unplaced crawlers to exercise the limits, got %d and %d", placed, unplaced)
	}
	checkNoOversubscription(t, ns, nodes, list)
}

// 500 CrawlerVMs on 50 nodes converge: all placed or reported unplaceable, with zero
// oversubscription. The time it takes is logged (docs/contention-model.md).
func TestFiveHundredCrawlersOnFiftyNodesConverge(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test")
	}
	ns := namespace(t, "scale")
	nodes := registerNodes(t, "sc", 50, 32)
	stop := replica(t, "scale", 4)
	defer stop()
	objs := scale.Mix(ns, "sc", 500, 2)
	start := time.Now()
	createAll(t, objs)
	list := waitDecided(t, ns, len(objs), 5*time.Minute)
	placed, unplaced, _ := decided(t, ns)
	t.Logf("500 CrawlerVMs on 50 nodes converged in %s: %d placed, %d unplaced", time.Since(start).Round(100*time.Millisecond), placed, unplaced)
	checkNoOversubscription(t, ns, nodes, list)
}

func ctrlConfig(string) ctrlconfig.Controller {
	// Each replica registers its controller under its own name; controller-runtime
	// refuses two controllers of one name in a process.
	return ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}
}

// The API server restarts while the leader decides: its watches break, its lease cannot
// be renewed and it stops leading, as a real manager would before its Deployment restarts
// it; a fresh replica takes over. Nothing is lost or decided twice: every crawler is
// placed once or reported unplaceable, no node is oversubscribed, and every placed
// crawler has one VMI on its node.
func TestAPIServerRestartLosesNothing(t *testing.T) {
	ns := namespace(t, "apiserver-restart")
	nodes := registerNodes(t, "rs", 8, 16)
	stopA := replica(t, "restart-a", 4)
	defer stopA()
	objs := scale.Mix(ns, "rs", 80, 4)
	createAll(t, objs)
	waitSomeDecided(t, ns, 20)
	began := time.Now()
	if err := env.RestartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver restarted in %s", time.Since(began).Round(time.Second))
	stopB := replica(t, "restart-b", 4)
	defer stopB()
	list := waitDecided(t, ns, len(objs), 3*time.Minute)
	placed, unplaced, _ := decided(t, ns)
	t.Logf("%d placed, %d unplaced on %d nodes", placed, unplaced, len(nodes))
	checkNoOversubscription(t, ns, nodes, list)
}

// The leader is killed in the middle of a live migration: the new leader rebuilds both of
// the moving crawler's reservations from the API server (status.move) and holds them
// while it decides a batch of newcomers that would overfill the node being left if it
// forgot it; when the migration completes, the new leader ends the move and releases it.
func TestLeaderHandOverMidMigration(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "mid-migration")
	nodes := registerNodes(t, "mm", 3, 16) // 14 allocatable CPUs each
	hold := true
	env.KubeVirt.SetOutcome(func(m *kubevirtv1.VirtualMachineInstanceMigration) virtsim.Outcome {
		if m.Namespace == ns && hold {
			return virtsim.Hold
		}
		return virtsim.Complete
	})
	defer env.KubeVirt.SetOutcome(nil)
	stopA := replica(t, "mid-a", 4)
	mover := scale.Crawler(ns, "mover", 1000, false) // 4 vCPUs, 5 exclusive CPUs
	mover.Spec.Placement = &isov1.Placement{NodeSelector: map[string]string{"pool": "mm"}}
	createAll(t, []*isov1.CrawlerVM{mover})
	waitDecided(t, ns, 1, time.Minute)
	vmi := &kubevirtv1.VirtualMachineInstance{}
	waitFor(t, time.Minute, "the mover's VMI", func() (bool, string) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(mover), vmi)
		return err == nil, fmt.Sprint(err)
	})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(mover), mover); err != nil {
		t.Fatal(err)
	}
	from := mover.Status.Placement.Node
	if err := kubelet.SetVMIPhase(ctx, env.Client, vmi, kubevirtv1.Running, from); err != nil {
		t.Fatal(err)
	}
	// A drain of its node: the move starts, and its migration holds.
	waitFor(t, time.Minute, "the mover Ready", func() (bool, string) {
		_ = env.Client.Get(ctx, client.ObjectKeyFromObject(mover), mover)
		return apimeta.IsStatusConditionTrue(mover.Status.Conditions, isov1.ConditionReady), fmt.Sprint(mover.Status.Conditions)
	})
	if err := env.KubeVirt.Evict(ctx, client.ObjectKeyFromObject(vmi)); err == nil {
		t.Fatal("the eviction went through")
	}
	waitFor(t, time.Minute, "a migration under way", func() (bool, string) {
		_ = env.Client.Get(ctx, client.ObjectKeyFromObject(mover), mover)
		return mover.Status.Move != nil && mover.Status.Move.Migration != "", fmt.Sprintf("%+v", mover.Status.Move)
	})
	to := mover.Status.Move.To
	t.Logf("moving from %s to %s; killing the leader", from, to)
	stopA()

	stopB := replica(t, "mid-b", 4)
	defer stopB()
	// Six more crawlers of 5 CPUs: two fit each node, but only one more fits next to each
	// of the mover's two reservations.
	var more []*isov1.CrawlerVM
	for i := range 6 {
		c := scale.Crawler(ns, fmt.Sprintf("new-%d", i), 1000, false)
		c.Spec.Placement = &isov1.Placement{NodeSelector: map[string]string{"pool": "mm"}}
		more = append(more, c)
	}
	createAll(t, more)
	list := waitDecided(t, ns, 7, 2*time.Minute)
	for _, v := range scale.Violations(nodes, list.Items) {
		t.Error(v)
	}
	placed, unplaced, _ := decided(t, ns)
	if placed != 5 || unplaced != 2 {
		t.Errorf("%d placed, %d unplaced: want the mover and 4 newcomers placed, 2 waiting (the mover holds two nodes)", placed, unplaced)
	}

	// The migration completes: the new leader ends the move and releases the node left.
	hold = false
	waitFor(t, time.Minute, "the move to end", func() (bool, string) {
		_ = env.Client.Get(ctx, client.ObjectKeyFromObject(mover), mover)
		return mover.Status.Move == nil && mover.Status.LastMove != nil && mover.Status.LastMove.Result == isov1.MoveSucceeded, fmt.Sprintf("%+v", mover.Status.LastMove)
	})
	if mover.Status.Placement.Node != to {
		t.Errorf("the mover ended on %s, want %s", mover.Status.Placement.Node, to)
	}
	// With the node left released, one waiting newcomer fits there now.
	waitFor(t, time.Minute, "a waiting newcomer placed on the released node", func() (bool, string) {
		p, u, _ := decided(t, ns)
		return p == 6, fmt.Sprintf("%d placed, %d unplaced", p, u)
	})
}
