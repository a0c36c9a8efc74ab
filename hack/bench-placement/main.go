// Command bench-placement measures placement throughput on a real kube-apiserver and
// etcd, isochron's against kube-scheduler's, in one run (make bench-placement,
// figures in docs/benchmarks.md, "Scale"):
//
//  1. M fake RT nodes are registered and N CrawlerVMs created (scale.Mix) before anything
//     decides;
//  2. the manager binary is started, and the clock runs to the last crawler decided
//     (placed, or reported unplaceable); every node is then checked: no CPU
//     oversubscribed, every crawler predicted within its budget. With -steady, the
//     manager is then watched idle: its API writes and CPU, and its peak RSS;
//  3. the manager is stopped, and N Guaranteed pods, each with the CPUs and memory one
//     crawler's sizing holds, are created on the same nodes; kube-scheduler is started,
//     and the clock runs to the last pod bound (or reported unschedulable); every node is
//     checked against its allocatable CPU;
//  4. with -writes, what the write each side makes per decision costs the API server and
//     etcd, with controls (measureWrites).
//
// With -other-pods, the cluster also has ordinary nodes (-other-nodes) and that many other
// pods, created before the manager starts (others.go): most on the ordinary nodes or
// finished, a tenth on the RT nodes. The manager's memory is read from /proc (VmHWM, its
// peak, and VmRSS once idle, with -steady): make bench-scale runs the same crawlers
// without and with them.
//
// Both clocks start when the process is started, so both include connecting and
// syncing caches.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/test/support/scale"
	"isochron.io/isochron/test/support/testenv"
)

type options struct {
	crawlers, nodes, workers int
	otherPods, otherNodes    int
	qps, burst               int
	cpus                     int64
	manager, root, pprof     string
	gomemlimit               string
	timeout, steady          time.Duration
	skipScheduler, writes    bool
	pauseLeader, noFence     bool
}

