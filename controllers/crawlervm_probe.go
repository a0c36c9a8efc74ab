package controllers

import (
	"context"
	"fmt"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/slo"
)

// runProbes keeps the crawler's probe Jobs: it records the result of the probe Job that
// status.activeProbe records (and of no other Job) when it finishes, cancels a probe of
// an outdated spec or VMI, starts the probe that is due, deletes finished probe Jobs
// beyond slo.KeepFinished, and sets SLOConfirmed. running is the crawler's VMI when it
// runs the current spec, else nil. It returns when to look again.
func (r *CrawlerVMReconciler) runProbes(ctx context.Context, cvm *isov1.CrawlerVM, w *statusWriter, running *kubevirtv1.VirtualMachineInstance) (time.Duration, error) {
	jobs := &batchv1.JobList{}
	if err := r.List(ctx, jobs, client.InNamespace(cvm.Namespace), client.MatchingLabels(slo.Selector(cvm))); err != nil {
		return 0, fmt.Errorf("listing probe Jobs: %w", err)
	}
	if err := r.pruneProbes(ctx, cvm, jobs.Items); err != nil {
		return 0, err
	}
	now := r.clock.Now()
	recorded := cvm.Status.ActiveProbe.DeepCopy()
	var after time.Duration
	active, err := r.activeProbe(ctx, cvm, w, jobs.Items, running)
	if err != nil {
		return 0, err
	}
	// After activeProbe: a probe it recorded is status.lastProbe now.
	st := slo.State{Now: now, Last: cvm.Status.LastProbe, Requested: slo.Requested(cvm)}
	if running != nil {
		st.VMIUID, st.Node, st.Migration = string(running.UID), running.Status.NodeName, slo.PlacedBy(running)
	}
	if active != nil {
		run, _ := slo.RunOf(active)
		cancelled := cvm.Status.ActiveProbe.CancelTime != nil
		st.Active = &slo.Active{Name: active.Name, Run: run, Deleting: cancelled || !active.DeletionTimestamp.IsZero()}
		if _, wait := slo.CancelWaitOver(cvm.Status.ActiveProbe, now); wait > 0 {
			after = wait // the deletion may never be reported: look again when the wait ends
		}
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
		// Foreground: the Job stays (and counts as active) until its pod is gone, so
		// the next probe never overlaps it, for at most slo.CancelWait.
		if err := r.Delete(ctx, active, client.PropagationPolicy(metav1.DeletePropagationForeground), client.Preconditions{UID: &active.UID}); client.IgnoreNotFound(err) != nil {
			return 0, fmt.Errorf("cancelling probe Job %s: %w", active.Name, err)
		}
		cvm.Status.ActiveProbe.CancelTime = &metav1.Time{Time: now.UTC().Truncate(time.Second)}
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.EventReasonProbeCancelled, "Cancelled probe Job %s: it measured spec generation %d of VMI %s, which no longer runs", active.Name, st.Active.Run.Generation, st.Active.Run.VMIUID)
		r.metrics.probeRuns.WithLabelValues(probeResultCancelled).Inc()
		st.Active.Deleting = true
		after = slo.CancelWait
	case d.Start != nil:
		name, wait, err := r.startProbe(ctx, cvm, w, *d.Start, running)
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
	if d.After > 0 && (after == 0 || d.After < after) {
		after = d.After
	}
	if uidOf(recorded) != uidOf(cvm.Status.ActiveProbe) {
		if cvm.Status.ActiveProbe != nil && cvm.Status.ActiveProbe.CancelTime == nil {
			// A probe created: recorded before anything else is done.
			if err := w.persist(ctx, cvm); err != nil {
				return 0, err
			}
		}
		// The probe Service selects the pods of the probe recorded now (slo.ServiceSelector).
		if _, err := r.ensureProbeService(ctx, cvm, true); err != nil {
			return 0, err
		}
	}
	return after, nil
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
func (r *CrawlerVMReconciler) activeProbe(ctx context.Context, cvm *isov1.CrawlerVM, w *statusWriter, jobs []batchv1.Job, running *kubevirtv1.VirtualMachineInstance) (*batchv1.Job, error) {
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
		if err := r.record(ctx, cvm, w, job, running); err != nil {
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
func (r *CrawlerVMReconciler) record(ctx context.Context, cvm *isov1.CrawlerVM, w *statusWriter, job *batchv1.Job, running *kubevirtv1.VirtualMachineInstance) error {
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(cvm.Namespace), client.MatchingLabels{batchv1.ControllerUidLabel: string(job.UID)}); err != nil {
		return fmt.Errorf("reading the pod of probe Job %s: %w", job.Name, err)
	}
	trusted, ignored := slo.ProbePods(pods.Items, job)
	res := slo.Outcome(cvm, job, slo.TerminationMessage(trusted), ignored, r.clock.Now())
	if err := r.calibrate(ctx, cvm, &res, running); err != nil {
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

// startProbe creates the Job of run and records it in status.activeProbe. It starts nothing from a copy of the
// crawler older than the API server's (the cache may not show the probe a previous
// reconcile recorded); it returns the Job's name, or "" and when to look again when it
// waits.
func (r *CrawlerVMReconciler) startProbe(ctx context.Context, cvm *isov1.CrawlerVM, w *statusWriter, run slo.Run, vmi *kubevirtv1.VirtualMachineInstance) (string, time.Duration, error) {
	live := &isov1.CrawlerVM{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cvm), live); err != nil {
		return "", 0, fmt.Errorf("reading CrawlerVM %s: %w", cvm.Name, err)
	}
	if live.ResourceVersion != cvm.ResourceVersion {
		return "", 0, nil // the cache brings the newer copy, and the reconcile with it
	}
	target, err := r.probeTarget(ctx, cvm, vmi)
	if err != nil {
		return "", 0, err
	}
	job := slo.Job(cvm, run, target, r.probes)
	if err := r.Create(ctx, job); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return "", 0, fmt.Errorf("creating probe Job %s: %w", job.Name, err)
		}
		// A Job of the run's name that the crawler does not record: one isochron created
		// whose record was lost (a status write that lost a conflict), or one someone made
		// under a name they could not know. Neither is believed; it is deleted, and the
		// run is created afresh once it is gone.
		return "", probeNameRetry, r.deleteUnrecorded(ctx, cvm, job.Name)
	}
	// Recorded in status, which runProbes writes at once: a write that fails leaves the
	// Job unrecorded, and the next try finds its name taken.
	cvm.Status.ActiveProbe = &isov1.ActiveProbe{Job: job.Name, UID: string(job.UID)}
	what := "the interval error at the probe gateway"
	if target.IP != "" {
		what += " and round trips to the RT-NIC at " + target.IP
	}
	w.event(cvm, corev1.EventTypeNormal, isov1.EventReasonProbeStarted, fmt.Sprintf("Started probe Job %s (%s): measures %s for %s", job.Name, run.Trigger, what, format.Duration(slo.ProbeDuration(cvm))))
	return job.Name, 0, nil
}

// probeNameRetry is when startProbe looks again after deleting a Job that held a run's
// name.
const probeNameRetry = 5 * time.Second

// deleteUnrecorded deletes the Job named name unless it is the one the crawler records.
func (r *CrawlerVMReconciler) deleteUnrecorded(ctx context.Context, cvm *isov1.CrawlerVM, name string) error {
	job, err := getOrNil(ctx, r.APIReader, client.ObjectKey{Namespace: cvm.Namespace, Name: name}, &batchv1.Job{})
	if err != nil || job == nil || !job.DeletionTimestamp.IsZero() {
		return err
	}
	if a := cvm.Status.ActiveProbe; a != nil && a.UID == string(job.UID) {
		return nil
	}
	if err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &job.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting Job %s, which holds a probe's name unrecorded: %w", name, err)
	}
	r.Recorder.Eventf(cvm, corev1.EventTypeWarning, isov1.EventReasonProbeCancelled, "Deleted Job %s: it holds the name of the crawler's next probe and is not the probe isochron recorded", name)
	return nil
}

