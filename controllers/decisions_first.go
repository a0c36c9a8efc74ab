package controllers

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// decisionPriority is the workqueue priority of a crawler that waits for a decision:
// above every other reconcile (0, and controller-runtime's LowPriority for the initial
// list and resyncs).
const decisionPriority = 10

// decisionsFirst puts a crawler that waits for a decision ahead of every other reconcile
// in the workqueue, as kube-scheduler binds pods before kubelets start them. The
// controller's queue is controller-runtime's priority queue, which otherwise takes a
// crawler that was just decided (its status update, priority 0) before the crawlers of a
// bulk apply still waiting (their initial list, LowPriority): each decision would wait
// for the VM and Service of the one before. The CrawlerVM watch (For) enqueues every
// crawler as usual; this handler only raises those waiting, and does nothing on a queue
// without priorities.
type decisionsFirst struct{}

func (decisionsFirst) Create(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	aheadIfUndecided(q, e.Object)
}

func (decisionsFirst) Update(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	aheadIfUndecided(q, e.ObjectNew)
}

func (decisionsFirst) Delete(context.Context, event.DeleteEvent, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
}

func (decisionsFirst) Generic(context.Context, event.GenericEvent, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
}

func aheadIfUndecided(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
	cvm, ok := o.(*isov1.CrawlerVM)
	pq, prioritised := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok || !prioritised || !awaitsDecision(cvm) {
		return
	}
	pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(decisionPriority)}, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cvm)})
}

// awaitsDecision is a crawler whose reservation is to be decided: one that holds none
// (new, refused by every node, or released), or whose spec changed since it was decided.
func awaitsDecision(cvm *isov1.CrawlerVM) bool {
	return cvm.DeletionTimestamp.IsZero() && (cvm.Status.Placement == nil || cvm.Status.ObservedGeneration != cvm.Generation)
}
