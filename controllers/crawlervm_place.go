package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/calibration"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/placer"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/sizing"
)

// place holds a node for the crawler in status, chosen by the contention model. A crawler
// placed for its current generation keeps its node while the node exists; only its
// prediction is refreshed. status.sizing and status.placement together are the
// reservation the crawler holds: when a changed spec cannot be placed, the previous
// reservation (and the VM running with it) is kept, so nothing running is lost and no
// node is counted short. A spec change waits for a move in progress to end: the move keeps
// the VM's size, and a second decision would pull the crawler away from a migration.
func (r *CrawlerVMReconciler) place(ctx context.Context, s *scope) (ctrl.Result, error) {
	cvm := s.cvm
	req := s.request(ctx)
	if (r.isPlaced(cvm) && !inventory.CountedOtherwise(cvm, req)) || (cvm.Status.Move != nil && cvm.Status.Placement != nil) {
		node, err := s.node(ctx, cvm.Status.Placement.Node)
		if err != nil {
			s.stop()
			return ctrl.Result{}, err
		}
		if node != nil {
			return ctrl.Result{}, r.refreshPrediction(ctx, s, node)
		}
		if cvm.Status.VMI != nil {
			return ctrl.Result{}, nil // its node is gone: the node loss moves it (recoverLostNode)
		}
	}
	if readiness.Released(cvm.Status.Conditions) && cvm.Status.Placement == nil {
		// Stopped or refused for a while: a reservation again once a launcher exists.
		if again, err := r.whileReleased(ctx, s); err != nil || !again {
			s.stop()
			return ctrl.Result{}, err
		}
	}
	// A decision only within the nodes the administrator lets the namespace reach: a
	// spec that reaches beyond them is refused, and a reservation held keeps its node.
	if err := r.access.Check(cvm.Namespace, cvm.Spec.Placement); err != nil {
		refuseAccess(cvm, s.statusWriter, err)
		if cvm.Status.Placement == nil {
			s.stop()
		}
		return ctrl.Result{}, nil
	}
	// A spec change that takes the crawler to another node while a VM of the previous
	// spec runs moves it by the route every move takes, holding the node it runs on until
	// it has arrived.
	leaving := ""
	if held := cvm.Status.Placement; held != nil && cvm.Status.VMI != nil {
		leaving = held.Node
	}
	before := reservationOf(cvm)
	done := false
	_, taken, err := r.reserve(ctx, s, placer.Request{Crawler: cvm, Decide: &req, Leaving: leaving}, func(d placement.Decision) {
		done = r.recordDecision(s, d, leaving)
	})
	// Decisions before workloads, as kube-scheduler binds and the kubelet starts: a
	// crawler whose reservation changed comes back, for its VM, when the cache shows it
	// (reservationChanged), and the worker goes on to the next crawler.
	if err != nil || !taken || done || reservationOf(cvm) != before {
		s.stop()
	}
	return ctrl.Result{}, err
}

// reserve is the one place a reservation changes: the placer decides and assumes (the
// next decision counts it at once), record makes the decision the crawler's status, and
// the status is written before anything is done on it, with an optimistic lock; then the
// change is committed, or undone when the write failed (a stale copy, a conflicting
// write, a manager that lost its lease: the leader fence), to be decided again. A
// decision that changes no reservation is written with the rest of the status. It
// returns the decision, and false when none was taken: this process's last decision for
// the crawler has not reached the cache yet.
func (r *CrawlerVMReconciler) reserve(ctx context.Context, s *scope, req placer.Request, record func(placement.Decision)) (placement.Decision, bool, error) {
	res, err := r.placer.Reserve(ctx, req)
	if err != nil || !res.Taken {
		return res.Decision, false, err
	}
	record(res.Decision)
	if !res.Changed() {
		return res.Decision, true, nil
	}
	if err := s.persist(ctx, s.cvm); err != nil {
		res.Undo()
		return res.Decision, true, err
	}
	res.Commit()
	return res.Decision, true, nil
}

