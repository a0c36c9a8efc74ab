package controllers

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/model"
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
