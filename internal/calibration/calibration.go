// Package calibration turns what probes measured on a node, against what the contention
// model predicted there, into the correction the model applies to every prediction on
// that node from then on (docs/contention-model.md, "Recalibration"). It is pure: the
// operator and isochronctl give it the samples the API holds.
//
// A sample is one conclusive probe (Confirmed or Refuted) of a crawler on the node: the
// interval error measured at the objective percentile and the model's uncorrected
// prediction for the crawler with what the node held. Its ratio, measured over predicted,
// says how far the model is off there. The correction is a robust, bounded summary of the
// node's last ratios:
//
//   - each figure is raised to a tenth of the crawler's tolerance before dividing, so two
//     errors that are both far inside the budget do not make a ratio (50 µs against
//     200 µs says nothing about a neighbour predicted at 8 ms);
//   - the median of the last Window ratios (of an even count, the middle one nearer 1),
//     so one outlier never moves it, and it moves only when most recent probes agree;
//   - nothing from fewer than MinSamples: one probe alone never changes the model;
//   - bounded to [Min, Max]: under-prediction, the dangerous side, may be corrected
//     fourfold, over-prediction only halved, since the model is conservative by design.
//
// A node with too few samples of its own takes its class's correction (the pooled
// samples of every node its ContentionProfile selects), else none.
package calibration

import (
	"math"
	"slices"
	"strconv"
	"time"
)

const (
	// Window is how many of a node's latest samples count.
	Window = 5
	// MinSamples is the fewest samples that make a correction.
	MinSamples = 2
	// Min and Max bound a correction.
	Min = 0.5
	Max = 4.0
	// FloorFraction is the share of the tolerance below which an error counts as that
	// share.
	FloorFraction = 0.1
)

// Sample is one conclusive probe of a crawler on a node.
type Sample struct {
	// Job is the probe Job: a probe is sampled once.
	Job string
	// Crawler is the crawler's namespace/name.
	Crawler string
	// At is when the probe's result was read.
	At time.Time
	// Measured is the interval error the probe measured at the crawler's objective
	// percentile; Predicted is the model's prediction for it, uncorrected.
	Measured, Predicted time.Duration
	// Ratio is Ratio(Measured, Predicted, tolerance), rounded as Round does.
	Ratio float64
}

// Ratio is measured over predicted, each raised to FloorFraction of the tolerance first,
// rounded to three decimals.
func Ratio(measured, predicted, tolerance time.Duration) float64 {
	floor := time.Duration(float64(tolerance) * FloorFraction)
	return Round(float64(max(measured, floor, 1)) / float64(max(predicted, floor, 1)))
}

// Round rounds a ratio or a correction to three decimals, as the API stores them.
func Round(x float64) float64 { return math.Round(x*1000) / 1000 }

// Format writes a rounded ratio or correction as the API's decimal string.
func Format(x float64) string { return strconv.FormatFloat(Round(x), 'f', -1, 64) }

// Add puts s first in samples (newest first) and keeps the Window newest; false, and
// samples unchanged, when a sample of the same Job is already there.
func Add(samples []Sample, s Sample) ([]Sample, bool) {
	for _, have := range samples {
		if have.Job == s.Job {
			return samples, false
		}
	}
	out := append([]Sample{s}, samples...)
	return out[:min(len(out), Window)], true
}

// Estimate is a correction and what it rests on.
type Estimate struct {
	// Correction multiplies the model's predictions; 1 when not OK.
	Correction float64
	// Median is the median ratio before the bounds (0 when not OK): a median outside
	// [Min, Max] says the profile itself is wrong for the node.
	Median float64
	// Samples is how many ratios it rests on.
	Samples int
	// OK is false with fewer than MinSamples ratios.
	OK bool
}

// Of estimates the correction from ratios (a node's latest, or a class's pooled).
func Of(ratios []float64) Estimate {
	n := len(ratios)
	if n < MinSamples {
		return Estimate{Correction: 1, Samples: n}
	}
	s := slices.Clone(ratios)
	slices.Sort(s)
	m := s[n/2]
	if n%2 == 0 {
		// Of the two middle ratios, the one nearer 1 (in ratio terms): the agreement of
		// half the samples does not move the model further than the more cautious of
		// them.
		lo, hi := s[n/2-1], s[n/2]
		m = lo
		if math.Abs(math.Log(hi)) < math.Abs(math.Log(lo)) {
			m = hi
		}
	}
	return Estimate{Correction: Round(min(Max, max(Min, m))), Median: m, Samples: n, OK: true}
}

// Ratios are the ratios of samples, at most Window of them (the newest first).
func Ratios(samples []Sample) []float64 {
	out := make([]float64, 0, min(len(samples), Window))
	for _, s := range samples[:min(len(samples), Window)] {
		out = append(out, s.Ratio)
	}
	return out
}

// Source is where a node's applied correction comes from.
type Source string

const (
	// SourceNode: the node's own samples.
	SourceNode Source = "Node"
	// SourceClass: the node has too few samples; its class's pooled ones.
	SourceClass Source = "Class"
	// SourceNone: neither has enough; the model as calibrated.
	SourceNone Source = "None"
)

// Applied is the correction a node's predictions get: its own, else its class's, else 1.
func Applied(node, class Estimate) (float64, Source) {
	switch {
	case node.OK:
		return node.Correction, SourceNode
	case class.OK:
		return class.Correction, SourceClass
	}
	return 1, SourceNone
}
