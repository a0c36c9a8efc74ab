package controllers_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers"
	"isochron.io/isochron/internal/access"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/slo"
	"isochron.io/isochron/test/support/testenv"
	"isochron.io/isochron/test/support/virtsim"
)

// The suite runs on a real kube-apiserver and etcd (envtest, binaries built by
// `make envtest-bins`) with the real CRDs of isochron, KubeVirt and Multus installed, and
// the operator's reconciler running in a manager as in production.
var (
	k8s    client.Client // an uncached client, as a user would see the API
	scheme *runtime.Scheme
	cfg    *rest.Config
	// clk is the reconciler's clock: the real time plus what a test stepped it by, so
	// that a test steps through a backoff instead of sleeping through it.
	clk = &steppedClock{}
	// kv plays KubeVirt's VM and migration controllers (virtsim).
	kv *virtsim.Sim
	// masterKey is the operator's probe master key: a test that plays isochron's side of a
	// probe (the agent with the crawler's key, a Job's name) derives from it.
	masterKey = []byte("the test suite's probe master key")
)

// conflicts makes the operator's status writes lose a conflict where a test asks, as a
// write from a stale cache does under load.
var conflicts = &injectedConflicts{}

// injectedConflicts makes the operator's status patches that match an armed rule lose a
// conflict: the crawler is written by someone else just before; or wait (hold), as a
// write to a slow API server does.
type injectedConflicts struct {
	mu    sync.Mutex
	rules []*conflictRule
	holds []*holdRule
}

// holdRule holds the operator's status patches of the crawler at key that carry with
// until it is released.
type holdRule struct {
	key      client.ObjectKey
	with     string
	released chan struct{}
	held     chan struct{} // closed by the first patch held
	once     sync.Once
}

// hold makes the operator's status patches of the crawler at key that carry with wait
// until release is called (or the test ends); held is closed once one waits.
func (c *injectedConflicts) hold(t *testing.T, key client.ObjectKey, with string) (held <-chan struct{}, release func()) {
	t.Helper()
	r := &holdRule{key: key, with: with, released: make(chan struct{}), held: make(chan struct{})}
	c.mu.Lock()
	c.holds = append(c.holds, r)
	c.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			c.mu.Lock()
			c.holds = slices.DeleteFunc(c.holds, func(o *holdRule) bool { return o == r })
			c.mu.Unlock()
			close(r.released)
		})
	}
	t.Cleanup(release)
	return r.held, release
}

// wait holds a patch that a hold rule matches until the rule is released or ctx ends.
func (c *injectedConflicts) wait(ctx context.Context, sub string, obj client.Object, patch client.Patch) {
	if _, ok := obj.(*isov1.CrawlerVM); !ok || sub != "status" {
		return
	}
	c.mu.Lock()
	var match *holdRule
	for _, r := range c.holds {
		if r.key != client.ObjectKeyFromObject(obj) {
			continue
		}
		if data, err := patch.Data(obj); err == nil && strings.Contains(string(data), r.with) {
			match = r
			break
		}
	}
	c.mu.Unlock()
	if match == nil {
		return
	}
	match.once.Do(func() { close(match.held) })
	select {
	case <-match.released:
	case <-ctx.Done():
	}
}

type conflictRule struct {
	key   client.ObjectKey
	with  string // a string the patch carries
	left  int
	fired int
}

// arm makes the next n status patches of the crawler at key that carry with lose a
// conflict; the rule it returns tells how many did.
func (c *injectedConflicts) arm(t *testing.T, key client.ObjectKey, with string, n int) *conflictRule {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &conflictRule{key: key, with: with, left: n}
	c.rules = append(c.rules, r)
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.rules = slices.DeleteFunc(c.rules, func(o *conflictRule) bool { return o == r })
	})
	return r
}

// count is how many patches the rule failed.
func (r *conflictRule) count() int {
	conflicts.mu.Lock()
	defer conflicts.mu.Unlock()
	return r.fired
}

func (c *injectedConflicts) newClient(config *rest.Config, options client.Options) (client.Client, error) {
	direct, err := client.NewWithWatch(config, options)
	if err != nil {
		return nil, err
	}
	return interceptor.NewClient(direct, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			c.wait(ctx, sub, obj, patch)
			if n := c.take(sub, obj, patch); n > 0 {
				// Someone else writes the crawler first: the operator's copy is stale,
				// and this write and any other from that copy lose with a real 409.
				other := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: obj.GetName()}}
				bump := fmt.Sprintf(`{"metadata":{"annotations":{"test.isochron.io/written-meanwhile":"%d"}}}`, n)
				if err := cl.Patch(ctx, other, client.RawPatch(types.MergePatchType, []byte(bump))); err != nil {
					return err
				}
			}
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}), nil
}

