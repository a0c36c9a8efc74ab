package controllers

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/slo"
)

// The objects of a crawler's probes: its Jobs and its gateway Service.

// startProbe creates the Job of run and records it in status.activeProbe. It starts nothing from a copy of the
// crawler older than the API server's (the cache may not show the probe a previous
// reconcile recorded); it returns the Job's name, or "" and when to look again when it
// waits.
func (r *CrawlerVMReconciler) startProbe(ctx context.Context, s *scope, run slo.Run, vmi *kubevirtv1.VirtualMachineInstance) (string, time.Duration, error) {
	cvm, w := s.cvm, s.statusWriter
	live := &isov1.CrawlerVM{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cvm), live); err != nil {
		return "", 0, fmt.Errorf("reading CrawlerVM %s: %w", cvm.Name, err)
	}
	if live.ResourceVersion != cvm.ResourceVersion {
		return "", 0, nil // the cache brings the newer copy, and the reconcile with it
	}
	target, err := probeTarget(ctx, s, vmi)
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
func probeTarget(ctx context.Context, s *scope, vmi *kubevirtv1.VirtualMachineInstance) (slo.Target, error) {
	if s.cvm.Spec.RTNIC == nil {
		return slo.Target{}, nil
	}
	key := render.NetworkKey(s.cvm)
	nad, err := s.network(ctx)
	if err != nil {
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
