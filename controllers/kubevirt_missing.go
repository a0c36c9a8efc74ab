package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// ErrKubeVirtServed ends a manager that started without KubeVirt's API (WaitForKubeVirt)
// once the cluster serves it: its process starts again and watches it.
var ErrKubeVirtServed = errors.New("KubeVirt's API is served now")

// KubeVirtServed says whether the cluster cfg names serves KubeVirt's API
// (kubevirt.io/v1), which the operator cannot run without: it caches and watches VMs, VMIs
// and migrations from its start.
func KubeVirtServed(cfg *rest.Config) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, err
	}
	gv := kubevirtv1.SchemeGroupVersion.String()
	_, err = dc.ServerResourcesForGroupVersion(gv)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("reading the API server's discovery for %s: %w", gv, err)
	}
}

// WaitForKubeVirt sets up a manager that started where the cluster does not serve
// KubeVirt's API: instead of failing at every start (a crash loop), it tells every
// CrawlerVM so (Ready=False, KubeVirtNotInstalled), looks for the API every interval, and
// ends its manager with ErrKubeVirtServed once it is served.
func WaitForKubeVirt(mgr ctrl.Manager, every time.Duration) error {
	w := &kubeVirtMissing{Client: mgr.GetClient()}
	if err := ctrl.NewControllerManagedBy(mgr).For(&isov1.CrawlerVM{}).Named("crawlervm-waiting-for-kubevirt").Complete(w); err != nil {
		return err
	}
	gvk := kubevirtv1.VirtualMachineGroupVersionKind
	return mgr.Add(&optionalAPI{gvk: gvk, mapper: mgr.GetRESTMapper(), every: every, log: mgr.GetLogger().WithName("kubevirt-api"),
		served: func(context.Context, bool) error { return ErrKubeVirtServed }})
}

// kubeVirtMissing reports, on every CrawlerVM, that KubeVirt's API is not served.
type kubeVirtMissing struct{ client.Client }

// KubeVirtNotInstalledMessage is what a crawler's Ready condition says while the cluster
// does not serve KubeVirt's API.
const KubeVirtNotInstalledMessage = "the cluster does not serve KubeVirt's API (kubevirt.io/v1 VirtualMachine): install KubeVirt; isochron places and starts the crawler once it is served (its manager restarts itself then)"

func (w *kubeVirtMissing) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cvm := &isov1.CrawlerVM{}
	if err := w.Get(ctx, req.NamespacedName, cvm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionReady); c != nil && c.Reason == isov1.ReasonKubeVirtNotInstalled {
		return ctrl.Result{}, nil
	}
	before := cvm.DeepCopy()
	apimeta.SetStatusCondition(&cvm.Status.Conditions, metav1.Condition{Type: isov1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: isov1.ReasonKubeVirtNotInstalled, Message: KubeVirtNotInstalledMessage, ObservedGeneration: cvm.Generation})
	if err := w.Status().Patch(ctx, cvm, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, fmt.Errorf("patching status of %s: %w", req.NamespacedName, err)
	}
	return ctrl.Result{}, nil
}
