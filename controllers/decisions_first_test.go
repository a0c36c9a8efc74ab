package controllers

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// A bulk apply is decided before any of its VMs is written: on controller-runtime's
// priority queue a crawler just decided (its status update) would otherwise go before
// every crawler of the initial list still waiting, and each decision would wait for the
// workload of the one before. The crawler's own watch enqueues as the controller's For
// does (handler.EnqueueRequestForObject), decisionsFirst beside it.
func TestDecisionsFirst(t *testing.T) {
	crawler := func(name string, placed bool, gen, observed int64) *isov1.CrawlerVM {
		c := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: gen, ResourceVersion: "1"}}
		c.Status.ObservedGeneration = observed
		if placed {
			c.Status.Placement = &isov1.PlacementStatus{Node: "n1"}
		}
		return c
	}
	q := priorityqueue.New[reconcile.Request]("decisions-first-test")
	defer q.ShutDown()
	ctx := context.Background()
	handlers := []handler.EventHandler{&handler.EnqueueRequestForObject{}, decisionsFirst{}}
	create := func(c *isov1.CrawlerVM) {
		for _, h := range handlers {
			h.Create(ctx, event.CreateEvent{Object: c, IsInInitialList: true}, q)
		}
	}
	update := func(old, c *isov1.CrawlerVM) {
		for _, h := range handlers {
			h.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: c}, q)
		}
	}

	// The initial list: one crawler placed, three waiting (new, a changed spec, refused
	// by every node), one being deleted.
	deleting := crawler("deleting", false, 1, 0)
	deleting.DeletionTimestamp = new(metav1.Now())
	deleting.Finalizers = []string{"x"}
	create(crawler("placed", true, 1, 1))
	create(crawler("new", false, 1, 0))
	create(crawler("respecced", true, 2, 1))
	create(deleting)
	create(crawler("unplaced", false, 1, 1))
	// A crawler decided meanwhile: its status update (a new resource version).
	decided := crawler("decided", true, 1, 1)
	decided.ResourceVersion = "2"
	update(crawler("decided", false, 1, 0), decided)

	var got []string
	for q.Len() > 0 {
		req, _ := q.Get()
		got = append(got, req.Name)
		q.Done(req)
	}
	waiting := map[string]bool{"new": true, "respecced": true, "unplaced": true}
	for i, name := range got {
		if i < len(waiting) != waiting[name] {
			t.Fatalf("the queue gave %v: the crawlers waiting for a decision (new, respecced, unplaced) must come first", got)
		}
	}
	if len(got) != 6 || got[3] != "decided" {
		t.Fatalf("the queue gave %v: then the decided crawler's update, then the initial list's rest", got)
	}
}
