package controllers

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/outage"
)

// trackOutage records the crawler's outages (status.outages, package outage) from its
// Ready condition as the reconcile found it and as it is now: one begins when a crawler that ran
// stops running, with its cause and the time KubeVirt or the node says it stopped, and
// ends when it runs again, at the time its VMI reported Running. The Events and counts
// happen once the status that records them is written. DowntimeWithinBudget says what the
// outages of the last 30 days spent of the error budget.
func (r *CrawlerVMReconciler) trackOutage(cvm *isov1.CrawlerVM, st *statusWriter) {
	var vmi *kubevirtv1.VirtualMachineInstance
	var node move.NodeState
	if w := st.world; w != nil {
		vmi, node = w.VMI, w.Node
	}
	was := st.readyAtStart
	now := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionReady)
	if now == nil {
		return
	}
	wasUp := was != nil && was.Status == metav1.ConditionTrue
	up := now.Status == metav1.ConditionTrue
	clock := r.clock.Now()
	start, end := clock, clock
	switch {
	case node.Lost && !node.Since.IsZero():
		start = node.Since
	case vmi != nil && vmi.IsFinal():
		start = phaseTime(vmi, vmi.Status.Phase, clock)
	}
	if up && vmi != nil {
		end = phaseTime(vmi, kubevirtv1.Running, clock)
	}
	cause := outage.Cause(now.Reason, cvm.Status.Move)
	list, change := outage.Track(cvm.Status.Outages, wasUp, up, cause, now.Message, start, end)
	cvm.Status.Outages = list
	key := []string{cvm.Namespace, cvm.Name}
	switch change {
	case outage.Began:
		o := list[0]
		st.event(cvm, corev1.EventTypeWarning, isov1.EventReasonOutageBegan, "The crawler stopped running ("+string(o.Cause)+"): "+o.Message)
		st.after(func() { r.metrics.outages.WithLabelValues(key[0], key[1], string(o.Cause)).Inc() })
	case outage.Ended:
		o := list[0]
		st.event(cvm, corev1.EventTypeNormal, isov1.EventReasonOutageEnded, "The crawler runs again after "+format.Duration(o.Duration.Duration)+" down ("+string(o.Cause)+")")
		st.after(func() { r.metrics.downtime.WithLabelValues(key[0], key[1], string(o.Cause)).Add(o.Duration.Seconds()) })
	}
	if len(cvm.Status.Outages) > 0 {
		ok, reason, msg := outage.Condition(cvm.Status.Outages, cvm.Spec.ErrorBudget.ObjectivePercent(), clock)
		if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionDowntimeWithinBudget); !ok && (c == nil || c.Status == metav1.ConditionTrue) {
			st.event(cvm, corev1.EventTypeWarning, reason, msg)
		}
		setCondition(cvm, isov1.ConditionDowntimeWithinBudget, ok, reason, msg)
	}
}

// phaseTime is when the VMI last entered phase, as KubeVirt recorded it, or def.
func phaseTime(vmi *kubevirtv1.VirtualMachineInstance, phase kubevirtv1.VirtualMachineInstancePhase, def time.Time) time.Time {
	t := time.Time{}
	for _, p := range vmi.Status.PhaseTransitionTimestamps {
		if p.Phase == phase && p.PhaseTransitionTimestamp.After(t) {
			t = p.PhaseTransitionTimestamp.Time
		}
	}
	if t.IsZero() || t.After(def) {
		return def
	}
	return t
}
