//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// runningShared creates a shared crawler (5 requests/s) and waits until its VMI runs and
// it is Ready; it returns the VMI.
func runningShared(ctx context.Context, t *testing.T, ns, name string, opts ...func(*isov1.CrawlerVM)) (*isov1.CrawlerVM, *kubevirtv1.VirtualMachineInstance) {
	t.Helper()
	return runCrawlerVM(ctx, t, crawler(ns, name, append([]func(*isov1.CrawlerVM){shared}, opts...)...))
}

// firstVirtNode is the hostname label of the first node by name that KubeVirt can run
// VMs on (kubevirt.io/schedulable=true): the only one of a single-node cluster, the host's
// node of the local cluster with node VMs.
func firstVirtNode(ctx context.Context, t *testing.T) string {
	t.Helper()
	nodes := &corev1.NodeList{}
	if err := cl.List(ctx, nodes, client.MatchingLabels{kubevirtv1.NodeSchedulable: "true"}); err != nil {
		t.Fatalf("listing nodes: %v", err)
	}
	if len(nodes.Items) == 0 {
		t.Fatalf("no node has %s=true: is KubeVirt's virt-handler running?", kubevirtv1.NodeSchedulable)
	}
	first := slices.MinFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	return first.Labels[corev1.LabelHostname]
}

// A crashed crawler runs again with nobody acting: its QEMU killed by PID, KubeVirt's VM
// controller starts a new VMI (runStrategy Always), and the crawler is Ready again.
func TestCrashedCrawlerRestartsByItself(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	cvm, vmi := runningShared(ctx, t, ns, "crash")
	launcher := launcherPod(ctx, t, vmi)
	vm := &kubevirtv1.VirtualMachine{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), vm); err != nil || !metav1.IsControlledBy(vmi, vm) {
		t.Fatalf("VM %s: %v; the VMI's owners %+v: want the VMI started by the crawler's VM", vmi.Name, err, vmi.OwnerReferences)
	}

	// The QEMU of the guest, by its PID, as the compute container sees it: the one named
	// after the domain. Not any qemu-system: libvirt may be probing another binary's
	// capabilities then (seen: qemu-system-i386 probed 4 s after the guest started, and
	// killed by the test instead of the guest).
	domain := vmi.Namespace + "_" + vmi.Name
	script := `for d in /proc/[0-9]*; do if tr '\0' ' ' < $d/cmdline 2>/dev/null | grep -q -- "^/usr/[a-z]*/qemu-system.* -name guest=` + domain + `,"; then p=${d#/proc/}; kill -9 $p && echo $p; exit; fi; done; echo "no QEMU runs ` + domain + `" >&2; exit 1`
	args := []string{"exec", "-n", ns, launcher.Name, "-c", "compute", "--", "sh", "-c", script}
	out, err := exec.Command(kubectl, args...).Output()
	if err != nil {
		t.Fatalf("killing QEMU: kubectl %s: %v%s", strings.Join(args[:6], " "), err, stderrOf(err))
	}
	killed := time.Now()
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	t.Logf("killed QEMU (PID %d) of VMI %s (uid %s)", pid, vmi.Name, vmi.UID)

	next := &kubevirtv1.VirtualMachineInstance{}
	var seenDown bool
	waitFor(t, runTimeout, "a new VMI Running and the crawler Ready again", func() (bool, string, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), next); err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		c := condition(ctx, t, cvm, isov1.ConditionReady)
		if c != nil && c.Status != metav1.ConditionTrue {
			seenDown = true
		}
		return next.UID != vmi.UID && next.Status.Phase == kubevirtv1.Running && c != nil && c.Status == metav1.ConditionTrue,
			fmt.Sprintf("VMI uid %s phase %s, Ready: %v", next.UID, next.Status.Phase, c), nil
	})
	t.Logf("from the kill to the new VMI Running and the crawler Ready: %s (the crawler was seen not Ready: %v)", time.Since(killed).Round(time.Second), seenDown)
	if next.Status.NodeName != cvm.Status.Placement.Node {
		t.Errorf("the new VMI runs on %s, the crawler is placed on %s", next.Status.NodeName, cvm.Status.Placement.Node)
	}
	// The outage is recorded with its cause and duration.
	waitFor(t, time.Minute, "the outage recorded", func() (bool, string, error) {
		condition(ctx, t, cvm, isov1.ConditionReady)
		o := cvm.Status.Outages
		return len(o) == 1 && o[0].End != nil, fmt.Sprintf("outages %+v", o), nil
	})
	o := cvm.Status.Outages[0]
	t.Logf("recorded outage: cause %s, %s to %s (%s): %s", o.Cause, o.Start.UTC().Format(time.RFC3339), o.End.UTC().Format(time.RFC3339), o.Duration.Duration, o.Message)
	if o.Cause != isov1.OutageCrash || o.Duration == nil || o.Duration.Duration > 5*time.Minute {
		t.Errorf("outage %+v: want a crash of minutes at most", o)
	}
	deleteAndWaitGone(ctx, t, cvm, launcherPod(ctx, t, next))
}

