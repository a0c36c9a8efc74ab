//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/test/support/testcases"
)

// An upgrade from a release before isochron owned VMs, on KubeVirt itself: the
// crawler's VMI, created bare and controlled by the CrawlerVM as isochron v0.1.0 rendered
// it, keeps running under the VM the new release creates. KubeVirt's VM controller adopts
// it (it adopts only a VMI without a controller, so isochron releases it first), and
// KubeVirt v1.8.4's sync of the VM does not stop at the adopted VMI's empty start revision
// (isochron records one): the VM reports Running and no RestartRequired, the VMI keeps its
// UID, and a PodDisruptionBudget guards its launcher until its next start (the VMI has no
// evictionStrategy External). With two move nodes (E2E_MOVE_NODES), a cordon of its node
// then moves it off live, which needs KubeVirt's live update of the adopted VMI's affinity.
//
// The earlier release is played by stopping the manager: the test deletes the VM this
// release made, creates the bare VMI v0.1.0 rendered in its place from the spec KubeVirt
// gave the VM's VMI (testcases.RenderedByV010, as the integration test does), and starts
// the manager again.
func TestEarlierReleasesVMIIsAdoptedRunning(t *testing.T) {
	ctx := context.Background()
	sel, _, noMove := readyMoveNodes(ctx, t)
	var opts []func(*isov1.CrawlerVM)
	if noMove == "" {
		opts = append(opts, onMoveNodes(sel))
	}
	ns := testNamespace(t)
	cvm, started := runningShared(ctx, t, ns, "legacy", opts...)

	replicas := scaleManager(ctx, t, 0)
	t.Cleanup(func() { scaleManager(context.Background(), t, replicas) })
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cvm.Name}}
	if err := cl.Delete(ctx, vm, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatalf("deleting VM %s: %v", vm.Name, err)
	}
	waitFor(t, deleteTimeout, "the VM and its VMI gone", func() (bool, string, error) {
		var left []string
		for _, o := range []client.Object{&kubevirtv1.VirtualMachine{}, &kubevirtv1.VirtualMachineInstance{}} {
			err := cl.Get(ctx, client.ObjectKeyFromObject(vm), o)
			if err == nil {
				left = append(left, fmt.Sprintf("%T", o))
			} else if !apierrors.IsNotFound(err) {
				return false, "", err
			}
		}
		return len(left) == 0, fmt.Sprintf("still there: %v", left), nil
	})

	// The VMI as v0.1.0 created it: its spec is what KubeVirt completed of the rendering
	// (firmware, machine, defaults), without the later releases' agent and inputs hash;
	// its labels are isochron's, not those KubeVirt adds.
	bare := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cvm.Name, Labels: map[string]string{}},
		Spec:       *started.Spec.DeepCopy(),
	}
	for k, v := range started.Labels {
		if !strings.HasPrefix(k, "kubevirt.io/") {
			bare.Labels[k] = v
		}
	}
	legacy := testcases.RenderedByV010(testcases.BareVMI(bare, cvm, ""), cvm, "", "", 0)
	if err := cl.Create(ctx, legacy); err != nil {
		t.Fatalf("creating the bare VMI of v0.1.0: %v", err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	waitFor(t, runTimeout, "the bare VMI Running", func() (bool, string, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(legacy), vmi); err != nil {
			return false, "", err
		}
		return vmi.Status.Phase == kubevirtv1.Running, fmt.Sprintf("phase %s", vmi.Status.Phase), nil
	})
	uid, node := vmi.UID, vmi.Status.NodeName
	t.Logf("bare VMI %s (uid %s) runs on %s, no VM, controlled by the crawler: starting the manager", vmi.Name, uid, node)

	// The new release.
	upgraded := time.Now()
	scaleManager(ctx, t, replicas)
	waitFor(t, runTimeout, "the VM adopting the running VMI, Running", func() (bool, string, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		return vmi.UID != uid || (metav1.IsControlledBy(vmi, vm) && vm.Status.PrintableStatus == kubevirtv1.VirtualMachineStatusRunning),
			fmt.Sprintf("VMI uid %s owners %+v; VM status %q", vmi.UID, vmi.OwnerReferences, vm.Status.PrintableStatus), nil
	})
	t.Logf("VM %s adopted VMI %s %s after the manager was started; VMI start revision %q", vm.Name, vmi.Name, time.Since(upgraded).Round(time.Second), vmi.Status.VirtualMachineRevisionName)
	if vmi.UID != uid {
		t.Fatalf("the VMI was replaced (uid %s, was %s): want the bare VMI adopted running", vmi.UID, uid)
	}
	for _, c := range vm.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineRestartRequired && c.Status == corev1.ConditionTrue {
			t.Errorf("the adopting VM asks for a restart: %+v", c)
		}
	}
	if r := condition(ctx, t, cvm, isov1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v, want True", r)
	}
	if len(cvm.Status.Outages) > 0 {
		t.Errorf("outages %+v, want none: the upgrade restarted nothing", cvm.Status.Outages)
	}
	waitFor(t, time.Minute, "a "+isov1.EventReasonVMIAdopted+" Event", func() (bool, string, error) {
		reasons := crawlerEventReasons(ctx, t, cvm)
		return slices.Contains(reasons, isov1.EventReasonVMIAdopted), fmt.Sprint(reasons), nil
	})

	// Until its next start, a PodDisruptionBudget keeps its launcher: an eviction (a
	// drain's) is refused by the API server. A dry run: were it allowed, nothing goes.
	pdb := &policyv1.PodDisruptionBudget{}
	waitFor(t, time.Minute, "the adopted VMI's PodDisruptionBudget counting its launcher", func() (bool, string, error) {
		err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: cvm.Name + "-adopted"}, pdb)
		if err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		return pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.CurrentHealthy == 1, fmt.Sprintf("%+v", pdb.Status), nil
	})
	launcher := launcherPod(ctx, t, vmi)
	evict := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: launcher.Name},
		DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}}
	if err := cl.SubResource("eviction").Create(ctx, launcher, evict); !apierrors.IsTooManyRequests(err) {
		t.Errorf("evicting the adopted VMI's launcher %s (dry run): %v, want it refused (429) by its PodDisruptionBudget", launcher.Name, err)
	}

	if noMove != "" {
		t.Logf("not moving the adopted VMI: %s", noMove)
		deleteAndWaitGone(ctx, t, cvm, launcher)
		return
	}
	// A cordon, a drain's first step, moves it off live.
	t.Cleanup(func() { _ = exec.Command(kubectl, "uncordon", node).Run() })
	if out, err := exec.Command(kubectl, "cordon", node).CombinedOutput(); err != nil {
		t.Fatalf("kubectl cordon %s: %v: %s", node, err, out)
	}
	cordoned := time.Now()
	waitFor(t, runTimeout, "the adopted crawler moved live off the cordoned node", func() (bool, string, error) {
		condition(ctx, t, cvm, isov1.ConditionReady)
		l := cvm.Status.LastMove
		return l != nil && l.Result != "", fmt.Sprintf("move %+v, last move %+v", cvm.Status.Move, l), nil
	})
	after := &kubevirtv1.VirtualMachineInstance{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), after); err != nil {
		t.Fatal(err)
	}
	l := cvm.Status.LastMove
	t.Logf("after the cordon (%s): last move %+v; VMI uid %s on %s", time.Since(cordoned).Round(time.Second), l, after.UID, after.Status.NodeName)
	if l.Result != isov1.MoveSucceeded || l.Mode != isov1.MoveLive || after.UID != uid || after.Status.NodeName == node {
		t.Errorf("want the adopted VMI (uid %s) moved live off %s", uid, node)
	}
	if len(cvm.Status.Outages) > 0 {
		t.Errorf("outages %+v, want none", cvm.Status.Outages)
	}
	deleteAndWaitGone(ctx, t, cvm, launcherPod(ctx, t, after))
}

