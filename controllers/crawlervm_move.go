package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/placer"
)

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations,verbs=get;list;watch;create;delete

// blockedRetry is how often a crawler that must leave its node and has nowhere to go
// looks again (besides the changes that wake it).
const blockedRetry = 30 * time.Second

// moveNoNode is the result of isochron_crawler_moves_total for a crawler that had to
// move and stayed: no node fits it.
const moveNoNode = "NoNode"

// moveTrigger is why a crawler must leave its node, as one trigger found it: a drain, a
// lost node, a launcher its node refused or cannot schedule, an overbooked node, a probe
// that refuted it, a migration someone asked for. Every trigger moves the crawler through
// one engine (startMove), and one that finds no node says so the one way (blocked).
type moveTrigger struct {
	reason isov1.MoveReason
	// cold is set when the crawler restarts on the new node: its first copy is gone, or
	// does not run.
	cold bool
	// avoid are the nodes it must not go to (a cordoned node, one being drained, no
	// decision offers).
	avoid []placement.Avoid
	// why is what the move's message, and a blocked one, say first.
	why string
	// to are the labels of the node someone asked for (a migration's addedNodeSelector).
	to map[string]string
	// then is what a blocked message ends with: what happens meanwhile; event is the
	// reason of the Event that tells it (MoveBlocked when empty).
	then, event string
}

// startMove moves the crawler, for t, to another node the model chose: never one t
// avoids nor a cordoned one, the crawler keeping its size (a live migration moves the
// VM as it is). The move is a placement decision like any other (reserve): recorded in
// status.move with the reservation held on both nodes until it ends, and persisted before
// anything is done on it. also, when set, adds to the status a move records. It returns
// the decision (not placed when no node fits: its Reason says why), and false when none
// was taken: one for the crawler is on its way.
func (r *CrawlerVMReconciler) startMove(ctx context.Context, s *scope, t moveTrigger, also func(placement.Decision)) (placement.Decision, bool, error) {
	cvm := s.cvm
	held, ok := inventory.Resident(cvm)
	if !ok {
		return placement.Decision{}, false, nil
	}
	req := s.request(ctx)
	req.MoveTo, req.Size = t.to, &held.Sizing
	req.Avoid = append(req.Avoid, t.avoid...)
	return r.reserve(ctx, s, placer.Request{Crawler: cvm, Decide: &req, Leaving: held.Node}, func(d placement.Decision) {
		if !d.Placed() {
			return
		}
		r.recordMove(s, t, held.Node, d)
		if also != nil {
			also(d)
		}
		s.event(cvm, corev1.EventTypeNormal, isov1.EventReasonMoving, fmt.Sprintf("Moving from node %s to node %s: %s", held.Node, d.Node, cvm.Status.Move.Message))
	})
}

// recordMove makes a move to the node d chose the crawler's status: status.move, the
// reservation there, and the Moving condition.
func (r *CrawlerVMReconciler) recordMove(s *scope, t moveTrigger, from string, d placement.Decision) {
	cvm := s.cvm
	mode := isov1.MoveLive
	if t.cold {
		mode = isov1.MoveCold
	}
	cvm.Status.Move = &isov1.Move{Reason: t.reason, Mode: mode, From: from, To: d.Node,
		StartTime: metav1.NewTime(r.clock.Now().UTC().Truncate(time.Second)),
		Message:   format.Truncate(fmt.Sprintf("%s; node %s is predicted to hold it within every crawler's budget (%s, %s)", t.why, d.Node, format.Duration(d.Predicted), d.Cause), move.MaxMessage)}
	hold(cvm, d)
	setCondition(cvm, isov1.ConditionMoving, true, isov1.ReasonMigrating, fmt.Sprintf("moving from node %s to node %s: %s", from, d.Node, cvm.Status.Move.Message))
}

// relocate moves the crawler for t (startMove), or says it is blocked.
func (r *CrawlerVMReconciler) relocate(ctx context.Context, s *scope, t moveTrigger) (ctrl.Result, error) {
	d, taken, err := r.startMove(ctx, s, t, nil)
	if err != nil || !taken || d.Placed() {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.blocked(s, t, d)}, nil
}

// blocked says that the crawler must leave its node for t and no other node fits it (d
// says why): the Moving condition, and an Event with the count when that is news. It
// returns when to look again.
func (r *CrawlerVMReconciler) blocked(s *scope, t moveTrigger, d placement.Decision) time.Duration {
	cvm := s.cvm
	msg := move.NoNode(t.why, d.Reason, t.then)
	if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionMoving); c == nil || c.Reason != isov1.ReasonMoveBlocked || c.Message != msg {
		reason := t.event
		if reason == "" {
			reason = isov1.ReasonMoveBlocked
		}
		s.event(cvm, corev1.EventTypeWarning, reason, msg)
		s.after(func() { r.metrics.moves.WithLabelValues(string(t.reason), "", moveNoNode).Inc() })
	}
	setCondition(cvm, isov1.ConditionMoving, false, isov1.ReasonMoveBlocked, msg)
	return blockedRetry
}

// endMove ends the move with result (move.End): the crawler keeps only the node it runs
// on (the new one when the move succeeded, the one it left when it failed), the ledger
// follows at once (reserve), and status.lastMove, the Moving condition, an Event and the
// count say how it went; the crawler's prediction is refreshed where it stays, in the same
// write.
func (r *CrawlerVMReconciler) endMove(ctx context.Context, s *scope, result isov1.MoveResult, next move.Next) error {
	cvm := s.cvm
	m := cvm.Status.Move
	e := move.End(m, result, next, cvm.Status.LastMove, r.clock.Now())
	_, _, err := r.reserve(ctx, s, placer.Request{Crawler: cvm, Keep: e.Stays}, func(placement.Decision) {
		rec := e.Record
		setCondition(cvm, isov1.ConditionMoving, false, e.Reason, e.Message)
		kind := corev1.EventTypeNormal
		if e.Warning {
			kind = corev1.EventTypeWarning
		}
		s.event(cvm, kind, e.Reason, e.Event)
		cvm.Status.LastMove, cvm.Status.Move = &rec, nil
		cvm.Status.Placement.Node = e.Stays
		s.after(func() {
			r.metrics.moves.WithLabelValues(string(rec.Reason), string(rec.Mode), string(rec.Result)).Inc()
		})
		r.refreshAfterMove(ctx, s, e.Stays)
	})
	return err
}
