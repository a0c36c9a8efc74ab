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
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/slo"
)

// moveNoNode is the result of isochron_crawler_moves_total for a crawler that had to
// move and stayed: no node fits it.
const moveNoNode = "NoNode"

// maxRemediationMessage bounds status.lastRemediation.message (the schema allows 2048).
const maxRemediationMessage = 1024

// remediate acts on a refuting probe under spec.placement.onRefuted Replace
// (slo.NextRemedy decides when): it moves the crawler away from the node the probe
// refuted it on (startMove), to a node where the corrected model predicts that it and
// every neighbour fit and that has not refuted it recently (status.refutedOn), or leaves
// it there and says so. It returns whether the crawler moves, and when to look again
// when the minimum move interval or a failed move's backoff holds a move back.
func (r *CrawlerVMReconciler) remediate(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, running *kubevirtv1.VirtualMachineInstance) (bool, time.Duration, error) {
	vmiUID := ""
	if running != nil {
		vmiUID = string(running.UID)
	}
	now := r.clock.Now()
	next := slo.NextRemedy(cvm, vmiUID, now, r.minMoveInterval)
	if next.Wait > 0 {
		last := cvm.Status.LastRemediation
		if last != nil && last.Job != cvm.Status.LastProbe.Job {
			st.event(cvm, corev1.EventTypeWarning, isov1.EventReasonMoveDeferred, fmt.Sprintf(
				"Probe Job %s refuted the SLO on node %s; the crawler moved %s (at %s), less than the minimum move interval of %s ago: it moves at %s",
				cvm.Status.LastProbe.Job, cvm.Status.Placement.Node, moveText(last), last.Time.UTC().Format(time.RFC3339),
				format.Duration(r.minMoveInterval), last.Time.Add(r.minMoveInterval).UTC().Format(time.RFC3339)))
		}
		return false, next.Wait, nil
	}
	if !next.Move {
		return false, 0, nil
	}
	last, from := cvm.Status.LastProbe, cvm.Status.Placement.Node
	refuted := fmt.Sprintf("probe Job %s refuted the SLO on node %s", last.Job, from)
	if last.IntervalError != nil {
		refuted += fmt.Sprintf(" (interval error %s against the %s tolerance)", format.Duration(last.IntervalError.AtObjective.Duration), format.Duration(cvm.Spec.ErrorBudget.Tolerance.Duration))
	}
	// The node that refuted it, and every node that did recently.
	avoid := move.Avoid(cvm.Status.RefutedOn, now, r.refutedMemory)
	avoid = append(avoid, placement.Avoid{Node: from, Why: "a probe refuted the crawler's SLO there"})
	before := cvm.DeepCopy()
	done := &isov1.Remediation{Job: last.Job, Time: metav1.NewTime(now.UTC().Truncate(time.Second)), From: from}
	cvm.Status.LastRemediation = done
	d, err := r.startMove(ctx, cvm, st, isov1.MoveRefuted, avoid, refuted, func(d placement.Decision) {
		done.To = d.Node
		done.Message = format.Truncate(fmt.Sprintf("%s; moving to node %s, where the model predicts %s (%s)", refuted, d.Node, format.Duration(d.Predicted), d.Cause), maxRemediationMessage)
	})
	if err != nil || d.Placed() {
		return d.Placed(), 0, err
	}
	if d.Reason == "" {
		cvm.Status = before.Status // no decision taken (one is on its way)
		return false, 0, nil
	}
	done.Message = format.Truncate(fmt.Sprintf("%s; it stays: no other node is predicted to fit it (%s)", refuted, d.Reason), maxRemediationMessage)
	st.event(cvm, corev1.EventTypeWarning, isov1.EventReasonNoBetterNode, fmt.Sprintf("Stays on node %s: %s, and no other node is predicted to fit it", from, refuted))
	st.after(func() { r.metrics.moves.WithLabelValues(string(isov1.MoveRefuted), "", moveNoNode).Inc() })
	return false, 0, st.persist(ctx, cvm)
}

func moveText(r *isov1.Remediation) string {
	return fmt.Sprintf("from node %s to node %s", r.From, r.To)
}
