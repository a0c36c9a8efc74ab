package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/sizing"
)

// maxMessage bounds condition messages well under the API's 32 KiB.
const maxMessage = 4096

// setCondition sets one condition for the CrawlerVM's current generation. It does no I/O.
func setCondition(cvm *isov1.CrawlerVM, typ string, ok bool, reason, message string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	setConditionStatus(cvm, typ, status, reason, message)
}

// setConditionStatus sets one condition, which may also be Unknown. It does no I/O.
func setConditionStatus(cvm *isov1.CrawlerVM, typ string, status metav1.ConditionStatus, reason, message string) {
	if len(message) > maxMessage {
		message = message[:maxMessage-3] + "..."
	}
	meta.SetStatusCondition(&cvm.Status.Conditions, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: cvm.Generation,
	})
}

// atRisk is the AtRisk condition for a crawler's prediction on its node: True, with the
// figure and the model's message (the term, its figures, what to do), when it is not
// within the crawler's tolerance. It does no I/O.
func atRisk(node string, pred model.Prediction, tolerance time.Duration) (bool, string, string) {
	if pred.Within {
		return false, isov1.ReasonPredictedWithinTolerance, fmt.Sprintf("predicted interval error %s (%s) on node %s is within the %s tolerance",
			format.Duration(pred.Error), pred.Cause, node, format.Duration(tolerance))
	}
	return true, isov1.ReasonPredictedOverTolerance, fmt.Sprintf("with what node %s holds now, the predicted interval error is %s (%s) against the %s tolerance: %s",
		node, model.FormatError(pred.Error), pred.Cause, format.Duration(tolerance), pred.Message)
}

// setProgress derives the kstatus conditions Reconciling and Stalled ("abnormal-true":
// present only while True) from Placed and Ready, so that Flux, Argo CD and
// `kubectl wait` read a crawler's health the standard way: Reconciling while it is
// being placed or its VMI starts, Stalled when it cannot get there without a change (no
// node fits, or the verdict that set Ready says it is stuck: readiness.Verdict), neither
// once Ready. readyStuck is that verdict's, nil when no verdict set Ready in this
// reconcile: Ready, unchanged, keeps the classification it had. SLOConfirmed is an
// observation of a running crawler and does not change them.
func setProgress(cvm *isov1.CrawlerVM, readyStuck *bool) {
	conds := &cvm.Status.Conditions
	placed := meta.FindStatusCondition(*conds, isov1.ConditionPlaced)
	ready := meta.FindStatusCondition(*conds, isov1.ConditionReady)
	stuck := false
	if readyStuck != nil {
		stuck = *readyStuck
	} else if s := meta.FindStatusCondition(*conds, isov1.ConditionStalled); s != nil && ready != nil {
		stuck = s.Reason == ready.Reason
	}
	stalled, reconciling := (*metav1.Condition)(nil), (*metav1.Condition)(nil)
	switch {
	case placed != nil && placed.Status == metav1.ConditionFalse:
		stalled = placed
	case ready != nil && ready.ObservedGeneration < cvm.Generation:
		// Ready speaks of an earlier spec: the current one is still being applied.
		reconciling = &metav1.Condition{Reason: isov1.ReasonSpecChanged, Message: fmt.Sprintf("applying spec generation %d", cvm.Generation)}
	case ready != nil && ready.Status == metav1.ConditionTrue:
	case ready != nil && stuck:
		stalled = ready
	case ready != nil:
		reconciling = ready
	case placed == nil:
		reconciling = &metav1.Condition{Reason: isov1.ReasonPlacing, Message: "choosing a node"}
	default:
		reconciling = &metav1.Condition{Reason: isov1.ReasonStarting, Message: "placed; creating the VMI"}
	}
	for typ, from := range map[string]*metav1.Condition{isov1.ConditionStalled: stalled, isov1.ConditionReconciling: reconciling} {
		if from == nil {
			meta.RemoveStatusCondition(conds, typ)
			continue
		}
		setConditionStatus(cvm, typ, metav1.ConditionTrue, from.Reason, from.Message)
	}
}

