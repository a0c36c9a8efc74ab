package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/outage"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/placer"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/render"
)

// A crawler that is down: its outages, counted in its budget, and its reservation, held
// by what runs.

// trackOutage records the crawler's outages (status.outages, package outage) from its
// Ready condition as the reconcile found it and as it is now: one begins when a crawler that ran
// stops running, with its cause and the time KubeVirt or the node says it stopped, and
// ends when it runs again, at the time its VMI reported Running. The Events and counts
// happen once the status that records them is written. DowntimeWithinBudget says what the
// outages of the last 30 days spent of the error budget.
func (r *CrawlerVMReconciler) trackOutage(s *scope) {
	cvm, st := s.cvm, s.statusWriter
	var vmi *kubevirtv1.VirtualMachineInstance
	var node move.NodeState
	if w := s.w; w != nil {
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

// Capacity is held by what runs. A crawler that a person stopped (virtctl stop), or whose
// launcher pod the API server refuses (its namespace's ResourceQuota, a policy), gives up
// its reservation once it has been down so for releaseAfter (readiness.Release): its VM's
// template is pinned to no node (render.Parked), a refused VMI is replaced by one of that
// template, and the reservation leaves status and the ledger. It is placed again, by the
// model and where a node still fits it, once a launcher of it exists (whileReleased):
// virtctl start, or the quota raised, lets KubeVirt create one, which waits unscheduled
// until isochron has placed the crawler and restarted the VMI on its node.

// releaseIdle releases the reservation of a crawler down for releaseAfter because it was
// stopped or its launcher is refused. It looks again when the wait ends.
func (r *CrawlerVMReconciler) releaseIdle(ctx context.Context, s *scope) (ctrl.Result, error) {
	cvm, w := s.cvm, s.w
	if s.running != nil || cvm.Status.Move != nil || cvm.Status.Placement == nil || w == nil || w.VM == nil {
		return ctrl.Result{}, nil
	}
	ready := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionReady)
	since := readiness.DownSince(ready, cvm.Status.Outages, w.VMI)
	release, wait := readiness.Release(ready, since, r.clock.Now(), r.releaseAfter)
	if !release {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	node := cvm.Status.Placement.Node
	why := fmt.Sprintf("down since %s (%s: %s)", since.UTC().Format(time.RFC3339), ready.Reason, ready.Message)
	// The template first: a VMI started after the release must not run on the node it
	// no longer holds.
	if !render.Parked(&w.VM.Spec.Template.Spec) {
		patch, err := render.AffinityPatch("")
		if err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Patch(ctx, w.VM, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return ctrl.Result{}, fmt.Errorf("pinning VM %s to no node: %w", w.VM.Name, err)
		}
	}
	if vmi := w.VMI; vmi != nil && vmi.DeletionTimestamp.IsZero() && !render.Parked(&vmi.Spec) {
		// KubeVirt keeps trying to create the refused launcher, pinned to the node: the
		// VMI it starts instead is of the parked template.
		if err := r.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("replacing VMI %s by one pinned to no node: %w", vmi.Name, err)
		}
	}
	msg := fmt.Sprintf("the reservation on node %s was released: the crawler was %s for longer than %s; it is placed again, where a node still fits it, once a launcher of it exists (virtctl start, or what refused it admits it)",
		node, why, format.Duration(r.releaseAfter))
	_, _, err := r.reserve(ctx, s, placer.Request{Crawler: cvm}, func(placement.Decision) {
		cvm.Status.Placement = nil
		setCondition(cvm, isov1.ConditionPlaced, false, isov1.ReasonReleased, msg)
		apimeta.RemoveStatusCondition(&cvm.Status.Conditions, isov1.ConditionAtRisk) // it holds no node
		s.event(cvm, corev1.EventTypeNormal, isov1.ReasonReleased, capitalise(msg))
	})
	return ctrl.Result{}, err
}

// whileReleased decides for a crawler whose reservation was released whether it asks
// for one again: a launcher pod of its VM's VMI exists (KubeVirt started it, and the API
// server admitted its pod), or it has no VM. Otherwise its Ready condition says what keeps
// it down, and the reconcile is done.
func (r *CrawlerVMReconciler) whileReleased(ctx context.Context, s *scope) (place bool, err error) {
	cvm := s.cvm
	w, err := s.world(ctx)
	if err != nil {
		return false, err
	}
	if w.VM == nil {
		return true, nil
	}
	vmi, _ := readiness.VMIOf(w.VM, w.VMI, cvm.UID)
	if launched(vmi, w.Launchers) {
		return true, nil
	}
	if err := r.replaceUnparked(ctx, w); err != nil {
		return false, err
	}
	scope := w.Scope
	scope.VMI = vmi
	v := readiness.Judge(scope)
	v.Stuck = true
	v.Message += "; the crawler holds no reservation (Placed=False, Released) until a launcher of it exists"
	r.setReady(s, v)
	return false, nil
}

// replaceUnparked replaces a VMI that is still pinned to a node while the crawler holds
// none and no launcher of it exists: KubeVirt may start the VMI that replaces the one the
// release deleted from its copy of the VM before the parked template reached it (its
// cache is behind), and that VMI would launch on the node released. Done again at each
// reconcile until KubeVirt starts one of the parked template.
func (r *CrawlerVMReconciler) replaceUnparked(ctx context.Context, w *world) error {
	vmi := w.VMI
	if vmi == nil || !vmi.DeletionTimestamp.IsZero() || render.Parked(&vmi.Spec) || !render.Parked(&w.VM.Spec.Template.Spec) {
		return nil
	}
	if err := r.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("replacing VMI %s, pinned to a node the crawler released, by one pinned to no node: %w", vmi.Name, err)
	}
	return nil
}

// launched says whether a launcher pod of vmi exists and is not going.
func launched(vmi *kubevirtv1.VirtualMachineInstance, pods []corev1.Pod) bool {
	if vmi == nil || !vmi.DeletionTimestamp.IsZero() || vmi.IsFinal() {
		return false
	}
	for _, p := range pods {
		if p.Labels[kubevirtv1.CreatedByLabel] == string(vmi.UID) && p.DeletionTimestamp.IsZero() {
			return true
		}
	}
	return false
}

// replaceParked restarts a VMI started while the crawler held no reservation, once it
// holds one again: its launcher waits, unscheduled, on an affinity no node matches, and
// KubeVirt starts the next VMI from the template, now pinned to the crawler's node. It
// reports whether it did.
func (r *CrawlerVMReconciler) replaceParked(ctx context.Context, s *scope, vmi *kubevirtv1.VirtualMachineInstance, node string) (bool, error) {
	cvm := s.cvm
	if vmi == nil || !vmi.DeletionTimestamp.IsZero() || !render.Parked(&vmi.Spec) {
		return false, nil
	}
	if err := r.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); client.IgnoreNotFound(err) != nil {
		return false, fmt.Errorf("restarting VMI %s on node %s: %w", vmi.Name, node, err)
	}
	msg := fmt.Sprintf("VMI %s was started while the crawler held no reservation; it starts again on node %s, where the crawler is placed now", vmi.Name, node)
	s.event(cvm, corev1.EventTypeNormal, isov1.ReasonVMIReplacing, msg)
	r.setReady(s, readiness.Progress(isov1.ReasonVMIReplacing, msg))
	return true, nil
}