// recordDecision makes decision d the crawler's status (applyDecision) and tells it in an
// Event and the metrics, once the status is written; a decision that takes the crawler
// away from leaving, the node a VM of its previous spec runs on, starts a move. It
// returns whether the reconcile is done (nothing held).
func (r *CrawlerVMReconciler) recordDecision(s *scope, d placement.Decision, leaving string) bool {
	cvm := s.cvm
	out := applyDecision(cvm, d)
	result := "placed"
	if !d.Placed() {
		result = "unschedulable"
	}
	s.after(func() { r.metrics.placementDecisions.WithLabelValues(result).Inc() })
	if e := out.event; e != nil {
		s.event(cvm, e.kind, e.reason, e.message)
	}
	if d.Placed() && leaving != "" && leaving != d.Node {
		cvm.Status.Move = &isov1.Move{Reason: isov1.MoveSpecChange, Mode: isov1.MoveLive, From: leaving, To: d.Node,
			StartTime: metav1.NewTime(r.clock.Now().UTC().Truncate(time.Second)),
			Message:   fmt.Sprintf("spec generation %d no longer fits node %s", cvm.Generation, leaving)}
		setCondition(cvm, isov1.ConditionMoving, true, isov1.ReasonMigrating, fmt.Sprintf("moving from node %s to node %s: %s", leaving, d.Node, cvm.Status.Move.Message))
	}
	return out.done
}

func (r *CrawlerVMReconciler) isPlaced(cvm *isov1.CrawlerVM) bool {
	return cvm.Status.Placement != nil && cvm.Status.ObservedGeneration == cvm.Generation &&
		apimeta.IsStatusConditionTrue(cvm.Status.Conditions, isov1.ConditionPlaced)
}

// refreshPrediction updates a placed crawler's predicted error for what is on its node
// (as the reconcile read it) now: neighbours come and go, profiles change. It is written
// in status.placement and the Placed message alike, and says whether that puts the
// crawler at risk (an Event once the status is written).
func (r *CrawlerVMReconciler) refreshPrediction(ctx context.Context, s *scope, node *corev1.Node) error {
	cvm := s.cvm
	res, held := inventory.Resident(cvm)
	if !held {
		return nil
	}
	pred, ok, err := r.placer.Predict(ctx, node, s.key())
	if err != nil || !ok {
		return err
	}
	wasAtRisk := apimeta.IsStatusConditionTrue(cvm.Status.Conditions, isov1.ConditionAtRisk)
	setPlacement(cvm, res.Node, res.Sizing, pred.Prediction)
	if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionAtRisk); c.Status == metav1.ConditionTrue && !wasAtRisk {
		s.event(cvm, corev1.EventTypeWarning, c.Reason, c.Message)
	}
	return nil
}

// refreshAfterMove is refreshPrediction on the node a move's end leaves the crawler on,
// where its status is written together with the move's end; a node that cannot be read
// keeps the prediction the move was decided with.
func (r *CrawlerVMReconciler) refreshAfterMove(ctx context.Context, s *scope, name string) {
	node, err := s.node(ctx, name)
	if err == nil && node != nil {
		err = r.refreshPrediction(ctx, s, node)
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "Refreshing the prediction after a move", "node", name)
	}
}

// refuseAccess says, in the crawler's status, that its spec reaches beyond the nodes its
// namespace may reach (err names the field and the fix), and tells it in an Event when
// that is news. A crawler that holds a reservation keeps it, and its VM runs on.
func refuseAccess(cvm *isov1.CrawlerVM, st *statusWriter, err error) {
	msg := err.Error()
	if held := cvm.Status.Placement; held != nil {
		msg += fmt.Sprintf("; the VM of the previous spec keeps its reservation on %s", held.Node)
	}
	if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionPlaced); c == nil || c.Reason != isov1.ReasonNodeAccessNotAllowed || c.Message != msg {
		st.event(cvm, corev1.EventTypeWarning, isov1.ReasonNodeAccessNotAllowed, msg)
	}
	cvm.Status.ObservedGeneration = cvm.Generation
	setCondition(cvm, isov1.ConditionPlaced, false, isov1.ReasonNodeAccessNotAllowed, msg)
	if cvm.Status.Placement == nil {
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonNotPlaced, "not placed: "+err.Error())
	}
}

// outcome is what a decision means beyond the status: whether the reconcile is done, and
// the Event that tells it (nil for none).
type outcome struct {
	done  bool
	event *eventInfo
}

type eventInfo struct{ kind, reason, message string }

