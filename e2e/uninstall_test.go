//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// kept selects what `make undeploy` leaves: isochron's API (the CRDs and the policy that
// guards them) and the settings (its namespace with the administrator's ConfigMaps, the
// probe master key and the Lease; the admission policies).
var kept labels.Selector

func init() {
	var err error
	if kept, err = labels.Parse("app.kubernetes.io/component in (api,settings)"); err != nil {
		panic(err)
	}
}

// undeployKeepingCrawlers does what `make undeploy` does: deletes every object of
// config/default but those kept, and waits until the operator's pods are gone.
func undeployKeepingCrawlers(ctx context.Context, t *testing.T) {
	t.Helper()
	objs, err := operatorObjects()
	if err != nil {
		t.Fatal(err)
	}
	for i := len(objs) - 1; i >= 0; i-- {
		if kept.Matches(labels.Set(objs[i].GetLabels())) {
			continue
		}
		if err := cl.Delete(ctx, objs[i]); client.IgnoreNotFound(err) != nil {
			t.Fatalf("deleting %s %s: %v", objs[i].GetKind(), objs[i].GetName(), err)
		}
	}
	waitOperatorGone(ctx, t)
}

// Removing isochron leaves every crawler running: its CrawlerVM, VM and VMI stay (KubeVirt
// keeps the VMI running), the CRDs cannot be deleted by accident, and installing isochron
// again adopts the running VMI without a restart: same UID, no RestartRequired, Ready.
func TestUninstallKeepsCrawlersAndReinstallAdoptsThem(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	cvm, vmi := runningShared(ctx, t, ns, "survivor")
	uid := vmi.UID

	undeployKeepingCrawlers(ctx, t)
	t.Cleanup(func() {
		if err := deploy(context.Background()); err != nil {
			t.Errorf("installing isochron again for the tests after: %v", err)
		}
	})
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cvm), &isov1.CrawlerVM{}); err != nil {
		t.Fatalf("CrawlerVM %s after the uninstall: %v", cvm.Name, err)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil || vmi.UID != uid || vmi.Status.Phase != kubevirtv1.Running {
		t.Fatalf("VMI after the uninstall: %v, uid %s (was %s), phase %s; want it running on", err, vmi.UID, uid, vmi.Status.Phase)
	}
	secret := &corev1.Secret{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: "isochron-probe-master-key"}, secret); err != nil {
		t.Errorf("the probe master key after the uninstall: %v; want it kept (running guests' keys derive from it)", err)
	}
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	crd.SetName("crawlervms.isochron.io")
	if err := cl.Delete(ctx, crd, client.DryRunAll); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "make uninstall") {
		t.Errorf("deleting the CrawlerVM CRD after the uninstall: %v; want refused", err)
	}

	// A change of the spec meanwhile that is no input of the VM (how long a probe lasts):
	// the new install's verdict on it shows that it has read the crawler again.
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cvm), cvm); err != nil {
		t.Fatal(err)
	}
	changed := cvm.DeepCopy()
	changed.Spec.Probe = &isov1.Probe{Duration: &metav1.Duration{Duration: 20 * time.Second}}
	if err := cl.Patch(ctx, changed, client.MergeFrom(cvm)); err != nil {
		t.Fatalf("changing the crawler's probe duration while isochron is uninstalled: %v", err)
	}
	generation := changed.Generation

	if err := deploy(ctx); err != nil {
		t.Fatalf("installing isochron again: %v", err)
	}
	waitFor(t, runTimeout, fmt.Sprintf("the crawler Ready for generation %d under the new install", generation), func() (bool, string, error) {
		r := condition(ctx, t, cvm, isov1.ConditionReady)
		if r == nil {
			return false, "no Ready", nil
		}
		return r.Status == metav1.ConditionTrue && r.ObservedGeneration == generation, fmt.Sprintf("generation %d: %s: %s", r.ObservedGeneration, r.Reason, r.Message), nil
	})
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil || vmi.UID != uid {
		t.Fatalf("VMI after the reinstall: %v, uid %s, was %s: want the same VMI, not restarted", err, vmi.UID, uid)
	}
	vm := &kubevirtv1.VirtualMachine{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vmi), vm); err != nil {
		t.Fatal(err)
	}
	for _, c := range vm.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineRestartRequired && c.Status == corev1.ConditionTrue {
			t.Errorf("the VM asks for a restart after the reinstall: %+v", c)
		}
	}
}
