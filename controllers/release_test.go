package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/render"
)

// launcherOf creates the virt-launcher pod KubeVirt creates for vmi, pending.
func launcherOf(t *testing.T, c *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "virt-launcher-" + c.Name + "-" + string(vmi.UID)[:5],
			Labels: map[string]string{kubevirtv1.AppLabel: "virt-launcher", kubevirtv1.CreatedByLabel: string(vmi.UID), isov1.LabelCrawlerVM: c.Name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "compute", Image: "virt-launcher"}}},
	}
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

// setRunStrategy does what virtctl stop (Halted) and start (Always) do to a VM.
func setRunStrategy(t *testing.T, vm *kubevirtv1.VirtualMachine, s kubevirtv1.VirtualMachineRunStrategy) {
	t.Helper()
	update(t, vm, func(vm *kubevirtv1.VirtualMachine) { vm.Spec.RunStrategy = ptr.To(s) })
}

// touchVM changes an annotation of the VM, which brings its crawler to a reconcile now
// (after the test stepped the clock), not at the requeue the real clock sets.
func touchVM(t *testing.T, vm *kubevirtv1.VirtualMachine, what string) {
	t.Helper()
	update(t, vm, func(vm *kubevirtv1.VirtualMachine) {
		if vm.Annotations == nil {
			vm.Annotations = map[string]string{}
		}
		vm.Annotations["test/touched"] = what
	})
}

// A crawler a person stopped gives up its reservation after --release-after, and the
// node it held takes another crawler; started again, it waits unscheduled (its VM's
// template pinned to no node) until the model places it, then runs on its node.
func TestStoppedCrawlerReleasesItsReservation(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	// Room for one crawler (3 exclusive CPUs), not two.
	createNode(t, rtNode("release-1", "it", "release"), 5)
	first, vmi := placedCrawler(t, ns, "first", "release")
	waitForCrawler(t, first, "first Ready", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning)
	})
	second := crawler(ns, "second", withSelector("it", "release"))
	if err := k8s.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	waitForCrawler(t, second, "second unplaced: first holds the node", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionPlaced, metav1.ConditionFalse, isov1.ReasonUnschedulable)
	})

	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "first"}}
	setRunStrategy(t, vm, kubevirtv1.RunStrategyHalted) // virtctl stop
	waitForCrawler(t, first, "first stopped, still holding its node", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionFalse, isov1.ReasonVMStopped) && c.Status.Placement != nil
	})
	get(t, second)
	if second.Status.Placement != nil {
		t.Fatalf("second placed on %s while first, stopped within --release-after, holds the node", second.Status.Placement.Node)
	}

	clk.Step(readiness.DefaultReleaseAfter + time.Second)
	touchVM(t, vm, "after release-after")
	waitForCrawler(t, first, "first's reservation released", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionPlaced, metav1.ConditionFalse, isov1.ReasonReleased) && c.Status.Placement == nil
	})
	if c := condition(first, isov1.ConditionPlaced); !strings.Contains(c, "release-1") || !strings.Contains(c, isov1.ReasonVMStopped) {
		t.Errorf("Placed %s: want the node released and why", c)
	}
	get(t, vm)
	if !render.Parked(&vm.Spec.Template.Spec) {
		t.Errorf("VM template affinity %+v: want it pinned to no node", vm.Spec.Template.Spec.Affinity)
	}
	waitForCrawler(t, second, "second placed on the node first released", func(c *isov1.CrawlerVM) bool {
		return c.Status.Placement != nil && c.Status.Placement.Node == "release-1"
	})

	// virtctl start: KubeVirt starts a VMI from the parked template, and creates its
	// launcher, which no node takes. The crawler asks for a reservation again: none fits
	// while second holds the node.
	setRunStrategy(t, vm, kubevirtv1.RunStrategyAlways)
	parked := waitForVMI(t, client.ObjectKeyFromObject(first), func(v *kubevirtv1.VirtualMachineInstance) bool {
		return v.UID != vmi.UID && v.DeletionTimestamp.IsZero()
	})
	if !render.Parked(&parked.Spec) {
		t.Fatalf("VMI started after the release is pinned by %+v, want to no node", parked.Spec.Affinity)
	}
	launcherOf(t, first, parked)
	waitForCrawler(t, first, "first waits for a node", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionPlaced, metav1.ConditionFalse, isov1.ReasonUnschedulable) && c.Status.Placement == nil
	})
	if err := k8s.Delete(ctx, second); err != nil {
		t.Fatal(err)
	}
	waitForCrawler(t, first, "first placed again", func(c *isov1.CrawlerVM) bool {
		return c.Status.Placement != nil && c.Status.Placement.Node == "release-1"
	})
	next := waitForVMI(t, client.ObjectKeyFromObject(first), func(v *kubevirtv1.VirtualMachineInstance) bool {
		return v.UID != parked.UID && render.PinnedNode(&v.Spec) == "release-1"
	})
	setVMIPhase(t, next, kubevirtv1.Running, "release-1")
	waitForCrawler(t, first, "first Ready on release-1", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning)
	})
}

// A crawler whose launcher pod the API server refuses (here its namespace's quota, as
// KubeVirt reports it) says so, and gives up its reservation after --release-after: the
// VMI KubeVirt keeps trying to launch on the node is replaced by one pinned to no node.
func TestRefusedLauncherReleasesItsReservation(t *testing.T) {
	ns := namespace(t)
	createNode(t, rtNode("refused-1", "it", "refused"), 8)
	c := crawler(ns, "refused", withSelector("it", "refused"))
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	vmi := waitForVMI(t, client.ObjectKeyFromObject(c), func(*kubevirtv1.VirtualMachineInstance) bool { return true })
	const quota = `failed to create virtual machine pod: pods "virt-launcher-refused-abcde" is forbidden: exceeded quota: rt, requested: limits.cpu=3, used: limits.cpu=0, limited: limits.cpu=2`
	update(t, vmi, func(v *kubevirtv1.VirtualMachineInstance) {
		v.Status.Phase = kubevirtv1.Pending
		v.Status.Conditions = append(v.Status.Conditions, kubevirtv1.VirtualMachineInstanceCondition{
			Type: kubevirtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse,
			Reason: readiness.FailedCreate, Message: quota, LastTransitionTime: metav1.NewTime(clk.Now()),
		})
	})
	waitForCrawler(t, c, "Ready=False LauncherRefused, the reservation held", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionFalse, isov1.ReasonLauncherRefused) && c.Status.Placement != nil
	})
	if got := condition(c, isov1.ConditionReady); !strings.Contains(got, "exceeded quota") {
		t.Errorf("Ready %s: want the API server's words", got)
	}
	clk.Step(readiness.DefaultReleaseAfter + time.Second)
	touch(t, vmi, "after release-after")
	waitForCrawler(t, c, "reservation released", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionPlaced, metav1.ConditionFalse, isov1.ReasonReleased) && c.Status.Placement == nil
	})
	// KubeVirt may start the next VMI from its copy of the VM before the parked template
	// reached it: that one is replaced in turn, until one of the parked template runs.
	waitForVMI(t, client.ObjectKeyFromObject(c), func(v *kubevirtv1.VirtualMachineInstance) bool {
		return v.UID != vmi.UID && v.DeletionTimestamp.IsZero() && render.Parked(&v.Spec)
	})
}
