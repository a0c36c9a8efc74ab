package inventory

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// Correction is the correction a node's predictions get (calibration.Applied): from its
// NodeCalibration's samples when they are of the node's current profile and generation,
// else the profile's class correction when it is of the profile's current generation.
func Correction(profile *isov1.ContentionProfile, cal *isov1.NodeCalibration) (float64, calibration.Source) {
	name, gen := ProfileOf(profile)
	node := calibration.Of(calibration.Ratios(Samples(cal, name, gen)))
	var class calibration.Estimate
	if profile != nil && profile.Status.ObservedGeneration == profile.Generation {
		if k, ok := profile.Status.Correction.Float64(); ok && k > 0 {
			class = calibration.Estimate{Correction: k, OK: true}
		}
	}
	return calibration.Applied(node, class)
}

// Record adds s, a sample taken with profile's parameters, to cal's status. Samples of
// another profile or generation are dropped: their predictions were of another model.
// It returns false, and leaves cal alone, when s's Job is sampled already.
func Record(cal *isov1.NodeCalibration, profile *isov1.ContentionProfile, s calibration.Sample) bool {
	name, gen := ProfileOf(profile)
	samples, added := calibration.Add(Samples(cal, name, gen), s)
	if !added {
		return false
	}
	st := isov1.NodeCalibrationStatus{Profile: name, ProfileGeneration: gen, Samples: make([]isov1.CalibrationSample, 0, len(samples))}
	for _, x := range samples {
		st.Samples = append(st.Samples, isov1.CalibrationSample{
			Job: x.Job, Crawler: x.Crawler, Time: metav1.Time{Time: x.At.UTC().Truncate(time.Second)},
			Measured:  metav1.Duration{Duration: x.Measured},
			Predicted: metav1.Duration{Duration: x.Predicted},
			Ratio:     isov1.Decimal(calibration.Format(x.Ratio)),
		})
	}
	if e := calibration.Of(calibration.Ratios(samples)); e.OK {
		st.Correction = isov1.Decimal(calibration.Format(e.Correction))
	}
	cal.Status = st
	return true
}

// ClassStatus is profile's class calibration from the NodeCalibrations of the cluster:
// the pooled samples of those taken with the profile's current generation.
func ClassStatus(profile *isov1.ContentionProfile, cals []isov1.NodeCalibration) isov1.ContentionProfileStatus {
	name, gen := ProfileOf(profile)
	var ratios []float64
	var nodes int32
	for i := range cals {
		r := calibration.Ratios(Samples(&cals[i], name, gen))
		if len(r) > 0 {
			nodes++
			ratios = append(ratios, r...)
		}
	}
	e := calibration.Of(ratios)
	samples := int32(len(ratios))
	st := isov1.ContentionProfileStatus{ObservedGeneration: gen, Samples: &samples, Nodes: &nodes}
	if e.OK {
		st.Correction = isov1.Decimal(calibration.Format(e.Correction))
	}
	return st
}
