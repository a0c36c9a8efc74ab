package calibration

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRatio(t *testing.T) {
	ms := time.Millisecond
	for name, tc := range map[string]struct {
		measured, predicted, tolerance time.Duration
		want                           float64
	}{
		"measured twice the prediction":                         {12 * ms, 6 * ms, 10 * ms, 2},
		"measured a third of the prediction":                    {2 * ms, 6 * ms, 10 * ms, 0.333},
		"both under a tenth of the tolerance: no signal":        {50 * time.Microsecond, 200 * time.Microsecond, 10 * ms, 1},
		"a tiny prediction counts as a tenth of the tolerance":  {3 * ms, 100 * time.Microsecond, 10 * ms, 3},
		"a tiny measurement counts as a tenth of the tolerance": {10 * time.Microsecond, 4 * ms, 10 * ms, 0.25},
		"no tolerance: no floor":                                {2 * ms, ms, 0, 2},
		"zero figures do not divide by zero":                    {0, 0, 0, 1},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Ratio(tc.measured, tc.predicted, tc.tolerance); got != tc.want {
				t.Errorf("Ratio(%s, %s, %s) = %v, want %v", tc.measured, tc.predicted, tc.tolerance, got, tc.want)
			}
		})
	}
}

// probe is a sample of the crawler ns/crawler, probe Job job, with ratio r.
func probe(crawler, job string, r float64) Sample {
	return Sample{Job: job, Crawler: crawler, Ratio: r}
}

// from is one sample of each ratio, by crawlers ns/c0, ns/c1… (Jobs ns-0, ns-1…), newest
// first.
func from(ns string, ratios ...float64) []Sample {
	out := make([]Sample, len(ratios))
	for i, r := range ratios {
		out[i] = probe(fmt.Sprintf("%s/c%d", ns, i), fmt.Sprintf("%s-%d", ns, i), r)
	}
	return out
}

func jobs(samples []Sample) []string {
	out := make([]string, len(samples))
	for i, s := range samples {
		out[i] = s.Job
	}
	return out
}

