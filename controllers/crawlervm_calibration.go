package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/calibration"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/inventory"
)

// +kubebuilder:rbac:groups=isochron.io,resources=nodecalibrations,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=isochron.io,resources=nodecalibrations/status,verbs=update
// +kubebuilder:rbac:groups=isochron.io,resources=contentionprofiles/status,verbs=update

// calibrate records res, a probe result of the crawler, as a sample of its node's
// calibration (the NodeCalibration of the node) and of its class's (the status of the
// node's ContentionProfile), when it says something of the model: a Confirmed or Refuted
// verdict with a measured interval error, of the VMI that runs now on the node the
// crawler holds. An inconclusive, failed or timed-out probe, or one of a VMI that no
// longer runs, does not count. It returns an error only when the sample could not be
// written; the caller then records the result later, and the sample with it.
func (r *CrawlerVMReconciler) calibrate(ctx context.Context, s *scope, res *isov1.ProbeResult, running *kubevirtv1.VirtualMachineInstance) error {
	cvm := s.cvm
	if (res.Verdict != isov1.VerdictConfirmed && res.Verdict != isov1.VerdictRefuted) || res.IntervalError == nil ||
		running == nil || string(running.UID) != res.VMIUID || cvm.Status.Placement == nil {
		return nil
	}
	node := cvm.Status.Placement.Node
	n, err := s.node(ctx, node)
	if err != nil {
		return err
	}
	key := s.key()
	pred, ok, err := r.placer.Predict(ctx, n, key)
	if err != nil || !ok {
		return err // !ok: the node is gone
	}
	// The model's own prediction for what the node holds now: the ratio is to the model,
	// not to the correction already applied, so that corrections do not compound.
	predicted := pred.Uncorrected.Round(time.Microsecond)
	measured := res.IntervalError.AtObjective.Duration
	sample := calibration.Sample{
		Job: res.Job, Crawler: key, At: r.clock.Now(), Measured: measured, Predicted: predicted,
		Ratio: calibration.Ratio(measured, predicted, cvm.Spec.ErrorBudget.Tolerance.Duration),
	}
	cal, err := r.recordSample(ctx, node, pred.Profile, sample)
	if err != nil || cal == nil {
		return err
	}
	profile := pred.Profile
	if profile != nil {
		if profile, err = r.updateClass(ctx, profile.Name); err != nil {
			return err
		}
	}
	after := inventory.Correction(profile, cal)
	r.metrics.calibrationSamples.WithLabelValues(string(res.Verdict)).Inc()
	if after.Correction != pred.Correction {
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.EventReasonRecalibrated,
			"Probe Job %s measured %s against the model's %s on node %s (ratio %s): the node's correction is now %s, %s; was %s",
			res.Job, format.Duration(measured), format.Duration(predicted), node, calibration.Format(sample.Ratio),
			calibration.Format(after.Correction), after, calibration.Format(pred.Correction))
	}
	return nil
}

// recordSample adds s to the node's NodeCalibration, creating it (owned by the Node, so
// that it goes with it) when it is missing. It reads and writes the API server with
// optimistic locking, so that two crawlers' probes on one node never lose a sample.
func (r *CrawlerVMReconciler) recordSample(ctx context.Context, node string, profile *isov1.ContentionProfile, s calibration.Sample) (*isov1.NodeCalibration, error) {
	var out *isov1.NodeCalibration
	conflict := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	err := retry.OnError(retry.DefaultRetry, conflict, func() error {
		cal := &isov1.NodeCalibration{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Name: node}, cal)
		switch {
		case apierrors.IsNotFound(err):
			n := &corev1.Node{}
			if err := r.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
				return client.IgnoreNotFound(err) // the node is gone: nothing to calibrate
			}
			cal = &isov1.NodeCalibration{ObjectMeta: metav1.ObjectMeta{
				Name:            node,
				Labels:          map[string]string{isov1.LabelManagedBy: isov1.ManagedBy},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}},
			}}
			if err := r.Create(ctx, cal); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		out = cal
		if !inventory.Record(cal, profile, s) {
			return nil // sampled already
		}
		return r.Status().Update(ctx, cal)
	})
	if err != nil {
		return nil, fmt.Errorf("recording probe Job %s in the calibration of node %s: %w", s.Job, node, err)
	}
	return out, nil
}

// updateClass recomputes the class calibration in the named profile's status from every
// NodeCalibration, as the API server holds them, and returns the profile.
func (r *CrawlerVMReconciler) updateClass(ctx context.Context, name string) (*isov1.ContentionProfile, error) {
	var out *isov1.ContentionProfile
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &isov1.ContentionProfile{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
			return client.IgnoreNotFound(err)
		}
		cals := &isov1.NodeCalibrationList{}
		if err := r.APIReader.List(ctx, cals); err != nil {
			return err
		}
		out = p
		st := inventory.ClassStatus(p, cals.Items, r.clock.Now())
		if equality.Semantic.DeepEqual(p.Status, st) {
			return nil
		}
		p.Status = st
		return r.Status().Update(ctx, p)
	})
	if err != nil {
		return nil, fmt.Errorf("updating the class calibration of ContentionProfile %s: %w", name, err)
	}
	return out, nil
}
