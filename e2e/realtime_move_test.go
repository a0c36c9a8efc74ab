//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// moveDedicatedLive moves the dedicated crawler cvm, running as vmi, live to another node
// and checks it runs there with realtime vCPUs; it returns its launcher pod there. The
// move is a drain's: a cordon alone moves only an adopted VMI. KubeVirt 1.8.4 gives vCPU
// threads SCHED_FIFO only in the virt-handler pass that finds the VMI not yet Running
// (pkg/hypervisor/kvm/runtime.go HandleHousekeeping), which a migration's target never
// does; the NIC agent's guard gives it (docs/availability.md). The test reads the target
// QEMU's vCPU threads right after the move, logs what KubeVirt left, and waits for
// SCHED_FIFO.
func moveDedicatedLive(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance) *corev1.Pod {
	t.Helper()
	ns, node := cvm.Namespace, vmi.Status.NodeName
	t.Logf("dedicated crawler runs on %s (VMI uid %s): draining it off", node, vmi.UID)

	// A drain of its launcher: KubeVirt refuses the eviction (evictionStrategy External)
	// and isochron moves the crawler live; the drain then completes.
	t.Cleanup(func() { _ = exec.Command(kubectl, "uncordon", node).Run() })
	drained := time.Now()
	out, took, err := drain(ctx, t, ns, node, "--pod-selector", kubevirtv1.CreatedByLabel+"="+string(vmi.UID), "--delete-emptydir-data", "--ignore-daemonsets")
	t.Logf("kubectl drain %s (%s): %v\n%s", node, took.Round(time.Second), err, out)
	if err != nil {
		t.Fatalf("the drain did not complete")
	}
	waitFor(t, runTimeout, "the crawler's move recorded", func() (bool, string, error) {
		condition(ctx, t, cvm, isov1.ConditionReady)
		l := cvm.Status.LastMove
		return l != nil && l.Result != "" && cvm.Status.Move == nil, fmt.Sprintf("move %+v, last move %+v", cvm.Status.Move, l), nil
	})
	moved := time.Now()
	after := &kubevirtv1.VirtualMachineInstance{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), after); err != nil {
		t.Fatal(err)
	}
	l := cvm.Status.LastMove
	t.Logf("after the drain began (%s): last move %+v; VMI uid %s on %s", moved.Sub(drained).Round(time.Second), l, after.UID, after.Status.NodeName)
	if l.Result != isov1.MoveSucceeded || l.Mode != isov1.MoveLive || after.UID != vmi.UID || after.Status.NodeName == node {
		t.Fatalf("want the VMI (uid %s) moved live off %s", vmi.UID, node)
	}
	launcher := launcherPod(ctx, t, after)

	vcpus, _ := readQEMU(t, ns, launcher.Name).vCPUs()
	var notRealtime []string
	for _, th := range vcpus {
		t.Logf("on %s, %s after the move: vCPU thread %d %q, scheduling policy %d", after.Status.NodeName, time.Since(moved).Round(time.Second), th.TID, th.Name, th.Policy)
		if th.Policy != 1 {
			notRealtime = append(notRealtime, fmt.Sprintf("%d", th.TID))
		}
	}
	if len(vcpus) == 0 || !strings.HasSuffix(vcpus[0].Name, "/KVM") {
		t.Logf("the vCPU threads %+v are not KVM's: nothing is realtime under software emulation (the move itself was checked)", vcpus)
		return launcher
	}
	waitFor(t, 2*time.Minute, "the moved crawler's vCPU threads SCHED_FIFO", func() (bool, string, error) {
		vcpus, _ := readQEMU(t, ns, launcher.Name).vCPUs()
		for _, th := range vcpus {
			if th.Policy != 1 {
				return false, fmt.Sprintf("vCPU thread %d %q has scheduling policy %d", th.TID, th.Name, th.Policy), nil
			}
		}
		return len(vcpus) > 0, "no vCPU threads", nil
	})
	t.Logf("vCPU threads SCHED_FIFO %s after the move", time.Since(moved).Round(time.Second))
	// The guard watches the target from the move's start (the crawler is placed there),
	// so it may have made the vCPUs realtime before the move ended: its Event says so.
	e := vcpuEvent(ctx, t, cvm, drained, 0)
	if len(notRealtime) > 0 {
		waitFor(t, time.Minute, "the crawler's Event "+isov1.EventReasonVCPUsMadeRealtime, func() (bool, string, error) {
			e = vcpuEvent(ctx, t, cvm, drained, 0)
			return e != nil, "none yet", nil
		})
		t.Logf("KubeVirt left threads %v of the target without SCHED_FIFO", notRealtime)
	}
	if e != nil {
		t.Logf("Event %s at %s: %s", e.Reason, e.LastTimestamp.UTC().Format(time.RFC3339), e.Message)
	} else {
		t.Logf("no Event %s since the drain began: the target's vCPUs were SCHED_FIFO without the guard", isov1.EventReasonVCPUsMadeRealtime)
	}
	if len(cvm.Status.Outages) > 0 {
		t.Errorf("outages %+v, want none", cvm.Status.Outages)
	}
	return launcher
}
