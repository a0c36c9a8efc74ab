package controllers

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/slo"
)

// serveProbes applies the crawler's probe gateway Service before its VM is written, so
// that a new VMI's agent is told its address. A Service that cannot be had (its IP range
// full) does not hold the VMI back: its agent then finds the gateway by name, and runVM
// returns the error once the VM is written, which retries the Service.
func (r *CrawlerVMReconciler) serveProbes(ctx context.Context, s *scope) (ctrl.Result, error) {
	s.gatewayIP, s.serviceErr = r.ensureProbeService(ctx, s.cvm, false)
	return ctrl.Result{}, nil
}

// probe keeps the crawler's probe Jobs (runProbes) while it runs the current spec and
// does not move: a moving crawler is measured again where it arrives.
func (r *CrawlerVMReconciler) probe(ctx context.Context, s *scope) (ctrl.Result, error) {
	steady := s.running
	if s.cvm.Status.Move != nil {
		steady = nil
	}
	after, err := r.runProbes(ctx, s, steady)
	return ctrl.Result{RequeueAfter: after}, err
}

// runProbes keeps the crawler's probe Jobs: it records the result of the probe Job that
// status.activeProbe records (and of no other Job) when it finishes, cancels a probe of
// an outdated spec or VMI, starts the probe that is due, deletes finished probe Jobs
// beyond slo.KeepFinished, and sets SLOConfirmed. running is the crawler's VMI when it
// runs the current spec, else nil. It returns when to look again. A probe it starts is
// recorded in status.activeProbe, written with the rest of the status.
func (r *CrawlerVMReconciler) runProbes(ctx context.Context, s *scope, running *kubevirtv1.VirtualMachineInstance) (time.Duration, error) {
	cvm := s.cvm
	recorded := cvm.Status.ActiveProbe.DeepCopy()
	st, active, after, err := r.probeState(ctx, s, running)
	if err != nil {
		return 0, err
	}
	d, err := slo.Next(cvm, st)
	if err != nil {
		if !apimeta.IsStatusConditionPresentAndEqual(cvm.Status.Conditions, isov1.ConditionSLOConfirmed, metav1.ConditionFalse) {
			r.Recorder.Event(cvm, corev1.EventTypeWarning, isov1.ReasonInvalidSchedule, err.Error())
		}
		setConditionStatus(cvm, isov1.ConditionSLOConfirmed, metav1.ConditionFalse, isov1.ReasonInvalidSchedule, err.Error())
		return 0, nil
	}
	switch {
	case d.Cancel:
		if err := r.cancelProbe(ctx, cvm, active, &st); err != nil {
			return 0, err
		}
		after = slo.CancelWait
	case d.Start != nil:
		name, wait, err := r.startProbe(ctx, s, *d.Start, running)
		if err != nil {
			return 0, err
		}
		if name != "" {
			st.Active = &slo.Active{Name: name, Run: *d.Start}
		}
		if wait > 0 {
			after = wait
		}
	}
	status, reason, msg := slo.Condition(cvm, st)
	setConditionStatus(cvm, isov1.ConditionSLOConfirmed, status, reason, msg)
	if uidOf(recorded) != uidOf(cvm.Status.ActiveProbe) {
		// The probe Service selects the pods of the probe recorded now (slo.ServiceSelector).
		if _, err := r.ensureProbeService(ctx, cvm, true); err != nil {
			return 0, err
		}
	}
	return sooner(after, d.After), nil
}