func main() {
	var o options
	flag.IntVar(&o.crawlers, "crawlers", 2000, "CrawlerVMs (and pods) to place.")
	flag.IntVar(&o.nodes, "nodes", 200, "Fake RT nodes.")
	flag.IntVar(&o.otherNodes, "other-nodes", 0, "Ordinary nodes besides the RT nodes (no KubeVirt: no crawler can use them).")
	flag.IntVar(&o.otherPods, "other-pods", 0, "Other pods, created before the manager starts: a tenth running on the RT nodes, four tenths finished, the rest running on the ordinary nodes.")
	flag.Int64Var(&o.cpus, "cpus", 64, "CPUs of each node (2 reserved for the host).")
	flag.IntVar(&o.workers, "workers", 0, "The manager's --max-concurrent-reconciles; 0 for its default.")
	flag.IntVar(&o.qps, "qps", 50, "Client QPS of both the manager (--kube-api-qps) and kube-scheduler (clientConnection.qps); 50 is both defaults.")
	flag.IntVar(&o.burst, "burst", 100, "Client burst of both (--kube-api-burst, clientConnection.burst); 100 is both defaults.")
	flag.StringVar(&o.manager, "manager", "bin/manager", "The manager binary (make build).")
	flag.StringVar(&o.pprof, "pprof", "", "Serve the manager's pprof endpoints on this address (e.g. 127.0.0.1:6060), to profile it during the run.")
	flag.StringVar(&o.root, "root", ".", "The repository root (its CRDs).")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "Give up after this long on either side.")
	flag.DurationVar(&o.steady, "steady", 0, "After convergence, watch the idle manager this long: its API writes and CPU.")
	flag.BoolVar(&o.skipScheduler, "skip-scheduler", false, "Measure isochron only.")
	flag.BoolVar(&o.writes, "writes", false, "Then measure what one decision's write costs the API server: a CrawlerVM status patch, two custom-resource controls and a pod binding.")
	flag.BoolVar(&o.pauseLeader, "pause-leader", false, "Instead: two managers with leader election, the leader stopped (SIGSTOP) while it decides until the other has taken over and decided a while, then resumed; count the nodes left over allocatable (-nodes nodes of ten slots, 11 crawlers each).")
	flag.BoolVar(&o.noFence, "no-fence", false, "With -pause-leader: without the leader fence (config/admission/leader_fence.yaml).")
	flag.StringVar(&o.gomemlimit, "gomemlimit", "", "The manager's GOMEMLIMIT (config/manager derives 85% of its 512Mi limit, 435MiB; the figures in docs/benchmarks.md were taken with 440MiB); empty for none.")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-placement:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	// The operator alone: no simulation of KubeVirt starts VMIs from its VMs on this API server.
	env, err := testenv.Start(o.root, testenv.WithoutKubeVirtControllers())
	if err != nil {
		return err
	}
	defer env.Stop()
	dir, err := os.MkdirTemp("", "bench-placement-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kc := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeConfig("bench", kc); err != nil {
		return err
	}

	if o.pauseLeader {
		return pausedLeader(ctx, env, o, kc)
	}
	fmt.Printf("registering %d nodes of %d CPUs, creating %d CrawlerVMs\n", o.nodes, o.cpus, o.crawlers)
	var othersOn map[string]int64 // the other pods' CPU on each RT node, in millicores
	nodes := make([]*corev1.Node, o.nodes)
	for i := range nodes {
		nodes[i] = testenv.RTNode(fmt.Sprintf("rt-%04d", i), o.cpus, "pool", "bench")
	}
	if err := parallel(16, len(nodes), func(i int) error { return testenv.RegisterNode(ctx, env.Client, nodes[i]) }); err != nil {
		return err
	}
	plain := make([]*corev1.Node, o.otherNodes)
	for i := range plain {
		plain[i] = plainNode(fmt.Sprintf("gp-%04d", i), o.cpus)
	}
	if err := parallel(16, len(plain), func(i int) error { return testenv.RegisterNode(ctx, env.Client, plain[i]) }); err != nil {
		return err
	}
	for _, ns := range []string{"bench", "bench-pods"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	if err := scale.CreateAll(ctx, env.Client, scale.Mix("bench", "bench", o.crawlers, 1), 16); err != nil {
		return err
	}
	if o.otherPods > 0 {
		fmt.Printf("creating %d other pods on %d RT and %d ordinary nodes\n", o.otherPods, len(nodes), len(plain))
		made, err := createOthers(ctx, env, o.otherPods, nodes, plain)
		if err != nil {
			return err
		}
		fmt.Printf("created %d other pods in %s: %d running on RT nodes, %d running on ordinary nodes, %d finished\n",
			o.otherPods, made.took.Round(time.Second), made.onRT, made.onPlain, made.finished)
		// What they hold of the RT nodes: placement must leave it to them.
		othersOn = map[string]int64{}
		for i := 0; i < made.onRT; i++ {
			othersOn[nodes[i%len(nodes)].Name] += 100
		}
	}

	iso, err := runIsochron(ctx, env, o, kc, nodes)
	if err != nil {
		return err
	}
	if othersOn != nil {
		v, err := sharedWithOthers(ctx, env, nodes, othersOn)
		if err != nil {
			return err
		}
		iso.violations = append(iso.violations, v...)
	}
	iso.print("isochron", o.crawlers, "crawlers", "placed", "unplaced")
	if o.steady > 0 {
		fmt.Printf("converged (every VM created, no write for 5 s) %s after start; then idle for %s: %d API writes, %.3f CPU-seconds (%.2f%% of a CPU); peak RSS %d MiB, idle RSS %d MiB\n",
			(iso.converged - 5*time.Second).Round(time.Second), o.steady, iso.steadyWrites, iso.steadyCPU.Seconds(), 100*iso.steadyCPU.Seconds()/o.steady.Seconds(), iso.peakRSS>>20, iso.idleRSS>>20)
	} else {
		fmt.Printf("manager peak RSS %d MiB\n", iso.peakRSS>>20)
	}
	fmt.Printf("crawler status writes (apiserver_request_total, crawlervms/status PATCH): %.0f to the last decision (%.2f per crawler), %.0f of them refused as conflicts (%.3f per crawler); %.0f to convergence, %.0f conflicts\n",
		iso.decidedWrites.total, iso.decidedWrites.total/float64(o.crawlers), iso.decidedWrites.conflicts, iso.decidedWrites.conflicts/float64(o.crawlers),
		iso.convergedWrites.total, iso.convergedWrites.conflicts)
	fmt.Printf("\n| crawlers / RT nodes | other nodes | other pods | decided | manager CPU to then | status writes / conflicts to then | converged | peak RSS (VmHWM) | idle RSS (VmRSS) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Printf("| %d / %d | %d | %d | %s (%.0f/s) | %.1f s | %.0f / %.0f | %s | %d MiB | %s |\n\n", o.crawlers, o.nodes, o.otherNodes, o.otherPods,
		iso.took.Round(10*time.Millisecond), iso.rate(o.crawlers), iso.cpu.Seconds(), iso.decidedWrites.total, iso.decidedWrites.conflicts,
		convergedOrNot(iso), iso.peakRSS>>20, idleOrNot(iso))
	if o.skipScheduler {
		return measureWritesIfAsked(ctx, env, o)
	}
	ks, err := runScheduler(ctx, env, o, kc, nodes)
	if err != nil {
		return err
	}
	ks.print("kube-scheduler", o.crawlers, "pods", "bound", "unschedulable")
	fmt.Printf("\n| crawlers / nodes | client QPS | isochron | kube-scheduler | isochron / kube-scheduler |\n|---|---:|---:|---:|---:|\n")
	fmt.Printf("| %d / %d | %d | %s (%.0f/s) | %s (%.0f/s) | %.2f |\n", o.crawlers, o.nodes, o.qps,
		iso.took.Round(10*time.Millisecond), iso.rate(o.crawlers), ks.took.Round(10*time.Millisecond), ks.rate(o.crawlers),
		iso.rate(o.crawlers)/ks.rate(o.crawlers))
	if len(iso.violations)+len(ks.violations) > 0 {
		return fmt.Errorf("%d violations", len(iso.violations)+len(ks.violations))
	}
	return measureWritesIfAsked(ctx, env, o)
}

