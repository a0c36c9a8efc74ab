package controllers

import (
	"context"
	"fmt"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/sizing"
)

// FieldOwner is the one field manager isochron applies with.
const FieldOwner = "isochron"

// CrawlerVMReconciler sizes, places and runs CrawlerVMs.
type CrawlerVMReconciler struct {
	client.Client
	// APIReader reads the crawlers already placed straight from the API server, so that a
	// decision never misses a reservation the cache has not seen yet.
	APIReader client.Reader
	Recorder  record.EventRecorder
	Sizing    sizing.Params
}

// +kubebuilder:rbac:groups=isochron.io,resources=crawlervms,verbs=get;list;watch
// +kubebuilder:rbac:groups=isochron.io,resources=crawlervms/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=network-attachment-definitions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one CrawlerVM's VMI and status in line with its spec.
func (r *CrawlerVMReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	cvm := &isov1.CrawlerVM{}
	if err := r.Get(ctx, req.NamespacedName, cvm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cvm.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owner references let the garbage collector remove the VMI
	}
	before := cvm.DeepCopy()
	defer func() {
		if equality.Semantic.DeepEqual(before.Status, cvm.Status) {
			return
		}
		if err := r.Status().Patch(ctx, cvm, client.MergeFrom(before)); err != nil && reterr == nil {
			reterr = fmt.Errorf("patching status of %s: %w", klog.KObj(cvm), err)
		}
	}()
	for _, phase := range []func(context.Context, *isov1.CrawlerVM) (bool, error){r.place, r.runVMI} {
		if done, err := phase(ctx, cvm); err != nil || done {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler and what it watches.
func (r *CrawlerVMReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &isov1.CrawlerVM{}, indexRTNetwork, rtNetworkIndex); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&isov1.CrawlerVM{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&kubevirtv1.VirtualMachineInstance{}).
		// Capacity freed by a deleted crawler or a changed node may let a waiting one fit.
		Watches(&isov1.CrawlerVM{}, handler.EnqueueRequestsFromMapFunc(r.unplaced),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc: func(event.CreateEvent) bool { return false },
				UpdateFunc: func(event.UpdateEvent) bool { return false },
			})).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.unplaced),
			builder.WithPredicates(nodeCapacityChanged)).
		Watches(&nadv1.NetworkAttachmentDefinition{}, handler.EnqueueRequestsFromMapFunc(r.usingNetwork)).
		WithOptions(controller.Options{
			// Placement decisions are serialised: each one sees every reservation made
			// before it (read through APIReader). Leader election keeps it one replica.
			MaxConcurrentReconciles: 1,
		}).
		Named("crawlervm").
		Complete(r)
}

// unplaced lists the crawlers waiting for a node.
func (r *CrawlerVMReconciler) unplaced(ctx context.Context, _ client.Object) []ctrl.Request {
	list := &isov1.CrawlerVMList{}
	if err := r.List(ctx, list); err != nil {
		log.FromContext(ctx).Error(err, "Listing CrawlerVMs to retry placement")
		return nil
	}
	var reqs []ctrl.Request
	for i := range list.Items {
		if list.Items[i].Status.Placement == nil {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// usingNetwork lists the crawlers whose RT-NIC uses a NetworkAttachmentDefinition.
func (r *CrawlerVMReconciler) usingNetwork(ctx context.Context, nad client.Object) []ctrl.Request {
	list := &isov1.CrawlerVMList{}
	key := nad.GetNamespace() + "/" + nad.GetName()
	if err := r.List(ctx, list, client.MatchingFields{indexRTNetwork: key}); err != nil {
		log.FromContext(ctx).Error(err, "Listing CrawlerVMs that use a network", "network", key)
		return nil
	}
	reqs := make([]ctrl.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}})
	}
	return reqs
}

const indexRTNetwork = "spec.rtNIC.networkKey"

func rtNetworkIndex(o client.Object) []string {
	c, ok := o.(*isov1.CrawlerVM)
	if !ok || c.Spec.RTNIC == nil {
		return nil
	}
	return []string{render.NetworkKey(c).String()}
}

// nodeCapacityChanged ignores the heartbeats that make up most Node updates.
var nodeCapacityChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
		if o == nil || n == nil {
			return true
		}
		return !equality.Semantic.DeepEqual(inventory.Node(o), inventory.Node(n))
	},
}
