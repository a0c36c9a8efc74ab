package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
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
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"k8s.io/apimachinery/pkg/types"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/nodebooks"
	"isochron.io/isochron/internal/render"
)

// SetupWithManager registers the reconciler, its metrics and what it watches: a
// crawler reconciles when its spec changes (generation), when an object it owns (its
// VM, probe Jobs, probe Service) or its VMI changes, and on the triggers below.
func (r *CrawlerVMReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &isov1.CrawlerVM{}, indexRTNetwork, rtNetworkIndex); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &isov1.CrawlerVM{}, indexNode, nodeIndex); err != nil {
		return err
	}
	if err := r.metrics.register(r.registry, newCrawlerCollector(mgr.GetCache(), mgr.Elected()), newNodeCollector(r, mgr.Elected())); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	apiServed := make(chan event.GenericEvent, 1)
	ctl, err := r.watches(mgr, apiServed).WithOptions(controller.Options{
		// Decisions are serialised by the placer; leader election keeps one replica.
		MaxConcurrentReconciles: max(1, r.concurrency),
		// Every reconcile has a deadline: nothing it waits on holds a worker for ever.
		ReconciliationTimeout: r.reconcileTimeout,
	}).
		Named("crawlervm").
		Build(r)
	if err != nil {
		return err
	}
	return r.watchNetworks(mgr, ctl, apiServed)
}

// ownEvents are a crawler's own changes it reconciles on: its spec, its reservation, a
// fenced node attested, a probe requested.
var ownEvents = predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, reservationChanged, fencedNodeAttested, probeRequested)

// watches is what the crawlers reconcile on: their own objects, the triggers, the node
// books, the placer's wakes, and Multus' API appearing (apiServed).
func (r *CrawlerVMReconciler) watches(mgr ctrl.Manager, apiServed chan event.GenericEvent) *builder.TypedBuilder[reconcile.Request] {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&isov1.CrawlerVM{}, builder.WithPredicates(ownEvents)).
		// The same events again, for the crawlers waiting for a decision: ahead of the rest.
		Watches(&isov1.CrawlerVM{}, decisionsFirst{}, builder.WithPredicates(ownEvents)).
		Owns(&kubevirtv1.VirtualMachine{}).
		// Migrations of a crawler's VMI, isochron's and anyone else's (takeOverMigrations).
		Watches(&kubevirtv1.VirtualMachineInstanceMigration{}, handler.EnqueueRequestsFromMapFunc(byMigratedVMI)).
		// A crawler's VMIs are its VM's (KubeVirt controls them); they carry its label.
		Watches(&kubevirtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(byCrawlerLabel)).
		Owns(&batchv1.Job{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&corev1.Service{})
	for _, t := range r.triggers() {
		var opts []builder.WatchesOption
		if t.on != nil {
			opts = append(opts, builder.WithPredicates(t.on))
		}
		b = b.Watches(t.object, enqueueCrawlers{r: r, wakes: t.wakes}, opts...)
	}
	// What the pods bound to each node hold (the node books, kept on the leader only), and
	// a pod that stops holding something wakes the crawlers its node can help. Workers
	// start once the books hold the initial list.
	b = b.WatchesRawSource(&booksSource{books: r.books, cfg: mgr.GetConfig(), wakes: r.helpedByNode, r: r, log: mgr.GetLogger().WithName("node-books")})
	// A crawler whose reservation overbooks its node, found when the ledger is built or
	// takes in a reservation it did not decide, is re-decided (redecideOverbooked).
	b = b.WatchesRawSource(source.Channel(r.wakes.redecided, enqueueCrawlers{r: r, wakes: itself}))
	// What a committed change of this replica released, or the cache shows released,
	// wakes the crawlers its node can help (placer.Reservation.Commit).
	b = b.WatchesRawSource(source.Channel(r.wakes.released, enqueueCrawlers{r: r, wakes: func(_, n client.Object) []crawlers {
		return r.helpedByNode(context.Background(), n.GetName())
	}}))
	// Multus' API appearing after the operator started wakes the crawlers that waited
	// for it (optionalAPI).
	return b.WatchesRawSource(source.Channel(apiServed, enqueueCrawlers{r: r, wakes: withRTNIC}))
}

// watchNetworks watches the crawlers' RT networks once the cluster serves Multus' API,
// and wakes the crawlers that waited for it through apiServed.
func (r *CrawlerVMReconciler) watchNetworks(mgr ctrl.Manager, ctl controller.Controller, apiServed chan event.GenericEvent) error {
	// A crawler's RT network appearing or changing (bridge or SR-IOV binding), watched
	// once the cluster serves Multus' API: isochron runs without Multus, and crawlers
	// with an RT-NIC say that it is missing (rtBinding).
	nad := &nadv1.NetworkAttachmentDefinition{}
	return mgr.Add(&optionalAPI{
		gvk: nadv1.SchemeGroupVersion.WithKind("NetworkAttachmentDefinition"), mapper: mgr.GetRESTMapper(), every: r.apiPollInterval,
		log: mgr.GetLogger().WithName("optional-api"),
		served: func(_ context.Context, waited bool) error {
			if err := ctl.Watch(source.Kind[client.Object](mgr.GetCache(), nad, enqueueCrawlers{r: r, wakes: usingNetwork})); err != nil {
				return fmt.Errorf("watching NetworkAttachmentDefinitions: %w", err)
			}
			if waited {
				wake(apiServed, nad)
			}
			return nil
		},
	})
}