// measureWritesIfAsked measures, with -writes, what one decision's write costs (measureWrites), on
// the crawlers the manager decided.
func measureWritesIfAsked(ctx context.Context, env *testenv.Env, o options) error {
	if !o.writes {
		return nil
	}
	list := &isov1.CrawlerVMList{}
	if err := env.Client.List(ctx, list, client.InNamespace("bench")); err != nil {
		return err
	}
	costs, err := measureWrites(ctx, env, list.Items)
	if err != nil {
		return err
	}
	printWrites(costs)
	return nil
}

// convergedOrNot and idleOrNot are the figures of -steady, or "not run".
func convergedOrNot(r result) string {
	if r.converged == 0 {
		return "not run"
	}
	return (r.converged - 5*time.Second).Round(time.Second).String()
}

func idleOrNot(r result) string {
	if r.idleRSS == 0 {
		return "not run"
	}
	return fmt.Sprintf("%d MiB", r.idleRSS>>20)
}

type result struct {
	idleRSS          int64
	took             time.Duration
	placed, unplaced int
	violations       []string
	converged        time.Duration
	steadyWrites     int
	steadyCPU        time.Duration
	peakRSS          int64
	// cpu is the deciding process's CPU time from its start to the last decision.
	cpu time.Duration
	// decidedWrites are the crawlers' status writes to the last decision, convergedWrites
	// to convergence (isochron only).
	decidedWrites, convergedWrites statusWrites
}

func (r result) rate(n int) float64 { return float64(n) / r.took.Seconds() }

// startLogged starts cmd with its output in bench-placement-<name>.log in the temporary
// directory, whose path it returns; stop sends the process signal and waits for it.
func startLogged(cmd *exec.Cmd, name string, signal os.Signal) (path string, stop func(), err error) {
	log, err := os.Create(filepath.Join(os.TempDir(), "bench-placement-"+name+".log"))
	if err != nil {
		return "", nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return "", nil, err
	}
	return log.Name(), func() { _ = cmd.Process.Signal(signal); _ = cmd.Wait(); _ = log.Close() }, nil
}

