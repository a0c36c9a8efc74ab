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

// batchv1.JobNameLabel is the label the Job controller puts on a Job's pods.

// runProbes keeps the crawler's probe gateway Service, records the result of a probe
// Job that finished, cancels a probe of an outdated spec or VMI, starts the probe that
// is due, and sets SLOConfirmed. running is the crawler's VMI when it runs the current
// spec, else nil. It returns when to look again for the next scheduled probe.
func (r *CrawlerVMReconciler) runProbes(ctx context.Context, cvm *isov1.CrawlerVM, w *statusWriter, running *kubevirtv1.VirtualMachineInstance) (time.Duration, error) {
	jobs := &batchv1.JobList{}
	if err := r.List(ctx, jobs, client.InNamespace(cvm.Namespace), client.MatchingLabels(slo.Selector(cvm))); err != nil {
		return 0, fmt.Errorf("listing probe Jobs: %w", err)
	}
	active, unrecorded := slo.Sort(jobs.Items, cvm, cvm.Status.LastProbe)
	if unrecorded != nil {
		if err := r.record(ctx, cvm, w, unrecorded, running); err != nil {
			return 0, err
		}
	}
	st := slo.State{Now: r.clock.Now(), Last: cvm.Status.LastProbe}
	if running != nil {
		st.VMIUID, st.Node = string(running.UID), running.Status.NodeName
	}
	if len(active) > 0 {
		a := active[0]
		run, _ := slo.RunOf(a)
		st.Active = &slo.Active{Name: a.Name, Run: run, Deleting: !a.DeletionTimestamp.IsZero()}
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
		a := active[0]
		// Foreground: the Job stays (and counts as active) until its pod is gone, so
		// the next probe never overlaps it.
		if err := r.Delete(ctx, a, client.PropagationPolicy(metav1.DeletePropagationForeground), client.Preconditions{UID: &a.UID}); client.IgnoreNotFound(err) != nil {
			return 0, fmt.Errorf("cancelling probe Job %s: %w", a.Name, err)
		}
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.EventReasonProbeCancelled, "Cancelled probe Job %s: it measured spec generation %d of VMI %s, which no longer runs", a.Name, st.Active.Run.Generation, st.Active.Run.VMIUID)
		r.metrics.probeRuns.WithLabelValues(probeResultCancelled).Inc()
		st.Active.Deleting = true
	case d.Start != nil:
		name, err := r.startProbe(ctx, cvm, *d.Start, running)
		if err != nil {
			return 0, err
		}
		if name != "" {
			st.Active = &slo.Active{Name: name, Run: *d.Start}
		}
	}
	status, reason, msg := slo.Condition(cvm, st)
	setConditionStatus(cvm, isov1.ConditionSLOConfirmed, status, reason, msg)
	return d.After, nil
}

// record turns a finished probe Job into status.lastProbe, a calibration sample of the
// crawler's node (calibrate), an Event and a count, the last two once the status is
// written (w). A sample that cannot be written leaves the Job unrecorded, so the next
// reconcile records both.
func (r *CrawlerVMReconciler) record(ctx context.Context, cvm *isov1.CrawlerVM, w *statusWriter, newest *batchv1.Job, running *kubevirtv1.VirtualMachineInstance) error {
	// The Job finished after its pod did; read the pod from the API server, not from a
	// cache that may not have seen its final status yet.
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(cvm.Namespace), client.MatchingLabels{batchv1.JobNameLabel: newest.Name}); err != nil {
		return fmt.Errorf("reading the pod of probe Job %s: %w", newest.Name, err)
	}
	res := slo.Outcome(cvm, newest, slo.TerminationMessage(pods.Items), r.clock.Now())
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
	w.event(cvm, kind, res.Verdict.EventReason(), fmt.Sprintf("Probe Job %s: %s", newest.Name, res.Message))
	return nil
}

// startProbe creates the Job of run unless a probe Job of the crawler still exists on
// the API server (the cache may lag a Job just created); it returns the Job's name, or
// "" when it waits.
func (r *CrawlerVMReconciler) startProbe(ctx context.Context, cvm *isov1.CrawlerVM, run slo.Run, vmi *kubevirtv1.VirtualMachineInstance) (string, error) {
	existing := &batchv1.JobList{}
	if err := r.APIReader.List(ctx, existing, client.InNamespace(cvm.Namespace), client.MatchingLabels(slo.Selector(cvm))); err != nil {
		return "", fmt.Errorf("listing probe Jobs: %w", err)
	}
	if active, _ := slo.Sort(existing.Items, cvm, nil); len(active) > 0 {
		return "", nil
	}
	target, err := r.probeTarget(ctx, cvm, vmi)
	if err != nil {
		return "", err
	}
	job := slo.Job(cvm, run, target, r.probes)
	if err := r.Create(ctx, job); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return "", nil // a run is never repeated under its name; it is recorded or running
		}
		return "", fmt.Errorf("creating probe Job %s: %w", job.Name, err)
	}
	what := "the interval error at the probe gateway"
	if target.IP != "" {
		what += " and round trips to the RT-NIC at " + target.IP
	}
	r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.EventReasonProbeStarted, "Started probe Job %s (%s): measures %s for %s", job.Name, run.Trigger, what, format.Duration(slo.ProbeDuration(cvm)))
	return job.Name, nil
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
// name that isochron does not own).
func (r *CrawlerVMReconciler) ensureProbeService(ctx context.Context, cvm *isov1.CrawlerVM) (string, error) {
	want := slo.Service(cvm)
	// From the API server when the cache has none (getOwned): a Service of that name
	// without isochron's label is not in the cache, and is not isochron's to apply over.
	have, err := getOwned(ctx, r.Client, r.APIReader, client.ObjectKeyFromObject(want), &corev1.Service{})
	switch {
	case err == nil && have != nil:
		if !metav1.IsControlledBy(have, cvm) {
			return "", nil // not ours: the condition below would not help; startProbe still works
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
	if err := r.Patch(ctx, u, client.Apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
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