// scaleManager sets the manager's replicas to n, waits until that many run (none: their
// pods are gone), and returns how many it had.
func scaleManager(ctx context.Context, t *testing.T, n int32) int32 {
	t.Helper()
	dep := &appsv1.Deployment{}
	key := client.ObjectKey{Namespace: operatorNS, Name: operatorDep}
	if err := cl.Get(ctx, key, dep); err != nil {
		t.Fatalf("reading deployment %s: %v", operatorDep, err)
	}
	was := ptr.Deref(dep.Spec.Replicas, 1)
	patch := client.MergeFrom(dep.DeepCopy())
	dep.Spec.Replicas = ptr.To(n)
	if err := cl.Patch(ctx, dep, patch); err != nil {
		t.Fatalf("scaling deployment %s to %d: %v", operatorDep, n, err)
	}
	waitFor(t, 5*time.Minute, fmt.Sprintf("deployment %s at %d replicas", operatorDep, n), func() (bool, string, error) {
		if err := cl.Get(ctx, key, dep); err != nil {
			return false, "", err
		}
		pods := &corev1.PodList{}
		if err := cl.List(ctx, pods, client.InNamespace(operatorNS), client.MatchingLabels(dep.Spec.Selector.MatchLabels)); err != nil {
			return false, "", err
		}
		ok := dep.Status.ObservedGeneration == dep.Generation && dep.Status.ReadyReplicas == n && (n > 0 || len(pods.Items) == 0)
		return ok, fmt.Sprintf("%d ready, %d pods", dep.Status.ReadyReplicas, len(pods.Items)), nil
	})
	return was
}

// crawlerEventReasons lists the reasons of the Events about cvm.
func crawlerEventReasons(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM) []string {
	t.Helper()
	events := &corev1.EventList{}
	if err := cl.List(ctx, events, client.InNamespace(cvm.Namespace)); err != nil {
		t.Fatalf("listing Events: %v", err)
	}
	var reasons []string
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "CrawlerVM" && e.InvolvedObject.Name == cvm.Name {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}