// pruneProbes deletes the crawler's finished probe Jobs beyond slo.KeepFinished, with
// their pods.
func (r *CrawlerVMReconciler) pruneProbes(ctx context.Context, cvm *isov1.CrawlerVM, jobs []batchv1.Job) error {
	for _, j := range slo.Prune(jobs, cvm, r.probes.NameKey, cvm.Status.ActiveProbe) {
		if err := r.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &j.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting finished probe Job %s: %w", j.Name, err)
		}
	}
	return nil
}

// probeTarget is the RT-NIC's network and the VM's address on it, as the VMI reports it.
func (r *CrawlerVMReconciler) probeTarget(ctx context.Context, cvm *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance) (slo.Target, error) {
	if cvm.Spec.RTNIC == nil {
		return slo.Target{}, nil
	}
	key := render.NetworkKey(cvm)
	nad := &nadv1.NetworkAttachmentDefinition{}
	if err := r.Get(ctx, key, nad); err != nil {
		return slo.Target{}, fmt.Errorf("reading NetworkAttachmentDefinition %s: %w", key, err)
	}
	t := slo.Target{Network: slo.NetworkRefOf(key.Namespace, key.Name, nad.Annotations)}
	for _, ifc := range vmi.Status.Interfaces {
		if ifc.Name == render.NetworkRT && ifc.IP != "" {
			t.IP = ifc.IP
		}
	}
	return t, nil
}

