package inventory

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/calibration"
)

// ProfileOf names a node's profile and its generation ("", 0 for the built-in defaults):
// what a calibration sample's prediction was made with.
func ProfileOf(p *isov1.ContentionProfile) (string, int64) {
	if p == nil {
		return "", 0
	}
	return p.Name, p.Generation
}

// Samples are a NodeCalibration's samples of profile (name, generation), for package
// calibration; none when it holds another profile's or generation's.
func Samples(cal *isov1.NodeCalibration, profile string, generation int64) []calibration.Sample {
	if cal == nil || cal.Status.Profile != profile || cal.Status.ProfileGeneration != generation {
		return nil
	}
	out := make([]calibration.Sample, 0, len(cal.Status.Samples))
	for _, s := range cal.Status.Samples {
		ratio, ok := s.Ratio.Float64()
		if !ok || !(ratio > 0) {
			continue // the schema refuses it; never divide by it
		}
		out = append(out, calibration.Sample{
			Job: s.Job, Crawler: s.Crawler, At: s.Time.Time,
			Measured: s.Measured.Duration, Predicted: s.Predicted.Duration, Ratio: ratio,
		})
	}
	return out
}

// Correction is the correction a node's predictions get (calibration.Apply): from its
// NodeCalibration's samples when they are of the node's current profile and generation
// and from enough namespaces, else the profile's class correction when it is of the
// profile's current generation.
func Correction(profile *isov1.ContentionProfile, cal *isov1.NodeCalibration) calibration.Applied {
	name, gen := ProfileOf(profile)
	return calibration.Apply(calibration.Of(Samples(cal, name, gen)), classEstimate(profile))
}

// classEstimate is the class correction that profile's status holds, when it is of the
// profile's current generation and rests on enough namespaces (a status written by the
// rule of an earlier release, without namespaces, is not applied).
func classEstimate(profile *isov1.ContentionProfile) calibration.Estimate {
	e := calibration.Estimate{Correction: 1}
	if profile == nil || profile.Status.ObservedGeneration != profile.Generation {
		return e
	}
	e.Namespaces = int(ptr.Deref(profile.Status.Namespaces, 0))
	e.Samples = int(ptr.Deref(profile.Status.Samples, 0))
	if k, ok := profile.Status.Correction.Float64(); ok && k > 0 && e.Namespaces >= calibration.MinNamespaces {
		e.Correction, e.OK = k, true
	}
	return e
}

// Record adds s, a sample taken with profile's parameters, to cal's status, and keeps
// what calibration.Keep keeps. Samples of another profile or generation are dropped:
// their predictions were of another model. It returns false, and leaves cal alone, when
// s's Job is sampled already.
func Record(cal *isov1.NodeCalibration, profile *isov1.ContentionProfile, s calibration.Sample) bool {
	name, gen := ProfileOf(profile)
	samples, added := calibration.Add(Samples(cal, name, gen), s)
	if !added {
		return false
	}
	e := calibration.Of(samples)
	st := isov1.NodeCalibrationStatus{
		Profile: name, ProfileGeneration: gen,
		Samples:    make([]isov1.CalibrationSample, 0, len(samples)),
		Namespaces: ptr.To(int32(e.Namespaces)),
		Conditions: cal.Status.Conditions,
	}
	for _, x := range samples {
		st.Samples = append(st.Samples, isov1.CalibrationSample{
			Job: x.Job, Crawler: x.Crawler, Time: metav1.Time{Time: x.At.UTC().Truncate(time.Second)},
			Measured:  metav1.Duration{Duration: x.Measured},
			Predicted: metav1.Duration{Duration: x.Predicted},
			Ratio:     isov1.Decimal(calibration.Format(x.Ratio)),
		})
	}
	if e.OK {
		st.Correction = isov1.Decimal(calibration.Format(e.Correction))
	}
	c := calibrated(e, s.At, "the node's own correction", "the node takes its class's correction, if its profile has one")
	meta.SetStatusCondition(&st.Conditions, c)
	cal.Status = st
	return true
}

// ClassStatus is profile's class calibration from the NodeCalibrations of the cluster:
// the pooled samples of those taken with the profile's current generation. now is when
// a change of the Calibrated condition is recorded to have happened.
func ClassStatus(profile *isov1.ContentionProfile, cals []isov1.NodeCalibration, now time.Time) isov1.ContentionProfileStatus {
	name, gen := ProfileOf(profile)
	var samples []calibration.Sample
	var nodes int32
	for i := range cals {
		s := Samples(&cals[i], name, gen)
		if len(s) > 0 {
			nodes++
			samples = append(samples, s...)
		}
	}
	e := calibration.Of(samples)
	st := isov1.ContentionProfileStatus{
		ObservedGeneration: gen,
		Samples:            ptr.To(int32(e.Samples)),
		Nodes:              &nodes,
		Namespaces:         ptr.To(int32(e.Namespaces)),
	}
	if profile != nil {
		st.Conditions = append(st.Conditions, profile.Status.Conditions...)
	}
	if e.OK {
		st.Correction = isov1.Decimal(calibration.Format(e.Correction))
	}
	c := calibrated(e, now, fmt.Sprintf("the class correction (probes on %d of its nodes)", nodes), "no class correction")
	c.ObservedGeneration = gen
	meta.SetStatusCondition(&st.Conditions, c)
	return st
}

// calibrated is the Calibrated condition of estimate e: what correction it makes of
// what, or why it makes none and what follows (otherwise).
func calibrated(e calibration.Estimate, now time.Time, what, otherwise string) metav1.Condition {
	c := metav1.Condition{Type: isov1.ConditionCalibrated, LastTransitionTime: metav1.NewTime(now.UTC().Truncate(time.Second))}
	if !e.OK {
		c.Status, c.Reason = metav1.ConditionFalse, isov1.ReasonTooFewNamespaces
		c.Message = fmt.Sprintf("%s: %s; no namespace moves the shared model alone", e.Why(), otherwise)
		return c
	}
	c.Status, c.Reason = metav1.ConditionTrue, isov1.ReasonEnoughNamespaces
	c.Message = fmt.Sprintf("%s is %s, from %d samples of %d namespaces (the median of each namespace's own median)",
		what, calibration.Format(e.Correction), e.Samples, e.Namespaces)
	if e.Median < calibration.Min || e.Median > calibration.Max {
		c.Message += fmt.Sprintf("; their median %s is bounded to [%s, %s]: the profile itself is wrong for these nodes",
			calibration.Format(e.Median), calibration.Format(calibration.Min), calibration.Format(calibration.Max))
	}
	return c
}
