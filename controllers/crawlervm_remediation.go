package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/slo"
)

// Results of isochron_crawler_moves_total.
const (
	moveMoved  = "moved"
	moveStayed = "stayed"
)

// maxRemediationMessage bounds status.lastRemediation.message (the schema allows 2048).
const maxRemediationMessage = 1024

// remediate acts on a refuting probe under spec.placement.onRefuted Replace
// (slo.NextRemedy decides when): it re-places the crawler away from the node the probe
// refuted it on, where the corrected model predicts that it and every neighbour fit, or
// leaves it there and says so. A move is a placement decision like any other: taken
// under the decision lock on what the API server holds, and persisted before the lock
// is released. It returns whether the crawler moved, and when to look again when the
// minimum move interval holds a move back.
func (r *CrawlerVMReconciler) remediate(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, running *kubevirtv1.VirtualMachineInstance) (bool, time.Duration, error) {
	vmiUID := ""
	if running != nil {
		vmiUID = string(running.UID)
	}
	next := slo.NextRemedy(cvm, vmiUID, r.clock.Now(), r.minMoveInterval)
	if next.Wait > 0 {
		last := cvm.Status.LastRemediation
		r.Recorder.Eventf(cvm, corev1.EventTypeWarning, isov1.EventReasonMoveDeferred,
			"Probe Job %s refuted the SLO on node %s; the crawler moved %s (at %s), less than the minimum move interval of %s ago: it moves at %s",
			cvm.Status.LastProbe.Job, cvm.Status.Placement.Node, moveText(last), last.Time.UTC().Format(time.RFC3339),
			format.Duration(r.minMoveInterval), last.Time.Add(r.minMoveInterval).UTC().Format(time.RFC3339))
		return false, next.Wait, nil
	}
	if !next.Move {
		return false, 0, nil
	}

	r.decide.Lock()
	defer r.decide.Unlock()
	if err := r.buildLedger(ctx); err != nil {
		return false, 0, err
	}
	if r.ledger.Assumed(cvm.Namespace + "/" + cvm.Name) {
		// The cache's copy predates a decision for it: the cache's update brings it back.
		return false, 0, nil
	}
	inv, err := r.gather(ctx)
	if err != nil {
		return false, 0, err
	}
	last, from := cvm.Status.LastProbe, cvm.Status.Placement.Node
	req := inventory.Request(cvm, r.vfio(ctx, cvm))
	req.Avoid = from
	d := placement.NewPlanner(inv.nodes, inv.residents).Place(req)
	refuted := fmt.Sprintf("probe Job %s refuted the SLO on node %s", last.Job, from)
	if last.IntervalError != nil {
		refuted += fmt.Sprintf(" (interval error %s against the %s tolerance)", format.Duration(last.IntervalError.AtObjective.Duration), format.Duration(cvm.Spec.ErrorBudget.Tolerance.Duration))
	}
	done := &isov1.Remediation{Job: last.Job, Time: metav1.NewTime(r.clock.Now().UTC().Truncate(time.Second)), From: from}
	if d.Placed() {
		done.To = d.Node
		done.Message = format.Truncate(fmt.Sprintf("%s; moved to node %s, where the model predicts %s (%s)", refuted, d.Node, format.Duration(d.Predicted), d.Cause), maxRemediationMessage)
		cvm.Status.LastRemediation = done
		hold(cvm, d)
		st.event(cvm, corev1.EventTypeWarning, isov1.EventReasonMoved, fmt.Sprintf("Moved to node %s: %s; its VMI is recreated there", d.Node, refuted))
		st.after(func() { r.metrics.moves.WithLabelValues(moveMoved).Inc() })
	} else {
		done.Message = format.Truncate(fmt.Sprintf("%s; it stays: no other node is predicted to fit it (%s)", refuted, d.Reason), maxRemediationMessage)
		st.event(cvm, corev1.EventTypeWarning, isov1.EventReasonNoBetterNode, fmt.Sprintf("Stays on node %s: %s, and no other node is predicted to fit it", from, refuted))
		st.after(func() { r.metrics.moves.WithLabelValues(moveStayed).Inc() })
	}
	cvm.Status.LastRemediation = done
	undo := func() {}
	if d.Placed() {
		res, _ := inventory.Resident(cvm)
		undo = r.ledger.Assume(res)
	}
	// Persisted with an optimistic lock: a stale copy fails, is forgotten, and decides
	// again (never two moves for one probe: the move is recorded with the reservation).
	if err := st.persist(ctx, cvm); err != nil {
		undo()
		return false, 0, err
	}
	return d.Placed(), 0, nil
}

func moveText(r *isov1.Remediation) string {
	return fmt.Sprintf("from node %s to node %s", r.From, r.To)
}
