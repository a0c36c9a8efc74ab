package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/test/support/scale"
	"isochron.io/isochron/test/support/testenv"
)

// pausedLeader is -pause-leader: two manager binaries with leader election, the leader
// stopped (SIGSTOP, as a long GC pause or a frozen cgroup stops it) with two fifths of the
// crawlers decided, until the other has taken the Lease over and decided a tenth more,
// then resumed (SIGCONT). The Lease's timings are the manager's defaults (15 s, 10 s, 2 s). It counts the nodes left holding more than they have, with the leader fence
// of config/admission installed or, with -no-fence, without it.
func pausedLeader(ctx context.Context, env *testenv.Env, o options, kc string) error {
	const leaseNS = "default"
	if !o.noFence {
		if _, err := env.InstallLeaderFence(ctx, leaseNS); err != nil {
			return err
		}
	}
	// Every crawler the same: 4 dedicated vCPUs, 5 exclusive CPUs and KubeVirt's support
	// containers; ten of them fill a node of 51 allocatable CPUs. As many crawlers as the
	// nodes hold, and a tenth more, so that the last decisions compete for the last slots.
	nodes := make([]*corev1.Node, o.nodes)
	for i := range nodes {
		nodes[i] = testenv.RTNode(fmt.Sprintf("pl-%04d", i), 53, "pool", "paused")
	}
	if err := parallel(16, len(nodes), func(i int) error { return testenv.RegisterNode(ctx, env.Client, nodes[i]) }); err != nil {
		return err
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		return err
	}
	n := o.nodes * 11
	crawlers := make([]*isov1.CrawlerVM, n)
	for i := range crawlers {
		crawlers[i] = scale.Crawler("bench", fmt.Sprintf("c%05d", i), 1000, false)
		crawlers[i].Spec.Placement = &isov1.Placement{NodeSelector: map[string]string{"pool": "paused"}}
	}
	fence := "with the leader fence"
	if o.noFence {
		fence = "without the leader fence"
	}
	fmt.Printf("paused leader, %s: %d crawlers of 5 CPUs for %d nodes of ten slots\n", fence, n, o.nodes)

	start := func(name string) (*exec.Cmd, func(), error) {
		cmd := exec.Command(o.manager, "--leader-elect", "--leader-election-namespace="+leaseNS,
			"--metrics-bind-address=0", "--health-probe-bind-address=0",
			fmt.Sprintf("--kube-api-qps=%d", o.qps), fmt.Sprintf("--kube-api-burst=%d", o.burst))
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kc)
		log, stop, err := startLogged(cmd, name, syscall.SIGTERM)
		if err == nil {
			fmt.Printf("  %s: log %s\n", name, log)
		}
		return cmd, stop, err
	}
	a, stopA, err := start("manager-a")
	if err != nil {
		return err
	}
	defer stopA()
	if _, err := leaseHolder(ctx, env, leaseNS, func(h string) bool { return h != "" }); err != nil {
		return err
	}
	_, stopB, err := start("manager-b")
	if err != nil {
		return err
	}
	defer stopB()
	if err := scale.CreateAll(ctx, env.Client, crawlers, 16); err != nil {
		return err
	}
	if err := decidedAtLeast(ctx, env, n*2/5); err != nil {
		return err
	}
	first, err := leaseHolder(ctx, env, leaseNS, func(string) bool { return true })
	if err != nil {
		return err
	}
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	stopped := time.Now()
	fmt.Printf("  SIGSTOP the leader (%s) with %d crawlers decided\n", first, decidedCount(ctx, env))
	if _, err := leaseHolder(ctx, env, leaseNS, func(h string) bool { return h != first }); err != nil {
		return err
	}
	fmt.Printf("  the other took the Lease over %s later\n", time.Since(stopped).Round(100*time.Millisecond))
	// What the paused leader had written when it lost the Lease: anything it writes from
	// now on is a stale decision.
	before, err := reservations(ctx, env, first)
	if err != nil {
		return err
	}
	watch := &overbookedNodes{nodes: nodes}
	// Resumed while the other decides, a tenth of the crawlers later.
	d0 := decidedCount(ctx, env)
	if err := watch.until(ctx, env, func() bool { return decidedCount(ctx, env) >= d0+n/10 }); err != nil {
		return err
	}
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	resumed := time.Now()
	fmt.Printf("  SIGCONT the old leader with %d crawlers decided\n", decidedCount(ctx, env))
	// The old leader's last writes, and the new leader's undoing of what they overbook.
	if err := watch.until(ctx, env, func() bool { return decidedCount(ctx, env) >= n && time.Since(resumed) > 20*time.Second }); err != nil {
		return err
	}
	after, err := reservations(ctx, env, first)
	if err != nil {
		return err
	}
	stale := 0
	for key, node := range after {
		if before[key] != node {
			stale++
		}
	}
	fmt.Printf("\n| fence | crawlers / nodes | stale decisions written by the paused leader | most nodes over allocatable at once | nodes over allocatable at the end |\n|---|---:|---:|---:|---:|\n")
	fmt.Printf("| %s | %d / %d | %d | %d | %d |\n\n", map[bool]string{true: "none", false: "leader fence"}[o.noFence], n, o.nodes, stale, watch.most, watch.last)
	return nil
}