func concat(groups ...[]Sample) []Sample {
	var out []Sample
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

func TestKeep(t *testing.T) {
	for name, tc := range map[string]struct {
		samples []Sample // newest first
		want    []string // the Jobs kept
	}{
		"few samples: all kept": {
			samples: concat(from("a", 1), from("b", 1, 1)),
			want:    []string{"a-0", "b-0", "b-1"},
		},
		"the newest three of a namespace": {
			samples: from("a", 1, 2, 3, 4, 5),
			want:    []string{"a-0", "a-1", "a-2"},
		},
		"a namespace that probes often pushes no other out": {
			samples: concat(from("flood", 1, 1, 1, 1, 1, 1, 1, 1, 1, 1), from("b", 2), from("c", 3), from("d", 4)),
			want:    []string{"flood-0", "flood-1", "flood-2", "b-0", "c-0", "d-0"},
		},
		"the five namespaces probed most recently": {
			samples: concat(from("a", 1), from("b", 1), from("c", 1), from("d", 1), from("e", 1), from("f", 1)),
			want:    []string{"a-0", "b-0", "c-0", "d-0", "e-0"},
		},
		"an older sample of a kept namespace after a dropped one": {
			samples: concat(from("a", 1), from("b", 1), from("c", 1), from("d", 1), from("e", 1), from("f", 1),
				[]Sample{probe("a/old", "a-old", 1)}),
			want: []string{"a-0", "b-0", "c-0", "d-0", "e-0", "a-old"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, jobs(Keep(tc.samples))); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAddOncePerJobNewestFirst(t *testing.T) {
	var samples []Sample
	for i := range 4 {
		var added bool
		samples, added = Add(samples, probe(fmt.Sprintf("ns-%d/c", i), fmt.Sprintf("j%d", i), 1))
		if !added {
			t.Fatalf("sample j%d not added", i)
		}
	}
	if diff := cmp.Diff([]string{"j3", "j2", "j1", "j0"}, jobs(samples)); diff != "" {
		t.Errorf("samples (-want +got):\n%s", diff)
	}
	if again, added := Add(samples, probe("ns-9/c", "j1", 100)); added || len(again) != 4 {
		t.Errorf("a second sample of job j1 was added (%v): %v", added, jobs(again))
	}
	for i := range 2 * MaxSamples {
		samples, _ = Add(samples, probe(fmt.Sprintf("ns-%d/c", i%MaxNamespaces), fmt.Sprintf("k%d", i), 1))
	}
	if len(samples) != MaxSamples {
		t.Errorf("kept %d samples of %d namespaces, want %d", len(samples), MaxNamespaces, MaxSamples)
	}
}

func TestOf(t *testing.T) {
	for name, tc := range map[string]struct {
		samples []Sample
		want    Estimate
	}{
		"no samples": {nil, Estimate{Correction: 1}},
		"one probe never moves the model": {from("a", 3),
			Estimate{Correction: 1, Samples: 1, Namespaces: 1}},
		"many probes of one namespace are one namespace": {from("a", 3, 3, 3),
			Estimate{Correction: 1, Samples: 3, Namespaces: 1}},
		"two namespaces agreeing are not enough": {concat(from("a", 3), from("b", 3)),
			Estimate{Correction: 1, Samples: 2, Namespaces: 2}},
		"three agreeing namespaces": {concat(from("a", 3), from("b", 2.5), from("c", 2.8)),
			Estimate{Correction: 2.8, Median: 2.8, Samples: 3, Namespaces: 3, OK: true}},
		"each namespace is the median of its own": {concat(from("a", 2, 9, 2.2), from("b", 0.01, 1.8, 1.9), from("c", 2.1)),
			Estimate{Correction: 2.1, Median: 2.1, Samples: 7, Namespaces: 3, OK: true}},
		"an outlier namespace among three": {concat(from("a", 1.1), from("b", 20, 20, 20), from("c", 1.2)),
			Estimate{Correction: 1.2, Median: 1.2, Samples: 5, Namespaces: 3, OK: true}},
		"two outlier namespaces among five": {concat(from("a", 1.1), from("b", 0.01), from("c", 1.3), from("d", 40), from("e", 1.2)),
			Estimate{Correction: 1.2, Median: 1.2, Samples: 5, Namespaces: 5, OK: true}},
		"of four namespaces the middle value nearer 1": {concat(from("a", 2), from("b", 3), from("c", 2.5), from("d", 1.5)),
			Estimate{Correction: 2, Median: 2, Samples: 4, Namespaces: 4, OK: true}},
		"straddling 1: the nearer": {concat(from("a", 0.8), from("b", 1.5), from("c", 0.7), from("d", 2)),
			Estimate{Correction: 0.8, Median: 0.8, Samples: 4, Namespaces: 4, OK: true}},
		"bounded above": {concat(from("a", 10), from("b", 12), from("c", 11)),
			Estimate{Correction: Max, Median: 11, Samples: 3, Namespaces: 3, OK: true}},
		"bounded below": {concat(from("a", 0.1), from("b", 0.2), from("c", 0.3)),
			Estimate{Correction: Min, Median: 0.2, Samples: 3, Namespaces: 3, OK: true}},
		"a ratio that is no positive number is not counted": {concat(from("a", 2), from("b", 2), from("c", 0, math.NaN(), math.Inf(1))),
			Estimate{Correction: 1, Samples: 2, Namespaces: 2}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Of(tc.samples)); diff != "" {
				t.Errorf("Of (-want +got):\n%s", diff)
			}
		})
	}
}

// The trust rule, played by an attacker: one namespace ("liar"), with any number of
// crawlers and probes and any ratios, reporting before, after or between the honest
// namespaces' probes on one node, cannot move the node's correction when the honest
// namespaces agree, and cannot take it outside their values' range when they do not.
func TestOneNamespaceCannotMoveTheCorrection(t *testing.T) {
	honest := map[string][][]float64{ // each namespace's ratios, newest first
		"two agree at 1":                     {{1}, {1, 1}},
		"two agree at 2.5":                   {{2.5, 2.5}, {2.5}},
		"three agree at 1.5":                 {{1.5}, {1.5, 1.5, 1.5}, {1.5}},
		"four agree at 0.7":                  {{0.7}, {0.7}, {0.7}, {0.7}},
		"two disagree, 1 and 3":              {{1}, {3}},
		"three disagree, 0.8 to 2":           {{0.8}, {1.2, 1.2}, {2}},
		"four disagree, each noisy":          {{1, 9, 1.1}, {2, 2.2}, {1.6}, {0.9, 1, 0.01}},
		"two agree at 3, beyond the bound":   {{6}, {6}},
		"three agree below the lower bound":  {{0.2}, {0.2}, {0.2}},
		"four, one of them far from others":  {{1}, {1.1}, {1.05}, {50}},
		"one honest namespace: never enough": {{2}},
	}
	type attack struct {
		crawlers, probes int     // how many crawlers probed how many times each
		ratio            float64 // what each reports
		when             string  // "before", "after" or "between" the honest probes
	}
	liars := map[string]attack{
		"stalls on purpose (1000x), one crawler, many probes, last": {1, 30, 1000, "after"},
		"stalls on purpose (1000x), many crawlers, first":           {12, 3, 1000, "before"},
		"stalls on purpose (1000x), many crawlers, between":         {12, 3, 1000, "between"},
		"under-reports (0.001x), many probes, last":                 {4, 10, 0.001, "after"},
		"under-reports (0.001x), between":                           {4, 10, 0.001, "between"},
		"reports exactly 1 to hide a real problem":                  {20, 2, 1, "after"},
		"reports exactly the bound":                                 {3, 3, Max, "between"},
		"one probe only":                                            {1, 1, 1000, "after"},
	}
	for hname, hvalues := range honest {
		for lname, atk := range liars {
			t.Run(hname+"/"+lname, func(t *testing.T) {
				var honestSamples [][]Sample
				var values []float64 // each honest namespace's value
				for i, ratios := range hvalues {
					ns := fmt.Sprintf("honest-%d", i)
					honestSamples = append(honestSamples, from(ns, ratios...))
					values = append(values, median(ratios))
				}
				var lies []Sample
				for p := range atk.probes {
					for c := range atk.crawlers {
						lies = append(lies, probe(fmt.Sprintf("liar/c%d", c), fmt.Sprintf("liar-%d-%d", c, p), atk.ratio))
					}
				}
				// Play the probes onto a node in the attack's order (Add takes them
				// oldest first).
				var order []Sample
				switch atk.when {
				case "before":
					order = append(lies, concat(honestSamples...)...)
				case "after":
					order = append(concat(honestSamples...), lies...)
				case "between":
					for i, h := range honestSamples {
						order = append(order, h...)
						if i == 0 {
							order = append(order, lies...)
						}
					}
				}
				var node []Sample
				for i := len(order) - 1; i >= 0; i-- {
					node, _ = Add(node, order[i])
				}
				// Its whole history, pooled across nodes, is what a class sees.
				for name, samples := range map[string][]Sample{"node": node, "class": order} {
					got := Of(samples)
					if wantOK := len(hvalues)+1 >= MinNamespaces; got.OK != wantOK {
						t.Fatalf("%s: OK %v with %d honest namespaces and the liar, want %v: %+v", name, got.OK, len(hvalues), wantOK, got)
					}
					if !got.OK {
						if got.Correction != 1 {
							t.Errorf("%s: no estimate but correction %v", name, got.Correction)
						}
						continue
					}
					lo, hi := clamp(minOf(values)), clamp(maxOf(values))
					if got.Correction < lo || got.Correction > hi {
						t.Errorf("%s: correction %v outside the honest namespaces' [%v, %v] (values %v)", name, got.Correction, lo, hi, values)
					}
					if lo == hi && got.Correction != lo {
						t.Errorf("%s: the honest namespaces agree on %v, the liar made it %v", name, lo, got.Correction)
					}
				}
			})
		}
	}
}

func clamp(x float64) float64 { return Round(min(Max, max(Min, x))) }

func minOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func TestApply(t *testing.T) {
	own := Estimate{Correction: 2, Samples: 3, Namespaces: 3, OK: true}
	class := Estimate{Correction: 1.5, Samples: 9, Namespaces: 4, OK: true}
	few := Estimate{Correction: 1, Samples: 4, Namespaces: 2}
	none := Estimate{Correction: 1}
	for name, tc := range map[string]struct {
		node, class Estimate
		want        float64
		source      Source
		text        string
	}{
		"the node's own": {own, class, 2, SourceNode,
			"the node's own (samples from 3 namespaces)"},
		"too few namespaces of its own: the class's": {few, class, 1.5, SourceClass,
			"its class's (samples from 4 namespaces); the node's own: samples from 2 namespaces, 3 needed"},
		"neither: none": {few, none, 1, SourceNone,
			"none: the node's own: samples from 2 namespaces, 3 needed; its class's: no samples"},
	} {
		t.Run(name, func(t *testing.T) {
			a := Apply(tc.node, tc.class)
			if a.Correction != tc.want || a.Source != tc.source || a.String() != tc.text {
				t.Errorf("Apply = %v (%s) %q, want %v (%s) %q", a.Correction, a.Source, a, tc.want, tc.source, tc.text)
			}
		})
	}
}

func TestWhy(t *testing.T) {
	for want, e := range map[string]Estimate{
		"no samples":                          {},
		"samples from 1 namespace, 3 needed":  {Samples: 5, Namespaces: 1},
		"samples from 2 namespaces, 3 needed": {Samples: 2, Namespaces: 2},
		"samples from 3 namespaces":           {Samples: 3, Namespaces: 3, OK: true},
	} {
		if got := e.Why(); got != want {
			t.Errorf("%+v: Why() = %q, want %q", e, got, want)
		}
	}
}

func TestFormat(t *testing.T) {
	for x, want := range map[float64]string{2: "2", 1.23456: "1.235", 0.5: "0.5", 4: "4"} {
		if got := Format(x); got != want {
			t.Errorf("Format(%v) = %q, want %q", x, got, want)
		}
	}
}