// print says how long side took to decide n objects, and each violation.
func (r result) print(side string, n int, objects, placed, unplaced string) {
	fmt.Printf("%s: %d %s decided in %s (%d %s, %d %s): %.1f per second; %d violations\n",
		side, n, objects, r.took.Round(10*time.Millisecond), r.placed, placed, r.unplaced, unplaced, r.rate(n), len(r.violations))
	if r.cpu > 0 {
		fmt.Printf("  its CPU time to then: %.2f s, %.2f ms per decision\n", r.cpu.Seconds(), float64(r.cpu.Microseconds())/1000/float64(n))
	}
	for _, v := range r.violations {
		fmt.Println("  ", v)
	}
}

// runIsochron starts the manager binary and times it to the last crawler decided.
func runIsochron(ctx context.Context, env *testenv.Env, o options, kc string, nodes []*corev1.Node) (result, error) {
	metricsAddr, err := freeAddr()
	if err != nil {
		return result{}, err
	}
	watch, err := newWatch(ctx, env, &isov1.CrawlerVM{}, "bench", func(o client.Object) (bool, bool) {
		c := o.(*isov1.CrawlerVM)
		p := apimeta.FindStatusCondition(c.Status.Conditions, isov1.ConditionPlaced)
		if p == nil || p.ObservedGeneration != c.Generation {
			return false, false
		}
		return true, p.Status == metav1.ConditionTrue
	})
	if err != nil {
		return result{}, err
	}
	defer watch.stop()
	cmd := exec.Command(o.manager, "--leader-elect=false", "--namespace=default", "--metrics-bind-address="+metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address=0", fmt.Sprintf("--kube-api-qps=%d", o.qps), fmt.Sprintf("--kube-api-burst=%d", o.burst))
	if o.workers > 0 {
		cmd.Args = append(cmd.Args, fmt.Sprintf("--max-concurrent-reconciles=%d", o.workers))
	}
	if o.pprof != "" {
		cmd.Args = append(cmd.Args, "--pprof-bind-address="+o.pprof)
	}
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kc)
	if o.gomemlimit != "" {
		// The manager's alone: in the environment it would reach kube-apiserver too.
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+o.gomemlimit)
	}
	start := time.Now()
	log, stop, err := startLogged(cmd, "manager", syscall.SIGTERM)
	if err != nil {
		return result{}, err
	}
	defer stop()
	last, placed, unplaced, err := watch.wait(o.crawlers, o.timeout)
	if err != nil {
		return result{}, fmt.Errorf("isochron: %w (manager log: %s)", err, log)
	}
	res := result{took: last.Sub(start), placed: placed, unplaced: unplaced}
	if res.cpu, err = cpuTime(cmd.Process.Pid); err != nil {
		return res, err
	}
	if res.decidedWrites, err = crawlerStatusWrites(ctx, env.Config); err != nil {
		return res, err
	}
	if calls, err := requests("http://" + metricsAddr + "/metrics"); err == nil {
		fmt.Printf("manager's API requests when the last crawler was decided: %v\n", calls)
	}
	list := &isov1.CrawlerVMList{}
	if err := env.Client.List(ctx, list, client.InNamespace("bench")); err != nil {
		return res, err
	}
	res.violations = scale.Violations(nodes, list.Items)
	if o.steady > 0 {
		// Converged: every VM created, every status written; the writes stop.
		w0, err := quiesce("http://"+metricsAddr+"/metrics", o.timeout)
		if err != nil {
			return res, err
		}
		res.converged = time.Since(start)
		if res.convergedWrites, err = crawlerStatusWrites(ctx, env.Config); err != nil {
			return res, err
		}
		c0, err := cpuTime(cmd.Process.Pid)
		if err != nil {
			return res, err
		}
		time.Sleep(o.steady) // the idle window being measured
		w1, err := writes("http://" + metricsAddr + "/metrics")
		if err != nil {
			return res, err
		}
		c1, err := cpuTime(cmd.Process.Pid)
		if err != nil {
			return res, err
		}
		res.steadyWrites, res.steadyCPU = w1-w0, c1-c0
		m, err := memoryOf(cmd.Process.Pid)
		if err != nil {
			return res, err
		}
		res.idleRSS = m.rss
	}
	if line := logLine(log, "Node books synced"); line != "" {
		fmt.Println("manager:", line)
	}
	m, err := memoryOf(cmd.Process.Pid)
	res.peakRSS = m.hwm
	return res, err
}

