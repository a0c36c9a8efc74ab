package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// The decision lock is never held across a call to the API server: while the status
// write that records a move (placer.Move), and then the one that ends it (placer.Settle),
// wait on a slow API server, another crawler is decided and placed. Held across the
// write, the lock kept every decision waiting for it.
func TestDecisionsGoOnWhileAMoveIsWritten(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("lock-1", "it", "lock"), 16)
	createNode(t, rtNode("lock-2", "it", "lock"), 16)
	release := heldMigrations(t, ns)
	mover, vmi := placedCrawler(t, ns, "mover", "lock")
	waitForCrawler(t, mover, "Ready", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning)
	})

	// The write that records the move waits; the decision behind it is taken.
	held, write := conflicts.hold(t, client.ObjectKeyFromObject(mover), `"move":{`)
	if err := kv.Evict(ctx, client.ObjectKeyFromObject(vmi)); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction: %v, want it refused (429) and the VMI marked for evacuation", err)
	}
	waitHeld(t, held, "the write of the move")
	placedWhileHeld(t, crawler(ns, "during-move", withSelector("it", "lock")))
	write()
	waitForCrawler(t, mover, "the migration under way", func(c *isov1.CrawlerVM) bool {
		return c.Status.Move != nil && c.Status.Move.Migration != ""
	})

	// The write that ends the move waits in turn.
	held, write = conflicts.hold(t, client.ObjectKeyFromObject(mover), `"lastMove":{`)
	release()
	waitHeld(t, held, "the write of the move's end")
	placedWhileHeld(t, crawler(ns, "during-settle", withSelector("it", "lock")))
	write()
	waitForCrawler(t, mover, "the move ended", func(c *isov1.CrawlerVM) bool {
		return c.Status.Move == nil && c.Status.LastMove != nil && c.Status.LastMove.Result == isov1.MoveSucceeded
	})
}

func waitHeld(t *testing.T, held <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never came", what)
	}
}

// placedWhileHeld creates c and waits for it to be placed, which needs the decision lock.
func placedWhileHeld(t *testing.T, c *isov1.CrawlerVM) {
	t.Helper()
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	waitForCrawler(t, c, "placed while a status write waits (the decision lock is free)", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionPlaced, metav1.ConditionTrue, isov1.ReasonPlaced)
	})
}

// A pod that finishes on a node (Succeeded) frees what it held there, as kube-scheduler
// counts it: the node books see it leave (their watch selects only pods that hold
// something), and the crawler waiting for that node is placed.
func TestFinishedPodFreesItsNode(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("finish-1", "it", "finish"), 8)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "batch"},
		Spec: corev1.PodSpec{NodeName: "finish-1", AutomountServiceAccountToken: ptr.To(false), Containers: []corev1.Container{{
			Name: "batch", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("1Gi")}},
		}}},
	}
	eventually(t, "the pod created (its namespace's default ServiceAccount exists)", func() (bool, string) {
		err := k8s.Create(ctx, pod)
		return err == nil, fmt.Sprint(err)
	})
	pod.Status.Phase = corev1.PodRunning
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waiting := crawler(ns, "waiting", withSelector("it", "finish"))
	if err := k8s.Create(ctx, waiting); err != nil {
		t.Fatal(err)
	}
	waitForCrawler(t, waiting, "Placed=False while the pod holds finish-1's CPUs", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionPlaced, metav1.ConditionFalse, isov1.ReasonUnschedulable)
	})
	pod.Status.Phase = corev1.PodSucceeded
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitForCrawler(t, waiting, "placed on finish-1 once the pod finished", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionPlaced, metav1.ConditionTrue, isov1.ReasonPlaced) && c.Status.Placement.Node == "finish-1"
	})
}
