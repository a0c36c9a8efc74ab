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
	"k8s.io/apimachinery/pkg/api/equality"
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

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/nodebooks"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/sizing"
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
	if err := r.placer.nodes.setup(context.Background(), mgr.GetCache(), r.placer.books.Gen); err != nil {
		return err
	}
	r.metrics = newMetrics(r.clock.Now())
	r.placer.batchSize, r.placer.decisionTime = r.metrics.placementBatch.Observe, r.metrics.placementDuration.Observe
	if err := r.metrics.register(r.registry, newCrawlerCollector(mgr.GetCache(), mgr.Elected()), newNodeCollector(r, mgr.Elected())); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&isov1.CrawlerVM{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, reservationChanged, fencedNodeAttested, probeRequested))).
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
	b = b.WatchesRawSource(&booksSource{books: r.placer.books, cfg: mgr.GetConfig(), wakes: r.helpedByNode, r: r, log: mgr.GetLogger().WithName("node-books")})
	// A crawler whose reservation overbooks its node, found when the ledger is built or
	// takes in a reservation it did not decide, is re-decided (undoOverbooking).
	redecide := make(chan event.GenericEvent)
	r.placer.overbooked.wake = func(key client.ObjectKey) {
		go func() {
			redecide <- event.GenericEvent{Object: &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
		}()
	}
	b = b.WatchesRawSource(source.Channel(redecide, enqueueCrawlers{r: r, wakes: itself}))
	// What a decision of this replica released, once persisted, wakes the crawlers its
	// node can help (placer.persist).
	released := make(chan event.GenericEvent)
	r.placer.released = func(node string) {
		go func() {
			released <- event.GenericEvent{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}}
		}()
	}
	b = b.WatchesRawSource(source.Channel(released, enqueueCrawlers{r: r, wakes: func(_, n client.Object) []crawlers {
		return r.helpedByNode(context.Background(), n.GetName())
	}}))
	// Multus' API appearing after the operator started wakes the crawlers that waited
	// for it (optionalAPI).
	apiServed := make(chan event.GenericEvent, 1)
	b = b.WatchesRawSource(source.Channel(apiServed, enqueueCrawlers{r: r, wakes: withRTNIC}))
	ctl, err := b.WithOptions(controller.Options{
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

// trigger is a change elsewhere in the cluster that makes crawlers reconcile again, and
// which crawlers it wakes.
type trigger struct {
	// object is the kind of object watched.
	object client.Object
	// on selects the events that trigger; nil for all of them.
	on predicate.Predicate
	// wakes selects the crawlers to reconcile for an event on obj; old is obj before
	// an update, nil for other events.
	wakes func(old, obj client.Object) []crawlers
}

// crawlers selects CrawlerVMs: those the cache lists with opts, and of them those keep
// accepts (all when keep is nil).
type crawlers struct {
	opts []client.ListOption
	keep func(*isov1.CrawlerVM) bool
	// key, when set, is the one crawler selected: nothing is listed.
	key *client.ObjectKey
}

// triggers is every change outside a crawler's own objects that it reconciles on.
func (r *CrawlerVMReconciler) triggers() []trigger {
	return []trigger{
		// Capacity freed by a deleted crawler may let a waiting one fit (kube-scheduler's
		// queueing hints: only events that can free capacity wake the unplaced, and only
		// those the node can help).
		{object: &isov1.CrawlerVM{}, on: releasedReservation, wakes: r.helpedByRelease},
		// A crawler arriving on or leaving a node changes its neighbours' predictions.
		{object: &isov1.CrawlerVM{}, on: movedNode, wakes: neighboursOfMove},
		// A move that ended (or failed) releases a node: a waiting crawler may fit there.
		{object: &isov1.CrawlerVM{}, on: releasedNode, wakes: r.helpedByRelease},
		// A node added, or whose capacity, labels, taints or cordon changed may fit a
		// waiting crawler that may run there; heartbeats, most Node updates, are ignored.
		{object: &corev1.Node{}, on: nodeCapacityChanged, wakes: helpedByNodeChange},
		// A node that stops or starts being ready, is fenced (its taints) or is deleted:
		// its crawlers may be lost, or moved elsewhere (move.Node).
		{object: &corev1.Node{}, on: nodeHealthChanged, wakes: onNodeNamed},
		// A changed profile, or class calibration, changes every prediction on the nodes
		// it selects.
		{object: &isov1.ContentionProfile{}, on: profileChanged, wakes: all},
		// A node's calibration changes every prediction on it.
		{object: &isov1.NodeCalibration{}, wakes: onNodeNamed},
		// kube-scheduler judging a crawler's virt-launcher pod (Unschedulable: something
		// took what its reservation counted on).
		{object: &corev1.Pod{}, on: launcherScheduling, wakes: launcherCrawler},
		// A crawler's virt-launcher pod failing (its node's kubelet may have refused it).
		{object: &corev1.Pod{}, on: launcherFailed, wakes: launcherCrawler},
	}
}

// helpedBy are the crawlers waiting for a node that node n can help: those placed
// nowhere whose constraints admit it (placement.Admits: selector, tolerations, cordon,
// readiness, KubeVirt's labels). What a node frees helps no other crawler: a pod that
// finishes on a node no crawler may use wakes nobody, and one on an RT node wakes only
// the crawlers that may run there. nil for no node.
func helpedBy(n *corev1.Node) []crawlers {
	if n == nil || n.Labels[kubevirtv1.NodeSchedulable] != "true" {
		return nil // KubeVirt runs no VM there: no crawler can use it
	}
	pn := inventory.Node(n, nil, placement.Held{}, nil)
	sel := onNode("")
	sel.keep = func(c *isov1.CrawlerVM) bool {
		return placement.Admits(&pn, inventory.Request(c, false, sizing.Resources{}))
	}
	return []crawlers{sel}
}

// helpedByNodeChange are the crawlers a node added or changed can help.
func helpedByNodeChange(_, obj client.Object) []crawlers {
	n, _ := obj.(*corev1.Node)
	return helpedBy(n)
}

// helpedByRelease are the crawlers that the nodes a crawler released can help: the one it
// held when it was deleted, or the one a move's end or a re-placement released.
func (r *CrawlerVMReconciler) helpedByRelease(old, obj client.Object) []crawlers {
	before, after := reservationOf(obj), reservation{}
	if old != nil {
		before, after = reservationOf(old), reservationOf(obj)
	}
	var out []crawlers
	for _, name := range []string{before.node, before.leaving} {
		if name == "" || name == after.node || name == after.leaving {
			continue
		}
		out = append(out, r.helpedByNode(context.Background(), name)...)
	}
	return out
}

// helpedByNode is helpedBy for the node of that name, as the cache holds it.
func (r *CrawlerVMReconciler) helpedByNode(ctx context.Context, name string) []crawlers {
	n := &corev1.Node{}
	if err := r.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		return nil // gone (or unreadable): it helps nobody
	}
	return helpedBy(n)
}

// onNode are the crawlers placed on node ("": those placed nowhere), from the cache's
// index: a trigger costs what it wakes, not the number of crawlers.
func onNode(node string) crawlers {
	if node == "" {
		node = unplacedKey
	}
	return crawlers{opts: []client.ListOption{client.MatchingFields{indexNode: node}}}
}

// onNodeNamed are the crawlers placed on the node of the object's name (a
// NodeCalibration's).
func onNodeNamed(_, obj client.Object) []crawlers { return []crawlers{onNode(obj.GetName())} }

// itself is the crawler obj names.
func itself(_, obj client.Object) []crawlers {
	key := client.ObjectKeyFromObject(obj)
	return []crawlers{{key: &key}}
}

// all is every crawler.
func all(_, _ client.Object) []crawlers { return []crawlers{{}} }

// neighboursOfMove are the crawlers, other than the one that moved, on the nodes it left
// and arrived on, and on the one it holds while it moves.
func neighboursOfMove(old, obj client.Object) []crawlers {
	var out []crawlers
	for _, n := range []string{placedOn(old), placedOn(obj), reservationOf(old).leaving, reservationOf(obj).leaving} {
		if n != "" {
			sel := onNode(n)
			sel.keep = func(c *isov1.CrawlerVM) bool { return c.UID != obj.GetUID() }
			out = append(out, sel)
		}
	}
	return out
}

// usingNetwork are the crawlers whose RT-NIC uses the NetworkAttachmentDefinition nad.
func usingNetwork(_, nad client.Object) []crawlers {
	key := nad.GetNamespace() + "/" + nad.GetName()
	return []crawlers{{opts: []client.ListOption{client.MatchingFields{indexRTNetwork: key}}}}
}

// placedOn is the node a CrawlerVM is placed on, "" for none (or another kind of object).
func placedOn(o client.Object) string {
	if c, ok := o.(*isov1.CrawlerVM); ok && c.Status.Placement != nil {
		return c.Status.Placement.Node
	}
	return ""
}

// releasedReservation selects deleted crawlers that held a reservation.
var releasedReservation = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	DeleteFunc:  func(e event.DeleteEvent) bool { return placedOn(e.Object) != "" },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// launcherScheduling selects updates of a crawler's virt-launcher pod that change what
// kube-scheduler says of it (its PodScheduled condition).
var launcherScheduling = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Pod), e.ObjectNew.(*corev1.Pod)
		return o != nil && n != nil && inventory.CrawlerLauncher(n) && scheduled(o) != scheduled(n)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// launcherFailed selects a crawler's virt-launcher pod turning Failed.