// runScheduler creates a Guaranteed pod per crawler, with what its sizing holds, starts
// kube-scheduler and times it to the last pod decided.
func runScheduler(ctx context.Context, env *testenv.Env, o options, kc string, nodes []*corev1.Node) (result, error) {
	list := &isov1.CrawlerVMList{}
	if err := env.Client.List(ctx, list, client.InNamespace("bench")); err != nil {
		return result{}, err
	}
	if err := waitDefaultServiceAccount(ctx, env, "bench-pods"); err != nil {
		return result{}, err
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		pods = append(pods, podLike(&list.Items[i]))
	}
	if err := scale.CreateAll(ctx, env.Client, pods, 16); err != nil {
		return result{}, err
	}
	watch, err := newWatch(ctx, env, &corev1.Pod{}, "bench-pods", func(o client.Object) (bool, bool) {
		p := o.(*corev1.Pod)
		if p.Spec.NodeName != "" {
			return true, true
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, false
			}
		}
		return false, false
	})
	if err != nil {
		return result{}, err
	}
	defer watch.stop()
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-scheduler")
	cfg := filepath.Join(filepath.Dir(kc), "kube-scheduler.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
`, kc, o.qps, o.burst), 0o600); err != nil {
		return result{}, err
	}
	cmd := exec.Command(bin, "--config", cfg, "--secure-port=0")
	start := time.Now()
	log, stop, err := startLogged(cmd, "kube-scheduler", os.Kill)
	if err != nil {
		return result{}, fmt.Errorf("%w: make %s", err, bin)
	}
	defer stop()
	last, placed, unplaced, err := watch.wait(len(pods), o.timeout)
	if err != nil {
		return result{}, fmt.Errorf("kube-scheduler: %w (log: %s)", err, log)
	}
	res := result{took: last.Sub(start), placed: placed, unplaced: unplaced}
	if res.cpu, err = cpuTime(cmd.Process.Pid); err != nil {
		return res, err
	}
	if res.decidedWrites, err = crawlerStatusWrites(ctx, env.Config); err != nil {
		return res, err
	}
	bound := &corev1.PodList{}
	if err := env.Client.List(ctx, bound, client.InNamespace("bench-pods")); err != nil {
		return res, err
	}
	used := map[string]int64{}
	for i := range bound.Items {
		used[bound.Items[i].Spec.NodeName] += bound.Items[i].Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
	}
	for _, n := range nodes {
		if alloc := n.Status.Allocatable.Cpu().MilliValue(); used[n.Name] > alloc {
			res.violations = append(res.violations, fmt.Sprintf("node %s oversubscribed: %dm of %dm", n.Name, used[n.Name], alloc))
		}
	}
	return res, nil
}

// podLike is a Guaranteed pod holding what crawler c's sizing holds: its exclusive CPUs
// (or its shared-pool request) and memory, on the crawler's nodes.
func podLike(c *isov1.CrawlerVM) *corev1.Pod {
	cpu, mem := resource.MustParse("2"), resource.MustParse("1Gi")
	if s := c.Status.Sizing; s != nil {
		cpu, mem = s.CPURequest, s.Memory
		if s.HostCPUs > 0 {
			cpu = *resource.NewQuantity(int64(s.HostCPUs), resource.DecimalSI)
		}
	}
	rl := corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench-pods", Name: c.Name},
		Spec: corev1.PodSpec{
			NodeSelector:                 c.Spec.Placement.NodeSelector,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "crawler", Image: "registry.invalid/crawler:0.1",
				Resources: corev1.ResourceRequirements{Requests: rl, Limits: rl},
			}},
		},
	}
}

func waitDefaultServiceAccount(ctx context.Context, env *testenv.Env, ns string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no default ServiceAccount in %s: %w", ns, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// watch records, from an informer, when each object of a namespace is first decided.
type watch struct {
	mu               sync.Mutex
	seen             map[string]bool
	placed, unplaced int
	last             time.Time
	changed          chan struct{}
	stop             context.CancelFunc
}

func newWatch(ctx context.Context, env *testenv.Env, obj client.Object, ns string, decided func(client.Object) (bool, bool)) (*watch, error) {
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return nil, err
	}
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return nil, err
	}
	w := &watch{seen: map[string]bool{}, changed: make(chan struct{}, 1)}
	take := func(o any) {
		co, ok := o.(client.Object)
		if !ok {
			return
		}
		done, placed := decided(co)
		if !done {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.seen[co.GetName()] {
			return
		}
		w.seen[co.GetName()] = true
		if placed {
			w.placed++
		} else {
			w.unplaced++
		}
		w.last = time.Now()
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    take,
		UpdateFunc: func(_, o any) { take(o) },
	}); err != nil {
		return nil, err
	}
	ctx, w.stop = context.WithCancel(ctx)
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("watch cache did not sync")
	}
	return w, nil
}

// wait blocks until n objects are decided, and returns when the last one was.
func (w *watch) wait(n int, timeout time.Duration) (time.Time, int, int, error) {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		last, placed, unplaced := w.last, w.placed, w.unplaced
		w.mu.Unlock()
		if placed+unplaced >= n {
			return last, placed, unplaced, nil
		}
		select {
		case <-w.changed:
		case <-deadline:
			return last, placed, unplaced, fmt.Errorf("after %s: %d placed, %d unplaced of %d", timeout, placed, unplaced, n)
		}
	}
}

// writes sums the manager's client requests that write (controller-runtime's
// rest_client_requests_total for POST, PUT, PATCH and DELETE).
func writes(url string) (int, error) {
	by, err := requests(url)
	total := 0
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		total += int(by[m])
	}
	return total, err
}

// requests is the manager's client requests so far, by method (rest_client_requests_total).
func requests(url string) (map[string]float64, error) {
	resp, err := http.Get(url) //nolint:gosec // the manager's own metrics on loopback
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	by := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, `method="`)
		if !strings.HasPrefix(line, "rest_client_requests_total{") || i < 0 {
			continue
		}
		m := line[i+len(`method="`):]
		m = m[:strings.IndexByte(m, '"')]
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return nil, err
		}
		by[m] += v
	}
	return by, sc.Err()
}