// probeState is what slo.Next decides the crawler's probes on: its probe Jobs read and
// pruned, the active one recorded when it has finished (activeProbe), the VMI that runs.
// It returns the active Job, and when to look again while a cancelled one is deleted.
func (r *CrawlerVMReconciler) probeState(ctx context.Context, s *scope, running *kubevirtv1.VirtualMachineInstance) (slo.State, *batchv1.Job, time.Duration, error) {
	cvm := s.cvm
	jobs := &batchv1.JobList{}
	if err := r.List(ctx, jobs, client.InNamespace(cvm.Namespace), client.MatchingLabels(slo.Selector(cvm))); err != nil {
		return slo.State{}, nil, 0, fmt.Errorf("listing probe Jobs: %w", err)
	}
	if err := r.pruneProbes(ctx, cvm, jobs.Items); err != nil {
		return slo.State{}, nil, 0, err
	}
	active, err := r.activeProbe(ctx, s, jobs.Items, running)
	if err != nil {
		return slo.State{}, nil, 0, err
	}
	// After activeProbe: a probe it recorded is status.lastProbe now.
	now := r.clock.Now()
	st := slo.State{Now: now, Last: cvm.Status.LastProbe, Requested: slo.Requested(cvm)}
	if running != nil {
		st.VMIUID, st.Node, st.Migration = string(running.UID), running.Status.NodeName, slo.PlacedBy(running)
	}
	var after time.Duration
	if active != nil {
		run, _ := slo.RunOf(active)
		cancelled := cvm.Status.ActiveProbe.CancelTime != nil
		st.Active = &slo.Active{Name: active.Name, Run: run, Deleting: cancelled || !active.DeletionTimestamp.IsZero()}
		if _, wait := slo.CancelWaitOver(cvm.Status.ActiveProbe, now); wait > 0 {
			after = wait // the deletion may never be reported: look again when the wait ends
		}
	}
	return st, active, after, nil
}

// cancelProbe deletes the active probe Job, which measures an outdated spec or VMI, in the
// foreground: the Job stays (and counts as active) until its pod is gone, so the next probe
// never overlaps it, for at most slo.CancelWait.
func (r *CrawlerVMReconciler) cancelProbe(ctx context.Context, cvm *isov1.CrawlerVM, active *batchv1.Job, st *slo.State) error {
	if err := r.Delete(ctx, active, client.PropagationPolicy(metav1.DeletePropagationForeground), client.Preconditions{UID: &active.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("cancelling probe Job %s: %w", active.Name, err)
	}
	cvm.Status.ActiveProbe.CancelTime = &metav1.Time{Time: r.clock.Now().UTC().Truncate(time.Second)}
	r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.EventReasonProbeCancelled, "Cancelled probe Job %s: it measured spec generation %d of VMI %s, which no longer runs", active.Name, st.Active.Run.Generation, st.Active.Run.VMIUID)
	r.metrics.probeRuns.WithLabelValues(probeResultCancelled).Inc()
	st.Active.Deleting = true
	return nil
}

func uidOf(a *isov1.ActiveProbe) string {
	if a == nil {
		return ""
	}
	return a.UID
}

