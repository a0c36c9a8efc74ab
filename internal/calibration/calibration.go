// Package calibration turns what probes measured on a node, against what the contention
// model predicted there, into the correction the model applies to every prediction on
// that node from then on (docs/contention-model.md, "Recalibration"). It is pure: the
// operator and isochronctl give it the samples the API holds.
//
// A sample is one conclusive probe (Confirmed or Refuted) of a crawler on the node: the
// interval error measured at the objective percentile and the model's uncorrected
// prediction for the crawler with what the node held. Its ratio, measured over predicted,
// says how far the model is off there. Each figure is raised to a tenth of the crawler's
// tolerance before dividing, so two errors that are both far inside the budget do not
// make a ratio (50 µs against 200 µs says nothing about a neighbour predicted at 8 ms).
//
// # Who moves the model
//
// The model is shared: a node's correction changes the predictions of every crawler on
// it, of every namespace, and a class's those of every node of its profile. A sample,
// though, is the word of one crawler's guest, which is its tenant's: a guest can stall
// on purpose (ratios of 1000) or report nothing wrong under load (ratios near 0). So the
// correction is built so that no namespace moves it alone, and a guest that lies about
// itself can only hurt itself:
//
//   - one namespace, one value: a namespace's samples are first reduced to one value,
//     the median of its own (a node keeps its PerNamespace latest; a class pools them
//     from every node, so a namespace on many nodes still counts once). Probing more
//     often, or running more crawlers, adds no weight;
//   - MinNamespaces (3) namespaces: the correction is the median of those values, and
//     nothing comes from fewer than three namespaces. Of three or more values, the
//     median lies between two of the others, so one namespace, whatever it reports,
//     leaves it inside the range of the values of namespaces that are not it (of at
//     least two of them), and exactly where they are when they agree. With two
//     namespaces the median of two would be the liar's or the honest one's, at the
//     liar's choice (a liar reporting 1 would hide a real problem): two are not enough;
//   - the median of an even count is the middle value nearer 1 (in ratio terms), so
//     the agreement of half the namespaces does not move the model further than the
//     more cautious of them;
//   - bounded to [Min, Max]: under-prediction, the dangerous side, may be corrected
//     fourfold, over-prediction only halved, since the model is conservative by design.
//
// A node keeps the samples of its MaxNamespaces namespaces whose latest sample is newest,
// PerNamespace of each: a namespace that probes often refreshes its own values and never
// pushes another's out. A tenant that holds several namespaces counts once for each:
// namespaces are the unit of trust, and only the cluster administrator creates them.
//
// A node whose own samples are from too few namespaces takes its class's correction (the
// pooled samples of every node its ContentionProfile selects), else none.
package calibration

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// MinNamespaces is the fewest namespaces whose samples make a correction.
	MinNamespaces = 3
	// PerNamespace is how many of a namespace's latest samples on a node count.
	PerNamespace = 3
	// MaxNamespaces is how many namespaces a node keeps samples of: those whose latest
	// sample is newest.
	MaxNamespaces = 5
	// MaxSamples is the most samples a node keeps (the NodeCalibration's bound).
	MaxSamples = PerNamespace * MaxNamespaces
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