var launcherFailed = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Pod), e.ObjectNew.(*corev1.Pod)
		return o != nil && n != nil && inventory.CrawlerLauncher(n) && o.Status.Phase != corev1.PodFailed && n.Status.Phase == corev1.PodFailed
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// scheduled is a pod's PodScheduled condition, zero for none.
func scheduled(p *corev1.Pod) corev1.PodCondition {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return corev1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
		}
	}
	return corev1.PodCondition{}
}

// launcherCrawler is the crawler a virt-launcher pod runs (its label).
func launcherCrawler(_, pod client.Object) []crawlers {
	return []crawlers{{key: &client.ObjectKey{Namespace: pod.GetNamespace(), Name: pod.GetLabels()[isov1.LabelCrawlerVM]}}}
}

// releasedNode selects updates of a CrawlerVM after which it holds a node it held no
// longer: the end of a move, or a re-placement.
var releasedNode = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := reservationOf(e.ObjectOld), reservationOf(e.ObjectNew)
		released := func(node string) bool { return node != "" && node != n.node && node != n.leaving }
		return released(o.node) || released(o.leaving)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// movedNode selects updates of a CrawlerVM that changed the node it is placed on, or the
// one it holds while it moves.
var movedNode = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return placedOn(e.ObjectOld) != placedOn(e.ObjectNew) || reservationOf(e.ObjectOld).leaving != reservationOf(e.ObjectNew).leaving
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
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