// take counts a patch an armed rule matches and returns how many it has matched (0: none
// did).
func (c *injectedConflicts) take(sub string, obj client.Object, patch client.Patch) int {
	if _, ok := obj.(*isov1.CrawlerVM); !ok || sub != "status" {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.rules {
		if r.left == 0 || r.key != client.ObjectKeyFromObject(obj) {
			continue
		}
		if data, err := patch.Data(obj); err != nil || !strings.Contains(string(data), r.with) {
			continue
		}
		r.left--
		r.fired++
		return r.fired
	}
	return 0
}

// steppedClock is the real clock moved on by Step.
type steppedClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *steppedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Step moves the clock on by d.
func (c *steppedClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run these tests with `make test-integration`, which builds kube-apiserver and etcd into bin/")
		return 1
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(zapLevel())))
	env, err := testenv.Start("..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	cfg, k8s, scheme, kv = env.Config, env.Client, env.Scheme, env.KubeVirt

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Cache: controllers.ManagerCacheOptions(), Metrics: metricsserver.Options{BindAddress: "0"},
		NewClient: conflicts.newClient})
	if err != nil {
		panic(err)
	}
	probes := slo.DefaultOptions("isochron/rtprobe:test")
	probes.Grace = 2 * time.Second // a short grace lets the Job controller time a probe out within a test
	r := controllers.NewCrawlerVMReconciler(mgr, controllers.WithConcurrency(4), controllers.WithProbes(probes), controllers.WithClock(clk),
		controllers.WithRTUplinks([]string{testUplink}), controllers.WithProbeMasterKey(masterKey), controllers.WithNodeAccess(nodeAccess),
		// Two requested moves a namespace (TestRequestedMovesHaveABudget), the interval as shipped.
		controllers.WithRequestedMoveBudget(move.Budget{Interval: move.DefaultBudget.Interval, PerNamespace: 2}))
	if err := r.SetupWithManager(mgr); err != nil {
		panic(err)
	}
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintf(os.Stderr, "manager: %v\n", err)
	}
	return code
}

// testUplink is the RT uplink the administrator names for the suite's operator.
const testUplink = "rt-up0"

func zapLevel() zapcore.Level {
	if os.Getenv("TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

// --- builders -----------------------------------------------------------------

// rtNode names an RT node and its labels; createNode registers it.
// nodeAccess are the administrator's rules of reach the suite's manager runs with: every
// namespace may tolerate testTaint, and no other.
var nodeAccess = func() access.Rules {
	rules, err := access.Parse(map[string]string{access.KeyTolerations: testTaint})
	if err != nil {
		panic(err)
	}
	return rules
}()

const testTaint = "example.com/allowed"

func rtNode(name string, labels ...string) *corev1.Node {
	return testenv.RTNode(name, 0, labels...)
}

// createNode registers n as an RT node with cpus allocatable CPUs (and 2 more reserved
// for the host), as its kubelet would report it.
func createNode(t *testing.T, n *corev1.Node, cpus int64) {
	t.Helper()
	full := testenv.RTNode(n.Name, cpus+2)
	full.Labels = n.Labels
	if err := testenv.RegisterNode(context.Background(), k8s, full); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), full) })
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "it-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

type cvmOption func(*isov1.CrawlerVM)

func crawler(ns, name string, opts ...cvmOption) *isov1.CrawlerVM {
	c := &isov1.CrawlerVM{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: isov1.CrawlerVMSpec{
			RPS:         400,
			ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}},
			Guest:       isov1.Guest{Image: "quay.io/isochron/crawler:0.1", Memory: resource.MustParse("1Gi")},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func withRPS(rps int32) cvmOption { return func(c *isov1.CrawlerVM) { c.Spec.RPS = rps } }

func withSelector(k, v string) cvmOption {
	return func(c *isov1.CrawlerVM) {
		c.Spec.Placement = &isov1.Placement{NodeSelector: map[string]string{k: v}}
	}
}

func withRTNIC(network string) cvmOption {
	return func(c *isov1.CrawlerVM) {
		c.Spec.RTNIC = &isov1.RTNIC{NetworkName: network, Deadline: metav1.Duration{Duration: 5 * time.Millisecond}, MinBandwidth: resource.MustParse("100M")}
	}
}

// eventually polls cond until it holds or the deadline passes: waiting for the
// operator, never sleeping in its place.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	eventuallyWithin(t, 30*time.Second, what, cond)
}

// eventuallyWithin is eventually with its own deadline.
func eventuallyWithin(t *testing.T, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last seen: %s", what, last)
}

func get(t *testing.T, obj client.Object) bool {
	t.Helper()
	err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
	if err != nil && client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	return err == nil
}