// quiesce waits until the manager has made no API write for 5 s, and returns its write
// count then.
func quiesce(url string, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	last, still := -1, 0
	for still < 5 {
		w, err := writes(url)
		if err != nil {
			return 0, err
		}
		if w == last {
			still++
		} else {
			last, still = w, 0
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the manager still writes after %s", timeout)
		}
		time.Sleep(time.Second) // a sampling period, not a wait for a condition
	}
	return last, nil
}

// cpuTime is a process's user and system time (/proc/<pid>/stat).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ
	return time.Duration(ut+st) * time.Second / hz, nil
}

// sharedWithOthers checks every RT node with the other pods bound there: the crawlers'
// CPUs and theirs fit its allocatable.
func sharedWithOthers(ctx context.Context, env *testenv.Env, nodes []*corev1.Node, othersOn map[string]int64) ([]string, error) {
	list := &isov1.CrawlerVMList{}
	if err := env.Client.List(ctx, list, client.InNamespace("bench")); err != nil {
		return nil, err
	}
	used := map[string]int64{}
	for i := range list.Items {
		for _, r := range inventory.Residents(&list.Items[i]) {
			used[r.Node] += scale.HeldMilli(r)
		}
	}
	var out []string
	for _, n := range nodes {
		if alloc := n.Status.Allocatable.Cpu().MilliValue(); used[n.Name]+othersOn[n.Name] > alloc {
			out = append(out, fmt.Sprintf("node %s oversubscribed: crawlers %dm and other pods %dm of %dm allocatable CPU", n.Name, used[n.Name], othersOn[n.Name], alloc))
		}
	}
	return out, nil
}

// logLine is the first line of the log file at path that contains what, "" for none.
func logLine(path, what string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, what) {
			return line
		}
	}
	return ""
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

func parallel(n, count int, f func(i int) error) error {
	errs := make(chan error, count)
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i := 0; i < count; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := f(i); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	return <-errs
}