// statusWriter patches a CrawlerVM's status when, and only when, it changed, with an
// optimistic lock: a decision taken on a stale copy fails and is taken again. What tells
// of a status change (an Event, a counter: a probe recorded, a move made) is queued with
// after and happens once the status that records it is written: a write that loses a
// conflict drops it, and the reconcile that records the change again tells it then, so
// that it is told once whatever the conflicts.
type statusWriter struct {
	client.Client
	recorder record.EventRecorder
	before   *isov1.CrawlerVM
	pending  []func()
	// readyAtStart is the Ready condition as the reconcile found it (before moves on
	// with each write): what an outage begins or ends against.
	readyAtStart *metav1.Condition
	// readyStuck is whether the verdict that set Ready in this reconcile is stuck (nil
	// when none did): kstatus' Stalled, derived where the reason is set.
	readyStuck *bool
	// identity is the replica's leader-election identity (WithLeaderIdentity).
	identity string
	// wait is when the reconcile must look again at the latest (0: no such need).
	wait time.Duration
	// written records the resourceVersion each write produces (nil: none kept).
	written *ownWrites
}

// retryAfter asks the reconcile to look again within d.
func (w *statusWriter) retryAfter(d time.Duration) {
	if w.wait == 0 || d < w.wait {
		w.wait = d
	}
}

// after queues f until the status is written.
func (w *statusWriter) after(f func()) { w.pending = append(w.pending, f) }

// event queues an Event on the crawler until the status is written.
func (w *statusWriter) event(cvm *isov1.CrawlerVM, kind, reason, message string) {
	w.after(func() { w.recorder.Event(cvm, kind, reason, message) })
}

func (w *statusWriter) persist(ctx context.Context, cvm *isov1.CrawlerVM) error {
	setProgress(cvm, w.readyStuck)
	if w.identity != "" && reservationOf(w.before) != reservationOf(cvm) {
		// A change of the reservation: admitted by the API server's leader fence only
		// while this replica holds the Lease.
		cvm.Status.DecidedBy = w.identity
	}
	if !equality.Semantic.DeepEqual(w.before.Status, cvm.Status) {
		if err := w.Status().Patch(ctx, cvm, client.MergeFromWithOptions(w.before, client.MergeFromWithOptimisticLock{})); err != nil {
			w.pending = nil
			return fmt.Errorf("patching status of %s: %w", klog.KObj(cvm), err)
		}
		w.before = cvm.DeepCopy()
		w.written.record(cvm.Namespace+"/"+cvm.Name, cvm.ResourceVersion)
	}
	for _, f := range w.pending {
		f()
	}
	w.pending = nil
	return nil
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

// ownWrites are the resourceVersions this process's last status write of each crawler
// produced, until the cache shows them. A reconcile of a cached copy older than that
// (resourceVersions compare as KEP-5504 makes them comparable) would write from a copy the
// API server refuses as a conflict, and judge from one that misses its own last write: it
// waits for the cache instead (cacheLagRetry).
type ownWrites struct {
	mu sync.Mutex
	rv map[string]string
}

// record keeps rv as key's last write.
func (o *ownWrites) record(key, rv string) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.rv == nil {
		o.rv = map[string]string{}
	}
	o.rv[key] = rv
}

// behind says whether a copy of key at rv is older than this process's last write of
// it; once a copy is not, the write is forgotten: the cache never goes back.
func (o *ownWrites) behind(key, rv string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	last, ok := o.rv[key]
	if !ok {
		return false
	}
	if c, err := resourceversion.CompareResourceVersion(rv, last); err == nil && c < 0 {
		return true
	}
	delete(o.rv, key)
	return false
}

// forget forgets key's writes (the crawler is gone).
func (o *ownWrites) forget(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.rv, key)
}

// cacheLagRetry is how soon a reconcile of a copy older than this process's last write
// looks again: the cache shows a write within milliseconds of it.
const cacheLagRetry = 100 * time.Millisecond