// reservations are the nodes of the crawlers whose reservation id wrote last
// (status.decidedBy), by crawler.
func reservations(ctx context.Context, env *testenv.Env, id string) (map[string]string, error) {
	list := &isov1.CrawlerVMList{}
	if err := env.Client.List(ctx, list, client.InNamespace("bench")); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i := range list.Items {
		if c := &list.Items[i]; c.Status.DecidedBy == id && c.Status.Placement != nil {
			out[c.Name] = c.Status.Placement.Node
		}
	}
	return out, nil
}

// overbookedNodes samples how many nodes hold more than they have.
type overbookedNodes struct {
	nodes      []*corev1.Node
	most, last int
}

// until samples every 200 ms until done says so (ten minutes at most).
func (w *overbookedNodes) until(ctx context.Context, env *testenv.Env, done func() bool) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		list := &isov1.CrawlerVMList{}
		if err := env.Client.List(ctx, list, client.InNamespace("bench")); err != nil {
			return err
		}
		w.last = 0
		for _, v := range scale.Violations(w.nodes, list.Items) {
			if strings.Contains(v, "oversubscribed") {
				w.last++
			}
		}
		w.most = max(w.most, w.last)
		if done() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still waiting after ten minutes")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// leaseHolder waits, a minute at most, until the manager's Lease's holder satisfies ok,
// and returns it.
func leaseHolder(ctx context.Context, env *testenv.Env, ns string, ok func(string) bool) (string, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		l := &coordinationv1.Lease{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: isov1.LeaderLease}, l)
		h := ""
		if err == nil && l.Spec.HolderIdentity != nil {
			h = *l.Spec.HolderIdentity
		}
		if err == nil && ok(h) {
			return h, nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return "", fmt.Errorf("reading the Lease: %w", err)
			}
			return "", fmt.Errorf("the Lease is held by %q", h)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// decidedCount is how many crawlers of bench have a Placed condition for their
// generation.
func decidedCount(ctx context.Context, env *testenv.Env) int {
	list := &isov1.CrawlerVMList{}
	if err := env.Client.List(ctx, list, client.InNamespace("bench")); err != nil {
		return 0
	}
	n := 0
	for i := range list.Items {
		for _, c := range list.Items[i].Status.Conditions {
			if c.Type == isov1.ConditionPlaced && c.ObservedGeneration == list.Items[i].Generation {
				n++
			}
		}
	}
	return n
}

// decidedAtLeast waits, ten minutes at most, until n crawlers are decided.
func decidedAtLeast(ctx context.Context, env *testenv.Env, n int) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		got := decidedCount(ctx, env)
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d crawlers decided, waiting for %d", got, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