// byCrawlerLabel is the crawler an object names in its isochron.io/crawlervm label (a
// VMI KubeVirt started from the crawler's VM), in its namespace.
func byCrawlerLabel(_ context.Context, o client.Object) []reconcile.Request {
	name, ok := o.GetLabels()[isov1.LabelCrawlerVM]
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}

// byMigratedVMI is the crawler whose VMI a migration migrates (a crawler's VMI is named
// like it), in its namespace.
func byMigratedVMI(_ context.Context, o client.Object) []reconcile.Request {
	m, ok := o.(*kubevirtv1.VirtualMachineInstanceMigration)
	if !ok || m.Spec.VMIName == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.VMIName}}}
}

// enqueueCrawlers is the handler of every trigger: it queues the crawlers the trigger
// wakes, as the cache lists them.
type enqueueCrawlers struct {
	r     *CrawlerVMReconciler
	wakes func(old, obj client.Object) []crawlers
}

func (h enqueueCrawlers) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
	h.enqueue(ctx, nil, e.Object, q)
}

func (h enqueueCrawlers) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
	h.enqueue(ctx, e.ObjectOld, e.ObjectNew, q)
}

func (h enqueueCrawlers) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
	h.enqueue(ctx, nil, e.Object, q)
}

func (h enqueueCrawlers) Generic(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
	h.enqueue(ctx, nil, e.Object, q)
}

func (h enqueueCrawlers) enqueue(ctx context.Context, old, obj client.Object, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
	if err := h.r.enqueue(ctx, h.wakes(old, obj), q); err != nil {
		log.FromContext(ctx).Error(err, "Listing CrawlerVMs to reconcile", "trigger", klog.KObj(obj))
	}
}

// enqueue queues the crawlers sels select, as the cache lists them.
func (r *CrawlerVMReconciler) enqueue(ctx context.Context, sels []crawlers, q workqueue.TypedRateLimitingInterface[ctrl.Request]) error {
	for _, sel := range sels {
		if sel.key != nil {
			q.Add(ctrl.Request{NamespacedName: *sel.key})
			continue
		}
		list := &isov1.CrawlerVMList{}
		// Read-only: the cache's own objects, not copies.
		if err := r.List(ctx, list, append(sel.opts, client.UnsafeDisableDeepCopy)...); err != nil {
			return err
		}
		for i := range list.Items {
			if c := &list.Items[i]; sel.keep == nil || sel.keep(c) {
				q.Add(ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
			}
		}
	}
	return nil
}

// booksSource runs the node books (nodebooks.Books) for the controller, on the leader:
// their reflector from the API server of cfg, and the wakes of the crawlers a node can
// help when a pod there stops holding something (finished, deleted). The controller's
// workers start once the books hold the initial list (WaitForSync): no decision counts a
// node's pods short.
type booksSource struct {
	books *nodebooks.Books
	cfg   *rest.Config
	wakes func(ctx context.Context, node string) []crawlers
	r     *CrawlerVMReconciler
	log   logr.Logger
}

func (s *booksSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[ctrl.Request]) error {
	began := time.Now()
	go func() {
		if err := s.books.Run(ctx, s.cfg); err != nil {
			s.log.Error(err, "Keeping the node books")
		}
	}()
	go func() {
		if s.books.WaitForSync(ctx) == nil {
			s.log.Info("Node books synced", "pods", s.books.Len(), "took", time.Since(began).Round(time.Millisecond).String())
		}
	}()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.books.Released():
			}
			for _, node := range s.books.TakeReleased() {
				if err := s.r.enqueue(ctx, s.wakes(ctx, node), q); err != nil {
					s.log.Error(err, "Listing CrawlerVMs to reconcile", "released", klog.KRef("", node))
				}
			}
		}
	}()
	return nil
}

func (s *booksSource) WaitForSync(ctx context.Context) error { return s.books.WaitForSync(ctx) }

const indexRTNetwork = "spec.rtNIC.networkKey"

// indexNode indexes crawlers by the node they are placed on, unplacedKey for none (a
// colon is not in any node name).
const (
	indexNode   = "status.placement.node"
	unplacedKey = ":unplaced"
)

func nodeIndex(o client.Object) []string {
	if _, ok := o.(*isov1.CrawlerVM); !ok {
		return nil
	}
	if n := placedOn(o); n != "" {
		return []string{n}
	}
	return []string{unplacedKey}
}

func rtNetworkIndex(o client.Object) []string {
	c, ok := o.(*isov1.CrawlerVM)
	if !ok || c.Spec.RTNIC == nil {
		return nil
	}
	return []string{render.NetworkKey(c).String()}
}

// wakes carry to the crawlers they concern what happens outside a reconcile: a node where
// a committed change released something, and a crawler whose reservation overbooks its
// node. Each is sent from a goroutine of its own: the placer never waits on the queue.
type wakes struct {
	released, redecided chan event.GenericEvent
}

func newWakes() wakes {
	return wakes{released: make(chan event.GenericEvent), redecided: make(chan event.GenericEvent)}
}

// releasedNode wakes the crawlers node can help.
func (w wakes) releasedNode(node string) {
	go func() {
		w.released <- event.GenericEvent{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}}
	}()
}

// redecide wakes the crawler of key.
func (w wakes) redecide(key types.NamespacedName) {
	go func() {
		w.redecided <- event.GenericEvent{Object: &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
	}()
}
