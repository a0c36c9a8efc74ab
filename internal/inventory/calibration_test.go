package inventory

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/calibration"
)

// sample is a probe on node-1 that measured ratio times the prediction of 4ms.
func sample(job string, ratio float64) calibration.Sample {
	return calibration.Sample{
		Job: job, Crawler: "bms/" + job, At: time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC),
		Measured: time.Duration(ratio * float64(4*time.Millisecond)), Predicted: 4 * time.Millisecond,
		Ratio: ratio,
	}
}

func generation(p isov1.ContentionProfile, g int64) *isov1.ContentionProfile {
	p.Generation = g
	return &p
}

func TestRecordKeepsTheSamplesOfOneModel(t *testing.T) {
	rt := generation(profile("rt", 0, nil), 3)
	cal := &isov1.NodeCalibration{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}

	if !Record(cal, rt, sample("a", 2)) {
		t.Fatal("the first sample was not recorded")
	}
	if cal.Status.Correction != "" || cal.Status.Profile != "rt" || cal.Status.ProfileGeneration != 3 {
		t.Errorf("after one sample: %+v, want no correction yet, profile rt generation 3", cal.Status)
	}
	if Record(cal, rt, sample("a", 9)) {
		t.Error("a probe was sampled twice")
	}
	Record(cal, rt, sample("b", 2.5))
	if cal.Status.Correction != "2" || len(cal.Status.Samples) != 2 || cal.Status.Samples[0].Job != "b" {
		t.Errorf("after two agreeing samples: %+v, want correction 2, newest first", cal.Status)
	}
	if s := cal.Status.Samples[0]; s.Ratio != "2.5" || s.Measured.Duration != 10*time.Millisecond || s.Predicted.Duration != 4*time.Millisecond {
		t.Errorf("sample b stored as %+v", s)
	}

	// The profile changes: the old samples measured another model.
	Record(cal, generation(profile("rt", 0, nil), 4), sample("c", 1))
	if cal.Status.ProfileGeneration != 4 || len(cal.Status.Samples) != 1 || cal.Status.Correction != "" {
		t.Errorf("after the profile changed: %+v, want only the new sample, no correction", cal.Status)
	}
	for i := 0; i < 7; i++ {
		Record(cal, generation(profile("rt", 0, nil), 4), sample(fmt.Sprintf("d%d", i), 1.5))
	}
	if len(cal.Status.Samples) != calibration.Window {
		t.Errorf("kept %d samples, want %d", len(cal.Status.Samples), calibration.Window)
	}
}

func TestCorrection(t *testing.T) {
	rt := generation(profile("rt", 0, nil), 3)
	calibrated := func(p *isov1.ContentionProfile, ratios ...float64) *isov1.NodeCalibration {
		cal := &isov1.NodeCalibration{}
		for i, r := range ratios {
			Record(cal, p, sample(fmt.Sprint(i), r))
		}
		return cal
	}
	withClass := func(p *isov1.ContentionProfile, k string, observed int64) *isov1.ContentionProfile {
		p = p.DeepCopy()
		p.Status = isov1.ContentionProfileStatus{ObservedGeneration: observed, Correction: isov1.Decimal(k)}
		return p
	}
	for _, tc := range []struct {
		name    string
		profile *isov1.ContentionProfile
		cal     *isov1.NodeCalibration
		want    float64
		source  calibration.Source
	}{
		{"no calibration", rt, nil, 1, calibration.SourceNone},
		{"the node's own", rt, calibrated(rt, 2, 2.2), 2, calibration.SourceNode},
		{"the built-in defaults are calibrated too", nil, calibrated(nil, 3, 3), 3, calibration.SourceNode},
		{"samples of an earlier generation do not count", generation(profile("rt", 0, nil), 4), calibrated(rt, 2, 2.2), 1, calibration.SourceNone},
		{"samples of another profile do not count", generation(profile("other", 0, nil), 3), calibrated(rt, 2, 2.2), 1, calibration.SourceNone},
		{"one sample: the class's", withClass(rt, "1.5", 3), calibrated(rt, 3), 1.5, calibration.SourceClass},
		{"a class correction of an earlier generation does not count", withClass(rt, "1.5", 2), nil, 1, calibration.SourceNone},
		{"the node's own before the class's", withClass(rt, "1.5", 3), calibrated(rt, 2, 2), 2, calibration.SourceNode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if k, src := Correction(tc.profile, tc.cal); k != tc.want || src != tc.source {
				t.Errorf("Correction = %v (%s), want %v (%s)", k, src, tc.want, tc.source)
			}
		})
	}
}

func TestClassStatusPoolsTheClassNodes(t *testing.T) {
	rt := generation(profile("rt", 0, nil), 3)
	var cals []isov1.NodeCalibration
	for i, r := range []float64{2, 2.4, 1.8} { // one sample on each of three nodes
		cal := isov1.NodeCalibration{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i)}}
		Record(&cal, rt, sample(fmt.Sprint(i), r))
		cals = append(cals, cal)
	}
	other := isov1.NodeCalibration{}
	Record(&other, generation(profile("other", 0, nil), 1), sample("x", 4))
	cals = append(cals, other)

	st := ClassStatus(rt, cals)
	if st.Correction != "2" || *st.Samples != 3 || *st.Nodes != 3 || st.ObservedGeneration != 3 {
		t.Errorf("ClassStatus = correction %q, %d samples on %d nodes, generation %d; want 2, 3 on 3, 3",
			st.Correction, *st.Samples, *st.Nodes, st.ObservedGeneration)
	}
	// Each node alone has too few samples: they take the class's.
	if k, src := Correction(func() *isov1.ContentionProfile { p := rt.DeepCopy(); p.Status = st; return p }(), &cals[0]); k != 2 || src != calibration.SourceClass {
		t.Errorf("node-0 gets %v (%s), want the class's 2", k, src)
	}
}