// Namespace is the namespace of the sample's crawler: whose word the sample is.
func (s Sample) Namespace() string {
	ns, _, _ := strings.Cut(s.Crawler, "/")
	return ns
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

// Add puts s first in samples (newest first) and keeps what Keep keeps; false, and
// samples unchanged, when a sample of the same Job is already there.
func Add(samples []Sample, s Sample) ([]Sample, bool) {
	for _, have := range samples {
		if have.Job == s.Job {
			return samples, false
		}
	}
	return Keep(append([]Sample{s}, samples...)), true
}

// Keep is what a node keeps of samples (newest first): the PerNamespace newest of each
// namespace, of the MaxNamespaces namespaces whose newest sample is newest, in order.
// One namespace's samples, however many, never push another's out.
func Keep(samples []Sample) []Sample {
	per := make(map[string]int, MaxNamespaces)
	out := make([]Sample, 0, min(len(samples), MaxSamples))
	for _, s := range samples {
		ns := s.Namespace()
		n, seen := per[ns]
		if (!seen && len(per) == MaxNamespaces) || n == PerNamespace {
			continue
		}
		per[ns] = n + 1
		out = append(out, s)
	}
	return out
}

// Estimate is a correction and what it rests on.
type Estimate struct {
	// Correction multiplies the model's predictions; 1 when not OK.
	Correction float64
	// Median is the median of the namespaces' values before the bounds (0 when not OK):
	// a median outside [Min, Max] says the profile itself is wrong for the node.
	Median float64
	// Samples is how many samples it rests on; Namespaces how many namespaces they are
	// from.
	Samples, Namespaces int
	// OK is false with samples from fewer than MinNamespaces namespaces.
	OK bool
}

// Of estimates the correction from samples (a node's kept ones, or a class's pooled
// ones): the median of one value per namespace, the median of that namespace's ratios,
// from at least MinNamespaces namespaces, bounded to [Min, Max]. A ratio that is not a
// positive number (the API refuses one) is not counted.
func Of(samples []Sample) Estimate {
	byNamespace := map[string][]float64{}
	n := 0
	for _, s := range samples {
		if !(s.Ratio > 0) || math.IsInf(s.Ratio, 0) {
			continue
		}
		byNamespace[s.Namespace()] = append(byNamespace[s.Namespace()], s.Ratio)
		n++
	}
	if len(byNamespace) < MinNamespaces {
		return Estimate{Correction: 1, Samples: n, Namespaces: len(byNamespace)}
	}
	values := make([]float64, 0, len(byNamespace))
	for _, ratios := range byNamespace {
		values = append(values, median(ratios))
	}
	m := median(values)
	return Estimate{Correction: Round(min(Max, max(Min, m))), Median: m, Samples: n, Namespaces: len(values), OK: true}
}

// median is the middle of xs (not empty), and of an even count the middle one nearer 1
// in ratio terms: the agreement of half of them does not move the model further than
// the more cautious of them.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	lo, hi := s[n/2-1], s[n/2]
	if math.Abs(math.Log(hi)) < math.Abs(math.Log(lo)) {
		return hi
	}
	return lo
}

// Why says what the estimate rests on: "samples from 4 namespaces", or why it is no
// correction ("samples from 2 namespaces, 3 needed", "no samples").
func (e Estimate) Why() string {
	switch {
	case e.OK:
		return "samples from " + namespaces(e.Namespaces)
	case e.Namespaces == 0:
		return "no samples"
	}
	return fmt.Sprintf("samples from %s, %d needed", namespaces(e.Namespaces), MinNamespaces)
}

func namespaces(n int) string {
	if n == 1 {
		return "1 namespace"
	}
	return strconv.Itoa(n) + " namespaces"
}

// Source is where a node's applied correction comes from.
type Source string

const (
	// SourceNode: the node's own samples.
	SourceNode Source = "Node"
	// SourceClass: the node's own samples are from too few namespaces; its class's pooled
	// ones.
	SourceClass Source = "Class"
	// SourceNone: neither has enough; the model as calibrated.
	SourceNone Source = "None"
)

// Applied is the correction a node's predictions get and what it rests on.
type Applied struct {
	// Correction multiplies the node's predictions (1 for none).
	Correction float64
	// Source says whose it is.
	Source Source
	// Node is the estimate from the node's own samples, Class its class's.
	Node, Class Estimate
}

// Apply is the node's own correction, else its class's, else 1.
func Apply(node, class Estimate) Applied {
	a := Applied{Correction: 1, Source: SourceNone, Node: node, Class: class}
	switch {
	case node.OK:
		a.Correction, a.Source = node.Correction, SourceNode
	case class.OK:
		a.Correction, a.Source = class.Correction, SourceClass
	}
	return a
}

// String says where the correction comes from and, when it is not the node's own, why:
// "its class's (samples from 4 namespaces); the node's own: samples from 1 namespace,
// 3 needed".
func (a Applied) String() string {
	switch a.Source {
	case SourceNode:
		return "the node's own (" + a.Node.Why() + ")"
	case SourceClass:
		return "its class's (" + a.Class.Why() + "); the node's own: " + a.Node.Why()
	}
	return "none: the node's own: " + a.Node.Why() + "; its class's: " + a.Class.Why()
}
