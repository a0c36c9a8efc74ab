package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/sizing"
)

// What makes crawlers reconcile besides their own objects: the triggers, their
// predicates, and the indexes that keep a trigger's cost to what it wakes.

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
var launcherScheduling = updates(func(old, obj client.Object) bool {
	o, n := old.(*corev1.Pod), obj.(*corev1.Pod)
	return o != nil && n != nil && inventory.CrawlerLauncher(n) && scheduled(o) != scheduled(n)
})

// launcherFailed selects a crawler's virt-launcher pod turning Failed.
var launcherFailed = updates(func(old, obj client.Object) bool {
	o, n := old.(*corev1.Pod), obj.(*corev1.Pod)
	return o != nil && n != nil && inventory.CrawlerLauncher(n) && o.Status.Phase != corev1.PodFailed && n.Status.Phase == corev1.PodFailed
})

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
var releasedNode = updates(func(old, obj client.Object) bool {
	o, n := reservationOf(old), reservationOf(obj)
	released := func(node string) bool { return node != "" && node != n.node && node != n.leaving }
	return released(o.node) || released(o.leaving)
})

// movedNode selects updates of a CrawlerVM that changed the node it is placed on, or the
// one it holds while it moves.
var movedNode = updates(func(old, obj client.Object) bool {
	return placedOn(old) != placedOn(obj) || reservationOf(old).leaving != reservationOf(obj).leaving
})

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
var reservationChanged = updates(func(old, obj client.Object) bool { return reservationOf(old) != reservationOf(obj) })

// fencedNodeAttested selects a crawler's updates that attest a deleted node is off
// (isov1.AnnotationFencedNode): a crawler presumed down there starts elsewhere then.
var fencedNodeAttested = updates(func(old, obj client.Object) bool {
	return old.GetAnnotations()[isov1.AnnotationFencedNode] != obj.GetAnnotations()[isov1.AnnotationFencedNode]
})

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

// probeRequested selects a crawler's updates that ask for a probe now
// (isov1.AnnotationProbeRequested, kubectl isochron probe): an annotation changes no
// generation, so without it the request would wait for the next reconcile.
var probeRequested = updates(func(old, obj client.Object) bool {
	return old.GetAnnotations()[isov1.AnnotationProbeRequested] != obj.GetAnnotations()[isov1.AnnotationProbeRequested]
})

// updates selects the updates f accepts (old is the object before), and no other event.
func updates(f func(old, obj client.Object) bool) predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(e event.UpdateEvent) bool { return f(e.ObjectOld, e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