// applyDecision turns a placement decision into the crawler's status: the reservation
// (status.sizing, status.placement), the Placed, Ready and AtRisk conditions, and
// observedGeneration. It does no I/O. A crawler nothing fits keeps the reservation it
// holds (the VM of its previous spec); one that holds none is done until something
// changes.
func applyDecision(cvm *isov1.CrawlerVM, d placement.Decision) outcome {
	held := cvm.Status.Placement
	placedNow := apimeta.IsStatusConditionTrue(cvm.Status.Conditions, isov1.ConditionPlaced)
	firstDecision := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionPlaced) == nil
	cvm.Status.ObservedGeneration = cvm.Generation
	want := d.Sizing
	if !d.Placed() {
		msg := fmt.Sprintf("no node can host %d vCPUs (%d exclusive CPUs) within every crawler's budget: %s", want.VCPUs, want.HostCPUs, d.Reason)
		if held != nil {
			msg += fmt.Sprintf("; the VM of the previous spec keeps its reservation on %s", held.Node)
		} else if want.VCPUs > 0 {
			cvm.Status.Sizing = inventory.SizingStatus(want)
		}
		setCondition(cvm, isov1.ConditionPlaced, false, isov1.ReasonUnschedulable, msg)
		if held == nil {
			setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonNotPlaced, "waiting for a node: "+d.Reason)
			apimeta.RemoveStatusCondition(&cvm.Status.Conditions, isov1.ConditionAtRisk) // it holds no node
		}
		out := outcome{done: held == nil}
		if placedNow || firstDecision {
			out.event = &eventInfo{corev1.EventTypeWarning, isov1.ReasonUnschedulable, msg}
		}
		return out
	}
	out := outcome{}
	if held == nil || held.Node != d.Node {
		out.event = &eventInfo{corev1.EventTypeNormal, isov1.ReasonPlaced, fmt.Sprintf("Placed on node %s with %d vCPUs (%d exclusive CPUs), predicted interval error %s",
			d.Node, want.VCPUs, want.HostCPUs, format.Duration(d.Predicted))}
	}
	hold(cvm, d)
	return out
}

// hold makes decision d, which placed the crawler, its reservation: status.sizing and
// status.placement, the Placed condition and AtRisk.
func hold(cvm *isov1.CrawlerVM, d placement.Decision) {
	cvm.Status.Sizing = inventory.SizingStatus(d.Sizing)
	// A node is chosen only where every crawler stays within budget.
	setPlacement(cvm, d.Node, d.Sizing, model.Prediction{Error: d.Predicted, Cause: d.Cause, Correction: d.Correction, Within: true})
}

// setPlacement records the crawler's prediction on its node in status.placement, and
// from the same figures the Placed condition's message and AtRisk: one source, so the
// message never keeps a figure status.placement has since refreshed. A crawler that
// moved here (status.lastRemediation) says so first. It does no I/O.
func setPlacement(cvm *isov1.CrawlerVM, node string, size sizing.Result, pred model.Prediction) {
	tolerance := cvm.Spec.ErrorBudget.Tolerance.Duration
	prefix := ""
	if m := cvm.Status.LastRemediation; m != nil && m.To == node {
		prefix = fmt.Sprintf("moved from node %s (probe Job %s refuted the SLO there): ", m.From, m.Job)
	}
	cvm.Status.Placement = placementStatus(cvm, node, pred.Error, pred.Correction)
	holds := fmt.Sprintf("%d exclusive CPUs (%d vCPUs and the emulator thread)", size.HostCPUs, size.VCPUs)
	if !size.Dedicated() {
		holds = fmt.Sprintf("a %s CPU request in the shared pool for %d vCPUs", format.CPU(size.CPURequestMilli), size.VCPUs)
	}
	within := "within"
	if !pred.Within {
		within = "over"
	}
	setCondition(cvm, isov1.ConditionPlaced, true, isov1.ReasonPlaced,
		fmt.Sprintf("%snode %s holds %s; predicted interval error %s (%s) %s the %s tolerance",
			prefix, node, holds, format.Duration(cvm.Status.Placement.PredictedError.Duration), pred.Cause, within, format.Duration(tolerance)))
	risk, reason, msg := atRisk(node, pred, tolerance)
	setCondition(cvm, isov1.ConditionAtRisk, risk, reason, msg)
}

// placementStatus records the node and the prediction, with the node's correction it
// includes; headroom is tolerance minus it.
func placementStatus(cvm *isov1.CrawlerVM, node string, predicted time.Duration, correction float64) *isov1.PlacementStatus {
	// Whole microseconds keep the status stable and readable ("1.712ms").
	predicted = predicted.Round(time.Microsecond)
	ps := &isov1.PlacementStatus{
		Node:           node,
		PredictedError: &metav1.Duration{Duration: predicted},
		Headroom:       &metav1.Duration{Duration: cvm.Spec.ErrorBudget.Tolerance.Duration - predicted},
	}
	if correction > 0 && correction != 1 {
		ps.Correction = isov1.Decimal(calibration.Format(correction))
	}
	return ps
}
