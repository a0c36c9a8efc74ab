package calibration

import (
	"fmt"
	"testing"
	"time"
)

func TestRatio(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name                           string
		measured, predicted, tolerance time.Duration
		want                           float64
	}{
		{"measured twice the prediction", 12 * ms, 6 * ms, 10 * ms, 2},
		{"measured a third of the prediction", 2 * ms, 6 * ms, 10 * ms, 0.333},
		{"both under a tenth of the tolerance: no signal", 50 * time.Microsecond, 200 * time.Microsecond, 10 * ms, 1},
		{"a tiny prediction counts as a tenth of the tolerance", 3 * ms, 100 * time.Microsecond, 10 * ms, 3},
		{"a tiny measurement counts as a tenth of the tolerance", 10 * time.Microsecond, 4 * ms, 10 * ms, 0.25},
		{"no tolerance: no floor", 2 * ms, ms, 0, 2},
		{"zero figures do not divide by zero", 0, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Ratio(tc.measured, tc.predicted, tc.tolerance); got != tc.want {
				t.Errorf("Ratio(%s, %s, %s) = %v, want %v", tc.measured, tc.predicted, tc.tolerance, got, tc.want)
			}
		})
	}
}

func TestAddKeepsTheNewestWindowOncePerJob(t *testing.T) {
	var samples []Sample
	for i := 1; i <= Window+2; i++ {
		var added bool
		samples, added = Add(samples, Sample{Job: fmt.Sprintf("j%d", i), Ratio: float64(i)})
		if !added {
			t.Fatalf("sample j%d not added", i)
		}
	}
	if len(samples) != Window {
		t.Fatalf("kept %d samples, want %d", len(samples), Window)
	}
	if samples[0].Job != "j7" || samples[Window-1].Job != "j3" {
		t.Errorf("kept %s..%s, want the newest first, j7..j3", samples[0].Job, samples[Window-1].Job)
	}
	again, added := Add(samples, Sample{Job: "j5", Ratio: 100})
	if added || len(again) != Window || again[0].Job != "j7" {
		t.Errorf("a second sample of job j5 was added (%v): %v", added, again)
	}
}

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ratios []float64
		want   Estimate
	}{
		{"no samples", nil, Estimate{Correction: 1}},
		{"one probe never moves the model", []float64{3}, Estimate{Correction: 1, Samples: 1}},
		{"two agreeing refutations: the more cautious", []float64{3, 2.5}, Estimate{Correction: 2.5, Median: 2.5, Samples: 2, OK: true}},
		{"an outlier beside an ordinary probe: no move", []float64{1, 9}, Estimate{Correction: 1, Median: 1, Samples: 2, OK: true}},
		{"two agreeing over-predictions: the more cautious", []float64{0.6, 0.7}, Estimate{Correction: 0.7, Median: 0.7, Samples: 2, OK: true}},
		{"straddling 1: the nearer", []float64{0.8, 1.5}, Estimate{Correction: 0.8, Median: 0.8, Samples: 2, OK: true}},
		{"one outlier among three", []float64{1.1, 20, 1.2}, Estimate{Correction: 1.2, Median: 1.2, Samples: 3, OK: true}},
		{"two outliers among five", []float64{1.1, 0.01, 1.3, 40, 1.2}, Estimate{Correction: 1.2, Median: 1.2, Samples: 5, OK: true}},
		{"most agree on 2", []float64{2, 2.1, 1, 1.9, 2.2}, Estimate{Correction: 2, Median: 2, Samples: 5, OK: true}},
		{"bounded above", []float64{10, 12}, Estimate{Correction: Max, Median: 10, Samples: 2, OK: true}},
		{"bounded below", []float64{0.1, 0.2, 0.3}, Estimate{Correction: Min, Median: 0.2, Samples: 3, OK: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(tc.ratios); got != tc.want {
				t.Errorf("Of(%v) = %+v, want %+v", tc.ratios, got, tc.want)
			}
		})
	}
}

func TestRatiosTakesTheWindow(t *testing.T) {
	samples := []Sample{{Ratio: 1}, {Ratio: 2}, {Ratio: 3}, {Ratio: 4}, {Ratio: 5}, {Ratio: 6}}
	if got := Ratios(samples); len(got) != Window || got[0] != 1 || got[Window-1] != 5 {
		t.Errorf("Ratios = %v, want the %d newest", got, Window)
	}
}

func TestApplied(t *testing.T) {
	own := Estimate{Correction: 2, Samples: 2, OK: true}
	class := Estimate{Correction: 1.5, Samples: 6, OK: true}
	none := Estimate{Correction: 1, Samples: 1}
	for _, tc := range []struct {
		name        string
		node, class Estimate
		want        float64
		source      Source
	}{
		{"the node's own", own, class, 2, SourceNode},
		{"too few of its own: the class's", none, class, 1.5, SourceClass},
		{"neither: none", none, none, 1, SourceNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if k, src := Applied(tc.node, tc.class); k != tc.want || src != tc.source {
				t.Errorf("Applied = %v (%s), want %v (%s)", k, src, tc.want, tc.source)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	for x, want := range map[float64]string{2: "2", 1.23456: "1.235", 0.5: "0.5", 4: "4"} {
		if got := Format(x); got != want {
			t.Errorf("Format(%v) = %q, want %q", x, got, want)
		}
	}
}