// A drain of a crawler's node, the only one it may run on (its nodeSelector names it, on
// a cluster of one node or more), hands the crawler to isochron: the eviction of its
// launcher is refused (evictionStrategy External), the crawler keeps running, says why it
// stays, and the drain waits, until the test stops it.
func TestDrainOfTheOnlyNodeWaits(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	only := firstVirtNode(ctx, t)
	cvm, vmi := runningShared(ctx, t, ns, "drained", func(c *isov1.CrawlerVM) {
		c.Spec.Placement = &isov1.Placement{NodeSelector: map[string]string{corev1.LabelHostname: only}}
	})
	node := vmi.Status.NodeName
	t.Cleanup(func() { _ = exec.Command(kubectl, "uncordon", node).Run() })

	// The drain of the crawler's launcher alone (the cluster's own pods run on the node
	// too), bounded: kubectl retries the refused eviction every 5 s until its timeout.
	// --delete-emptydir-data as KubeVirt's users drain: a launcher pod has emptyDir
	// volumes, which kubectl otherwise refuses to evict before asking.
	args := []string{"drain", node, "--pod-selector", kubevirtv1.CreatedByLabel + "=" + string(vmi.UID), "--delete-emptydir-data", "--ignore-daemonsets", "--timeout=40s"}
	out, err := exec.Command(kubectl, args...).CombinedOutput()
	t.Logf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	if err == nil {
		t.Fatalf("the drain completed: the crawler's launcher was evicted with nowhere to go")
	}
	if !strings.Contains(string(out), "evacuation") {
		t.Errorf("the drain's refusals do not come from KubeVirt's evacuation (evictionStrategy External): %s", out)
	}
	c := condition(ctx, t, cvm, isov1.ConditionMoving)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != isov1.ReasonMoveBlocked || !strings.Contains(c.Message, "the drain waits") {
		t.Errorf("Moving = %+v, want False/%s saying the drain waits", c, isov1.ReasonMoveBlocked)
	}
	got := &kubevirtv1.VirtualMachineInstance{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), got); err != nil {
		t.Fatal(err)
	}
	if got.UID != vmi.UID || got.Status.Phase != kubevirtv1.Running || got.Status.EvacuationNodeName != node {
		t.Errorf("VMI uid %s (was %s) phase %s evacuation %q: want the same VMI running, marked for evacuation from %s", got.UID, vmi.UID, got.Status.Phase, got.Status.EvacuationNodeName, node)
	}
	if r := condition(ctx, t, cvm, isov1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v, want True: the crawler stays up while the drain waits", r)
	}
	deleteAndWaitGone(ctx, t, cvm, launcherPod(ctx, t, got))
}