// ensureProbeService applies the crawler's probe gateway Service when it is missing or
// differs from what isochron wants, and returns its cluster IP ("" for a Service of that
// name that isochron does not own). Its selector follows status.activeProbe when
// follow is set (runProbes, which has just decided the probe); otherwise the Job it
// selects stays as it is, so that a reconcile from a copy of the crawler older than the
// probe's record does not point the Service back at a finished probe.
func (r *CrawlerVMReconciler) ensureProbeService(ctx context.Context, cvm *isov1.CrawlerVM, follow bool) (string, error) {
	want := slo.Service(cvm)
	// From the API server when the cache has none (getOwned): a Service of that name
	// without isochron's label is not in the cache, and is not isochron's to apply over.
	have, err := getOwned(ctx, r.Client, r.APIReader, client.ObjectKeyFromObject(want), &corev1.Service{})
	switch {
	case err == nil && have != nil:
		if !metav1.IsControlledBy(have, cvm) {
			return "", nil // not ours: the condition below would not help; startProbe still works
		}
		if !follow {
			delete(want.Spec.Selector, batchv1.ControllerUidLabel)
			if uid, ok := have.Spec.Selector[batchv1.ControllerUidLabel]; ok {
				want.Spec.Selector[batchv1.ControllerUidLabel] = uid
			}
		}
		if equality.Semantic.DeepEqual(have.Spec.Selector, want.Spec.Selector) && portsMatch(have.Spec.Ports, want.Spec.Ports) {
			return have.Spec.ClusterIP, nil
		}
	case err != nil:
		return "", fmt.Errorf("reading probe Service %s: %w", want.Name, err)
	}
	u, err := render.Unstructured(want)
	if err != nil {
		return "", err
	}
	if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return "", fmt.Errorf("applying probe Service %s: %w", want.Name, err)
	}
	ip, _, _ := unstructured.NestedString(u.Object, "spec", "clusterIP")
	return ip, nil
}

func portsMatch(have, want []corev1.ServicePort) bool {
	if len(have) != len(want) {
		return false
	}
	for i := range want {
		if have[i].Name != want[i].Name || have[i].Port != want[i].Port || have[i].TargetPort != want[i].TargetPort || have[i].Protocol != want[i].Protocol {
			return false
		}
	}
	return true
}