// activeProbe is the probe Job status.activeProbe records, while it runs or is being
// cancelled: found by its UID among jobs (from the cache) or, for a Job the cache has
// not seen yet, on the API server. It records the Job's result when it has finished,
// and forgets a Job that is gone or that it stopped waiting for (slo.CancelWaitOver);
// it returns nil then, and when none is recorded.
func (r *CrawlerVMReconciler) activeProbe(ctx context.Context, s *scope, jobs []batchv1.Job, running *kubevirtv1.VirtualMachineInstance) (*batchv1.Job, error) {
	cvm, w := s.cvm, s.statusWriter
	a := cvm.Status.ActiveProbe
	if a == nil {
		return nil, nil
	}
	job := slo.Recorded(jobs, a)
	if job == nil {
		var err error
		if job, err = getOrNil(ctx, r.APIReader, client.ObjectKey{Namespace: cvm.Namespace, Name: a.Job}, &batchv1.Job{}); err != nil {
			return nil, fmt.Errorf("reading probe Job %s: %w", a.Job, err)
		}
		if job != nil && string(job.UID) != a.UID {
			job = nil // another Job of the same name: not the one isochron created
		}
	}
	if job == nil {
		cvm.Status.ActiveProbe = nil
		if a.CancelTime == nil {
			w.event(cvm, corev1.EventTypeWarning, isov1.EventReasonProbeFailed,
				fmt.Sprintf("Probe Job %s was deleted before it reported (not by isochron); nothing was judged, and the probe starts again", a.Job))
		}
		return nil, nil
	}
	if done, _, _, _ := slo.Finished(job); done && a.CancelTime == nil {
		if err := r.record(ctx, s, job, running); err != nil {
			return nil, err
		}
		cvm.Status.ActiveProbe = nil
		return nil, nil
	}
	if a.CancelTime == nil && !job.DeletionTimestamp.IsZero() {
		// Being deleted, and not recorded as cancelled (the write that recorded it was
		// lost, or someone else deletes it): its wait runs from its deletion.
		a.CancelTime = job.DeletionTimestamp.DeepCopy()
	}
	if over, _ := slo.CancelWaitOver(a, r.clock.Now()); over {
		cvm.Status.ActiveProbe = nil
		w.event(cvm, corev1.EventTypeWarning, isov1.EventReasonProbeAbandoned,
			fmt.Sprintf("Probe Job %s, cancelled at %s, is still being deleted after %s (its pod's node does not report it gone): the next probe no longer waits for it; the Job goes when its pod does",
				job.Name, a.CancelTime.UTC().Format(time.RFC3339), format.Duration(slo.CancelWait)))
		return nil, nil
	}
	return job, nil
}

// record turns a finished probe Job into status.lastProbe, a calibration sample of the
// crawler's node (calibrate), an Event and a count, the last two once the status is
// written (w). A sample that cannot be written leaves the Job unrecorded, so the next
// reconcile records both. Only the pods that job controls and that run its template are
// read (slo.ProbePods), from the API server: the Job finished after its pod did, and a
// cache may not have seen the pod's final status yet.
func (r *CrawlerVMReconciler) record(ctx context.Context, s *scope, job *batchv1.Job, running *kubevirtv1.VirtualMachineInstance) error {
	cvm, w := s.cvm, s.statusWriter
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(cvm.Namespace), client.MatchingLabels{batchv1.ControllerUidLabel: string(job.UID)}); err != nil {
		return fmt.Errorf("reading the pod of probe Job %s: %w", job.Name, err)
	}
	trusted, ignored := slo.ProbePods(pods.Items, job)
	res := slo.Outcome(cvm, job, slo.TerminationMessage(trusted), ignored, r.clock.Now())
	if err := r.calibrate(ctx, s, &res, running); err != nil {
		return err
	}
	cvm.Status.LastProbe = &res
	if res.Verdict == isov1.VerdictRefuted && res.Node != "" {
		ref := isov1.Refutation{Node: res.Node, Job: res.Job, Time: *res.CompletionTime}
		if res.IntervalError != nil {
			ref.IntervalError = &metav1.Duration{Duration: res.IntervalError.AtObjective.Duration}
		}
		cvm.Status.RefutedOn = move.Remember(cvm.Status.RefutedOn, ref, r.clock.Now(), r.refutedMemory)
	}
	w.after(func() { r.metrics.probeRuns.WithLabelValues(string(res.Verdict)).Inc() })
	kind := corev1.EventTypeWarning
	if res.Verdict == isov1.VerdictConfirmed {
		kind = corev1.EventTypeNormal
	}
	w.event(cvm, kind, res.Verdict.EventReason(), fmt.Sprintf("Probe Job %s: %s", job.Name, res.Message))
	if n := res.ForeignRequests; n > 0 {
		w.event(cvm, corev1.EventTypeWarning, isov1.EventReasonProbeForeignTraffic,
			fmt.Sprintf("Probe Job %s: %d requests without the crawler's probe credential reached its gateway; none was counted", job.Name, n))
	}
	return nil
}