// profileChanged selects what changes a profile's predictions: its spec (generation) and
// its class correction; not the sample counts of its status.
var profileChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return !e.IsInInitialList }, // as nodeCapacityChanged
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*isov1.ContentionProfile), e.ObjectNew.(*isov1.ContentionProfile)
		if o == nil || n == nil {
			return true
		}
		return o.Generation != n.Generation || o.Status.Correction != n.Status.Correction ||
			o.Status.ObservedGeneration != n.Status.ObservedGeneration
	},
}

// reservationChanged selects a crawler's status updates that change its reservation: a
// decision reaching the cache brings the crawler back to run its VMI there.
var reservationChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	UpdateFunc:  func(e event.UpdateEvent) bool { return reservationOf(e.ObjectOld) != reservationOf(e.ObjectNew) },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// fencedNodeAttested selects a crawler's updates that attest a deleted node is off
// (isov1.AnnotationFencedNode): a crawler presumed down there starts elsewhere then.
var fencedNodeAttested = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetAnnotations()[isov1.AnnotationFencedNode] != e.ObjectNew.GetAnnotations()[isov1.AnnotationFencedNode]
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// reservation is what a crawler holds: its size on its node, and the node it leaves while
// it moves.
type reservation struct {
	node, leaving string
	sizing        sizing.Result
}

// reservationOf is the reservation a crawler holds, zero for none.
func reservationOf(o client.Object) reservation {
	c, ok := o.(*isov1.CrawlerVM)
	if !ok {
		return reservation{}
	}
	res, _ := inventory.Resident(c)
	l, _ := inventory.Leaving(c)
	return reservation{node: res.Node, leaving: l.Node, sizing: res.Sizing}
}

// nodeHealthChanged selects a Node's deletion and the updates that change its readiness
// or its taints (the out-of-service taint fences it).
var nodeHealthChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
		return o == nil || n == nil || inventory.NodeReady(o) != inventory.NodeReady(n) || !equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// nodeCapacityChanged ignores the heartbeats that make up most Node updates.
var nodeCapacityChanged = predicate.Funcs{
	// The nodes of the informer's initial list wake nobody: every crawler is reconciled
	// at start anyway (its own initial event); listing the waiting ones for each of a
	// thousand nodes would not add one.
	CreateFunc: func(e event.CreateEvent) bool { return !e.IsInInitialList },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
		if o == nil || n == nil {
			return true
		}
		return !equality.Semantic.DeepEqual(inventory.Node(o, nil, placement.Held{}, nil), inventory.Node(n, nil, placement.Held{}, nil))
	},
}
