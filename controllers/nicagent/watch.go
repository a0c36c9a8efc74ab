package nicagent

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// The agent's controllers each reconcile the whole node: every event they watch is one
// request, the node's.

// toNode maps any event to the request of node.
func toNode(node string) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []ctrl.Request {
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Name: node}}}
	})
}

// crawlersWhere passes the events of CrawlerVMs for which on holds, before or after an
// update (a crawler leaving the node counts).
func crawlersWhere(on func(*isov1.CrawlerVM) bool) predicate.Funcs {
	is := func(o client.Object) bool {
		c, ok := o.(*isov1.CrawlerVM)
		return ok && on(c)
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return is(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return is(e.ObjectOld) || is(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return is(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return is(e.Object) },
	}
}
