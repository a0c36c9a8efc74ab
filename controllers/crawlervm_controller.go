package controllers

import (
	"context"
	"fmt"
	"sync"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
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
	"isochron.io/isochron/internal/slo"
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
	// MaxConcurrentReconciles is how many crawlers reconcile at once; placement
	// decisions among them are serialised (see decide).
	MaxConcurrentReconciles int
	// Probes are the probe Jobs' image and timing.
	Probes slo.Options

	// decide serialises placement decisions: each one reads every reservation made
	// before it (through APIReader) and persists its own before the next one starts.
	decide sync.Mutex
}

// NewCrawlerVMReconciler is the reconciler wired to mgr's clients, reconciling up to
// concurrency crawlers at once.
func NewCrawlerVMReconciler(mgr ctrl.Manager, concurrency int) *CrawlerVMReconciler {
	return &CrawlerVMReconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Recorder:                mgr.GetEventRecorderFor("isochron"),
		MaxConcurrentReconciles: concurrency,
		Probes:                  slo.DefaultOptions(slo.DefaultImage),
	}
}

// +kubebuilder:rbac:groups=isochron.io,resources=crawlervms,verbs=get;list;watch
// +kubebuilder:rbac:groups=isochron.io,resources=crawlervms/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=network-attachment-definitions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=isochron.io,resources=contentionprofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one CrawlerVM's VMI and status in line with its spec.
func (r *CrawlerVMReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	cvm := &isov1.CrawlerVM{}
	if err := r.Get(ctx, req.NamespacedName, cvm); err != nil {
		if apierrors.IsNotFound(err) {
			forget(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cvm.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owner references let the garbage collector remove the VMI
	}
	st := &statusWriter{Client: r.Client, before: cvm.DeepCopy()}
	defer func() {
		if err := st.persist(ctx, cvm); err != nil {
			if reterr == nil {
				reterr = err
			}
			return
		}
		observe(cvm)
	}()
	if done, err := r.place(ctx, cvm, st); err != nil || done {
		return ctrl.Result{}, err
	}
	running, err := r.runVMI(ctx, cvm)
	if err != nil {
		return ctrl.Result{}, err
	}
	after, err := r.runProbes(ctx, cvm, running)
	return ctrl.Result{RequeueAfter: after}, err
}

// statusWriter patches a CrawlerVM's status when, and only when, it changed, with an
// optimistic lock: a decision taken on a stale copy fails and is taken again.
type statusWriter struct {
	client.Client
	before *isov1.CrawlerVM
}

func (w *statusWriter) persist(ctx context.Context, cvm *isov1.CrawlerVM) error {
	setProgress(cvm)
	if equality.Semantic.DeepEqual(w.before.Status, cvm.Status) {
		return nil
	}
	if err := w.Status().Patch(ctx, cvm, client.MergeFromWithOptions(w.before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patching status of %s: %w", klog.KObj(cvm), err)
	}
	w.before = cvm.DeepCopy()
	return nil
}

// SetupWithManager registers the reconciler and what it watches.
func (r *CrawlerVMReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &isov1.CrawlerVM{}, indexRTNetwork, rtNetworkIndex); err != nil {
		return err
	}
	if err := registerNodeCollector(r, mgr.Elected()); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&isov1.CrawlerVM{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&kubevirtv1.VirtualMachineInstance{}).
		Owns(&batchv1.Job{}).
		Owns(&corev1.Service{}).
		// Capacity freed by a deleted crawler or a changed node may let a waiting one fit.
		Watches(&isov1.CrawlerVM{}, handler.EnqueueRequestsFromMapFunc(r.unplaced),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc: func(event.CreateEvent) bool { return false },
				UpdateFunc: func(event.UpdateEvent) bool { return false },
			})).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.unplaced),
			builder.WithPredicates(nodeCapacityChanged)).
		// A Guaranteed pod leaving frees the exclusive CPUs it held.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.unplaced),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc:  func(event.CreateEvent) bool { return false },
				UpdateFunc:  func(event.UpdateEvent) bool { return false },
				GenericFunc: func(event.GenericEvent) bool { return false },
			})).
		// A crawler arriving on or leaving a node changes its neighbours' predictions.
		Watches(&isov1.CrawlerVM{}, handler.Funcs{UpdateFunc: r.neighboursOnMove}).
		// A changed profile changes every prediction on the nodes it selects.
		Watches(&isov1.ContentionProfile{}, handler.EnqueueRequestsFromMapFunc(r.all)).
		Watches(&nadv1.NetworkAttachmentDefinition{}, handler.EnqueueRequestsFromMapFunc(r.usingNetwork)).
		WithOptions(controller.Options{
			// Decisions are serialised by r.decide; leader election keeps one replica.
			MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles),
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

// all lists every crawler.
func (r *CrawlerVMReconciler) all(ctx context.Context, _ client.Object) []ctrl.Request {
	list := &isov1.CrawlerVMList{}
	if err := r.List(ctx, list); err != nil {
		log.FromContext(ctx).Error(err, "Listing CrawlerVMs")
		return nil
	}
	reqs := make([]ctrl.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// neighboursOnMove enqueues the crawlers on the nodes a crawler arrived on or left.
func (r *CrawlerVMReconciler) neighboursOnMove(ctx context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
	nodeOf := func(o client.Object) string {
		if c, ok := o.(*isov1.CrawlerVM); ok && c.Status.Placement != nil {
			return c.Status.Placement.Node
		}
		return ""
	}
	before, after := nodeOf(e.ObjectOld), nodeOf(e.ObjectNew)
	if before == after {
		return
	}
	list := &isov1.CrawlerVMList{}
	if err := r.List(ctx, list); err != nil {
		log.FromContext(ctx).Error(err, "Listing CrawlerVMs to refresh predictions")
		return
	}
	for i := range list.Items {
		if n := nodeOf(&list.Items[i]); n != "" && (n == before || n == after) && list.Items[i].UID != e.ObjectNew.GetUID() {
			q.Add(ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
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
		return !equality.Semantic.DeepEqual(inventory.Node(o, nil, 0), inventory.Node(n, nil, 0))
	},
}
