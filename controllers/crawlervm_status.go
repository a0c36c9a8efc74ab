package controllers

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

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

// vmReadiness turns what KubeVirt reports of the crawler's VM and its VMI (nil for none)
// into the Ready condition. It does no I/O.
func vmReadiness(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) (ok bool, reason, message string) {
	if vmi != nil && vmi.DeletionTimestamp.IsZero() {
		switch vmi.Status.Phase {
		case kubevirtv1.Running:
			return true, isov1.ReasonVMIRunning, fmt.Sprintf("VMI %s runs on node %s", vmi.Name, vmi.Status.NodeName)
		case kubevirtv1.Failed, kubevirtv1.Succeeded:
			return false, isov1.ReasonVMIFailed, fmt.Sprintf("VMI %s %s; KubeVirt starts a new one (runStrategy Always)", vmi.Name, strings.ToLower(string(vmi.Status.Phase)))
		case "":
			return false, isov1.ReasonVMIPending, fmt.Sprintf("VMI %s created, waiting for KubeVirt to schedule it", vmi.Name)
		default:
			return false, isov1.ReasonVMIPending, fmt.Sprintf("VMI %s is %s", vmi.Name, vmi.Status.Phase)
		}
	}
	strategy, _ := vm.RunStrategy()
	if f := vm.Status.StartFailure; f != nil && f.ConsecutiveFailCount > 0 && strategy == kubevirtv1.RunStrategyAlways {
		next := "soon"
		if f.RetryAfterTimestamp != nil {
			next = "at " + f.RetryAfterTimestamp.UTC().Format(time.RFC3339)
		}
		return false, isov1.ReasonVMCrashLoop, fmt.Sprintf("the VMIs of VM %s failed %d times in a row before running (last: VMI %s); KubeVirt starts the next %s (its crash-loop backoff); kubectl get events --field-selector involvedObject.name=%s says why",
			vm.Name, f.ConsecutiveFailCount, f.LastFailedVMIUID, next, vm.Name)
	}
	if strategy == kubevirtv1.RunStrategyHalted {
		return false, isov1.ReasonVMStopped, fmt.Sprintf("VM %s is stopped (runStrategy Halted, as virtctl stop sets it); virtctl start %s runs it again", vm.Name, vm.Name)
	}
	if vmi != nil {
		return false, isov1.ReasonVMIFailed, fmt.Sprintf("VMI %s is being deleted; KubeVirt starts a new one (runStrategy Always)", vmi.Name)
	}
	return false, isov1.ReasonVMIPending, fmt.Sprintf("VM %s exists, waiting for KubeVirt to start its VMI", vm.Name)
}

// setProgress derives the kstatus conditions Reconciling and Stalled ("abnormal-true":
// present only while True) from Placed and Ready, so that Flux, Argo CD and
// `kubectl wait` read a crawler's health the standard way: Reconciling while it is
// being placed or its VMI starts, Stalled when it cannot get there without a change
// (no node fits, its network is missing or not allowed, its VM crash-loops, a person
// stopped it, its node is lost and not fenced yet), neither once Ready. A failed VMI is progress: KubeVirt starts a new one.
// SLOConfirmed is an observation of a running crawler and does not change them.
func setProgress(cvm *isov1.CrawlerVM) {
	conds := &cvm.Status.Conditions
	placed := meta.FindStatusCondition(*conds, isov1.ConditionPlaced)
	ready := meta.FindStatusCondition(*conds, isov1.ConditionReady)
	stalled, reconciling := (*metav1.Condition)(nil), (*metav1.Condition)(nil)
	switch {
	case placed != nil && placed.Status == metav1.ConditionFalse:
		stalled = placed
	case ready != nil && ready.ObservedGeneration < cvm.Generation:
		// Ready speaks of an earlier spec: the current one is still being applied.
		reconciling = &metav1.Condition{Reason: isov1.ReasonSpecChanged, Message: fmt.Sprintf("applying spec generation %d", cvm.Generation)}
	case ready != nil && ready.Status == metav1.ConditionTrue:
	case ready != nil && (ready.Reason == isov1.ReasonVMCrashLoop || ready.Reason == isov1.ReasonVMStopped || ready.Reason == isov1.ReasonNodeLost || ready.Reason == isov1.ReasonRTNetworkNotFound ||
		ready.Reason == isov1.ReasonRTNetworkNotAllowed || ready.Reason == isov1.ReasonInvalid || ready.Reason == isov1.ReasonLauncherUnschedulable):
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
