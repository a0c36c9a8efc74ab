//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// Waits that follow progress. On the emulated node VMs a crawler starts, a probe runs and
// a move ends in one minute or in a quarter of an hour, depending on what else the
// machine runs: a fixed budget is either too short on a loaded machine or hides a wait
// that is stuck. These waits fail when nothing the wait depends on in the test's
// namespace has changed for stallTimeout (nsProgress), or after progressLimit whatever
// happens.
const (
	// stallTimeout is how long a namespace may show no change before a wait gives up:
	// longer than isochron's fourth wait before a retry (8 min, move.Backoff) and than
	// the quietest part of a pod's start on a loaded emulated node (7 min from creation
	// to the first container seen, sandboxes retried meanwhile); each container started
	// is a change. A migration transferring counts as a change: KubeVirt aborts it when
	// it stops making progress (progressTimeout) or runs out of time
	// (completionTimeoutPerGiB).
	stallTimeout = 10 * time.Minute
	// progressLimit bounds a wait that keeps seeing changes.
	progressLimit = 60 * time.Minute
)

// waitProgress is waitFor with a budget that follows progress: cond is polled until it
// holds; the wait fails when progress (a summary of what the wait depends on) has not
// changed for stall and busy says nothing is under way that has its own timeout, or
// after limit.
func waitProgress(t *testing.T, stall, limit time.Duration, what string, progress func() (state string, busy bool), cond func() (bool, string, error)) {
	t.Helper()
	if err := pollProgress(context.Background(), stall, limit, progress, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// pollProgress polls cond every 2 s until it holds, progress has not changed for stall
// (nor said busy), limit has passed, or ctx is done.
func pollProgress(ctx context.Context, stall, limit time.Duration, progress func() (string, bool), cond func() (bool, string, error)) error {
	start := time.Now()
	changed, last := start, ""
	for {
		ok, msg, err := cond()
		if err != nil || ok {
			return err
		}
		state, busy := progress()
		now := time.Now()
		if state != last || busy {
			changed, last = now, state
		}
		switch {
		case now.Sub(changed) > stall:
			return fmt.Errorf("no progress for %s (after %s): %s; %s", stall, now.Sub(start).Round(time.Second), msg, state)
		case now.Sub(start) > limit:
			return fmt.Errorf("not after %s: %s; %s", limit, msg, state)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// nsProgress summarises what a crawler's start, probe or move in namespace ns goes
// through, for waitProgress:
// the crawlers' move and last move, KubeVirt's migrations and their phases, each VMI's
// node and migration state, the pods (launchers, probes) and how many of their
// containers have started, and the probe Jobs. busy is set while a migration transfers a
// VMI (started, not ended).
func nsProgress(ctx context.Context, t *testing.T, ns string) (string, bool) {
	t.Helper()
	var parts []string
	busy := false
	add := func(format string, a ...any) { parts = append(parts, fmt.Sprintf(format, a...)) }
	in := client.InNamespace(ns)

	cvms := &isov1.CrawlerVMList{}
	if err := cl.List(ctx, cvms, in); err != nil {
		return "listing CrawlerVMs: " + err.Error(), false
	}
	for _, c := range cvms.Items {
		s := "crawler " + c.Name
		if m := c.Status.Move; m != nil {
			s += fmt.Sprintf(" moving %s->%s (%s)", m.From, m.To, m.Migration)
		}
		if l := c.Status.LastMove; l != nil {
			s += fmt.Sprintf(" last move %s %s", l.Migration, l.Result)
		}
		if p := c.Status.LastProbe; p != nil {
			s += fmt.Sprintf(" last probe %s %s", p.Job, p.Verdict)
		}
		add("%s", s)
	}
	migs := &kubevirtv1.VirtualMachineInstanceMigrationList{}
	if err := cl.List(ctx, migs, in); err == nil {
		for _, m := range migs.Items {
			add("migration %s %s", m.Name, m.Status.Phase)
		}
	}
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	if err := cl.List(ctx, vmis, in); err == nil {
		for _, v := range vmis.Items {
			s := fmt.Sprintf("vmi %s %s on %s", v.Name, v.Status.Phase, v.Status.NodeName)
			if ms := v.Status.MigrationState; ms != nil {
				s += fmt.Sprintf(" migration %s to %s started %t ended %t completed %t failed %t abort %q", ms.MigrationUID, ms.TargetNode,
					ms.StartTimestamp != nil, ms.EndTimestamp != nil, ms.Completed, ms.Failed, ms.AbortStatus)
				busy = busy || (ms.StartTimestamp != nil && ms.EndTimestamp == nil)
			}
			add("%s", s)
		}
	}
	pods := &corev1.PodList{}
	if err := cl.List(ctx, pods, in); err == nil {
		for _, p := range pods.Items {
			running := 0
			for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
				if cs.State.Running != nil || cs.State.Terminated != nil {
					running++
				}
			}
			add("pod %s %s on %s, %d containers started", p.Name, p.Status.Phase, p.Spec.NodeName, running)
		}
	}
	jobs := &batchv1.JobList{}
	if err := cl.List(ctx, jobs, in); err == nil {
		for _, j := range jobs.Items {
			add("job %s active %d succeeded %d failed %d", j.Name, j.Status.Active, j.Status.Succeeded, j.Status.Failed)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "; "), busy
}

// drain runs kubectl drain of node with args for as long as the moves of the crawlers in
// namespace ns progress (nsProgress, stallTimeout, progressLimit), instead of a fixed
// --timeout: on the emulated node VMs a drain's moves take minutes each. It returns
// kubectl's output and how long it ran, and fails t when the drain stalled.
func drain(ctx context.Context, t *testing.T, ns, node string, args ...string) (string, time.Duration, error) {
	t.Helper()
	args = append([]string{"drain", node}, append(args, "--timeout=0s")...)
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(dctx, kubectl, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var result error
	err := pollProgress(ctx, stallTimeout, progressLimit, func() (string, bool) { return nsProgress(ctx, t, ns) }, func() (bool, string, error) {
		select {
		case result = <-done:
			return true, "", nil
		default:
			return false, "kubectl drain runs", nil
		}
	})
	if err != nil {
		cancel()
		stopped := <-done
		t.Logf("kubectl %s (%s, stopped: %v):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Second), stopped, out.String())
		t.Fatalf("the drain of %s did not complete: %v", node, err)
	}
	return out.String(), time.Since(start), result
}
