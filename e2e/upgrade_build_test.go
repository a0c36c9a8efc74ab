//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/render"
)

// Upgrading isochron to another build (its manager, NIC agent and probe images, as a
// new release's install.yaml or chart changes them) restarts no crawler: both replicas of
// the manager and every NIC agent roll to the new images, the new manager reads the
// crawler again (a spec change made after the rollout is judged), and the crawler's VMI
// keeps its UID and runs on without an outage or a RestartRequired. The new probe image
// reaches the crawler's agent disk only at its next start. E2E_UPGRADE_IMG,
// E2E_UPGRADE_NIC_AGENT_IMG and E2E_UPGRADE_PROBE_IMG name the images upgraded to (make
// e2e-local tags the build's images so); unset, the test is skipped.
func TestUpgradeToAnotherBuildRestartsNoVM(t *testing.T) {
	to := map[string]string{"E2E_UPGRADE_IMG": "", "E2E_UPGRADE_NIC_AGENT_IMG": "", "E2E_UPGRADE_PROBE_IMG": ""}
	for k := range to {
		if to[k] = os.Getenv(k); to[k] == "" {
			t.Skipf("%s is not set: no images to upgrade to (make e2e-local sets E2E_UPGRADE_*)", k)
		}
	}
	ctx := context.Background()
	ns := testNamespace(t)
	cvm, vmi := runningShared(ctx, t, ns, "upgraded")
	uid := vmi.UID
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cvm), cvm); err != nil {
		t.Fatal(err)
	}
	outages := len(cvm.Status.Outages)
	oldProbe := probeImage

	before := [3]string{managerImage, nicAgentImage, probeImage}
	t.Cleanup(func() {
		managerImage, nicAgentImage, probeImage = before[0], before[1], before[2]
		if err := deploy(context.Background()); err != nil {
			t.Errorf("installing the images under test again for the tests after: %v", err)
		}
	})
	managerImage, nicAgentImage, probeImage = to["E2E_UPGRADE_IMG"], to["E2E_UPGRADE_NIC_AGENT_IMG"], to["E2E_UPGRADE_PROBE_IMG"]
	began := time.Now()
	if err := deploy(ctx); err != nil {
		t.Fatalf("upgrading isochron: %v", err)
	}
	waitFor(t, runTimeout, "the manager and the NIC agents rolled out on the new images", func() (bool, string, error) {
		dep := &appsv1.Deployment{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: operatorDep}, dep); err != nil {
			return false, "", err
		}
		ds := &appsv1.DaemonSet{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: nicAgentNS, Name: nicAgentDS}, ds); err != nil {
			return false, "", err
		}
		want := ptr.Deref(dep.Spec.Replicas, 1) // a Deployment's default
		s := dep.Status
		depDone := s.ObservedGeneration == dep.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want
		d := ds.Status
		dsDone := d.ObservedGeneration == ds.Generation && d.UpdatedNumberScheduled == d.DesiredNumberScheduled && d.NumberAvailable == d.DesiredNumberScheduled
		return depDone && dsDone, fmt.Sprintf("manager: %d of %d updated, %d available; NIC agents: %d of %d updated, %d available",
			s.UpdatedReplicas, want, s.AvailableReplicas, d.UpdatedNumberScheduled, d.DesiredNumberScheduled, d.NumberAvailable), nil
	})
	t.Logf("rolled out in %s", time.Since(began).Round(time.Second))

	// A spec change that is no input of the VM: the new manager's verdict on it shows that
	// it has read the crawler.
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cvm), cvm); err != nil {
		t.Fatal(err)
	}
	changed := cvm.DeepCopy()
	changed.Spec.Probe = &isov1.Probe{Duration: &metav1.Duration{Duration: 25 * time.Second}}
	if err := cl.Patch(ctx, changed, client.MergeFrom(cvm)); err != nil {
		t.Fatalf("changing the crawler's probe duration: %v", err)
	}
	generation := changed.Generation
	waitFor(t, runTimeout, fmt.Sprintf("the crawler Ready for generation %d under the new build", generation), func() (bool, string, error) {
		r := condition(ctx, t, cvm, isov1.ConditionReady)
		if r == nil {
			return false, "no Ready", nil
		}
		return r.Status == metav1.ConditionTrue && r.ObservedGeneration == generation, fmt.Sprintf("generation %d: %s: %s", r.ObservedGeneration, r.Reason, r.Message), nil
	})
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil || vmi.UID != uid || vmi.Status.Phase != kubevirtv1.Running {
		t.Fatalf("VMI after the upgrade: %v, uid %s (was %s), phase %s: want the same VMI running", err, vmi.UID, uid, vmi.Status.Phase)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cvm), cvm); err != nil {
		t.Fatal(err)
	}
	if len(cvm.Status.Outages) != outages {
		t.Errorf("outages after the upgrade %+v: want the %d before, none new", cvm.Status.Outages, outages)
	}
	vm := &kubevirtv1.VirtualMachine{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), vm); err != nil {
		t.Fatal(err)
	}
	for _, c := range vm.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineRestartRequired && c.Status == corev1.ConditionTrue {
			t.Errorf("the VM asks for a restart after the upgrade: %+v", c)
		}
	}
	for _, v := range vmi.Spec.Volumes {
		if v.Name == render.VolumeAgent && v.ContainerDisk != nil && v.ContainerDisk.Image != oldProbe {
			t.Errorf("the running VMI's agent disk is %s, want %s until its next start", v.ContainerDisk.Image, oldProbe)
		}
	}
}
