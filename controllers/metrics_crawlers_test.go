package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// A crawler's gauges are what its status says; what it does not say is absent.
func TestCrawlerSamples(t *testing.T) {
	d := func(ms int) metav1.Duration { return metav1.Duration{Duration: time.Duration(ms) * time.Millisecond} }
	cond := func(typ string, s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason}
	}
	crawler := func(f func(*isov1.CrawlerVM)) *isov1.CrawlerVM {
		c := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", Generation: 2}}
		c.Spec.ErrorBudget.Tolerance = d(50)
		c.Spec.ErrorBudget.Objective = "99"
		f(c)
		return c
	}
	// Every crawler has its tolerance, objective, node-lost and down gauges.
	always := []crawlerSample{{gauge: gaugeTolerance, value: 0.05}, {gauge: gaugeObjective, value: 0.99}}
	with := func(s ...crawlerSample) []crawlerSample { return append(append([]crawlerSample{}, always...), s...) }
	probe := &isov1.ProbeResult{ObservedGeneration: 2, IntervalError: &isov1.MeasuredIntervalError{Intervals: 1000, OverTolerance: ptr.To[int64](5),
		P50: d(1), P99: d(2), P99999: d(4), AtObjective: d(3)}, RTNIC: &isov1.MeasuredRoundTrips{Misses: 7}}
	measured := []crawlerSample{{gauge: gaugeMeasured, quantile: "0.5", value: 0.001}, {gauge: gaugeMeasured, quantile: "0.99", value: 0.002},
		{gauge: gaugeMeasured, quantile: "0.99999", value: 0.004}, {gauge: gaugeMeasured, quantile: "objective", value: 0.003}}
	cases := map[string]struct {
		cvm  *isov1.CrawlerVM
		want []crawlerSample
	}{
		"new: no conditions, no node, no probe": {
			cvm:  crawler(func(*isov1.CrawlerVM) {}),
			want: with(crawlerSample{gauge: gaugeNodeLost}, crawlerSample{gauge: gaugeDown}),
		},
		"conditions: True is 1, False 0, Unknown absent": {
			cvm: crawler(func(c *isov1.CrawlerVM) {
				c.Status.Conditions = []metav1.Condition{cond(isov1.ConditionPlaced, metav1.ConditionTrue, "Placed"),
					cond(isov1.ConditionReady, metav1.ConditionFalse, isov1.ReasonVMIPending), cond(isov1.ConditionSLOConfirmed, metav1.ConditionUnknown, "Pending"),
					cond(isov1.ConditionAtRisk, metav1.ConditionFalse, "Within")}
			}),
			want: with(crawlerSample{gauge: gaugePlaced, value: 1}, crawlerSample{gauge: gaugeReady}, crawlerSample{gauge: gaugeAtRisk},
				crawlerSample{gauge: gaugeNodeLost}, crawlerSample{gauge: gaugeDown}),
		},
		"node lost, in an outage, with a prediction": {
			cvm: crawler(func(c *isov1.CrawlerVM) {
				c.Status.Conditions = []metav1.Condition{cond(isov1.ConditionReady, metav1.ConditionFalse, isov1.ReasonNodeLost)}
				c.Status.Outages = []isov1.Outage{{Cause: isov1.OutageNodeLoss}}
				c.Status.Placement = &isov1.PlacementStatus{Node: "n1", PredictedError: ptr.To(d(20))}
			}),
			want: with(crawlerSample{gauge: gaugeReady}, crawlerSample{gauge: gaugeNodeLost, value: 1}, crawlerSample{gauge: gaugeDown, value: 1},
				crawlerSample{gauge: gaugePredicted, value: 0.02}),
		},
		"an outage that ended": {
			cvm: crawler(func(c *isov1.CrawlerVM) {
				c.Status.Outages = []isov1.Outage{{Cause: isov1.OutageCrash, End: &metav1.Time{}}}
			}),
			want: with(crawlerSample{gauge: gaugeNodeLost}, crawlerSample{gauge: gaugeDown}),
		},
		"a probe of the current spec: its errors, misses and budget": {
			cvm: crawler(func(c *isov1.CrawlerVM) { c.Status.LastProbe = probe }),
			want: with(append([]crawlerSample{{gauge: gaugeNodeLost}, {gauge: gaugeDown}, {gauge: gaugeBudgetRemaining, value: 0.5}},
				append(measured, crawlerSample{gauge: gaugeRTNICMisses, value: 7})...)...),
		},
		"a probe of an earlier spec: no budget": {
			cvm: crawler(func(c *isov1.CrawlerVM) {
				p := *probe
				p.ObservedGeneration = 1
				p.RTNIC = nil
				c.Status.LastProbe = &p
			}),
			want: with(append([]crawlerSample{{gauge: gaugeNodeLost}, {gauge: gaugeDown}}, measured...)...),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := crawlerSamples(nil, tc.cvm)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(crawlerSample{}), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("crawlerSamples (-want +got):\n%s", diff)
			}
		})
	}
}

// A probe's intervals are added once, and only when it finished while this process
// reported.
func TestAddProbe(t *testing.T) {
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	result := func(job string, finished time.Time, over *int64) *isov1.ProbeResult {
		return &isov1.ProbeResult{Job: job, CompletionTime: &metav1.Time{Time: finished},
			IntervalError: &isov1.MeasuredIntervalError{Intervals: 1000, OverTolerance: over}}
	}
	counted := probeCount{job: "p1", intervals: 1000, over: 2}
	cases := map[string]struct {
		from probeCount
		last *isov1.ProbeResult
		want probeCount
	}{
		"no probe yet":                {from: probeCount{}, last: nil, want: probeCount{}},
		"a probe still running":       {from: probeCount{}, last: &isov1.ProbeResult{Job: "p1"}, want: probeCount{}},
		"the first probe":             {from: probeCount{}, last: result("p1", start.Add(time.Minute), ptr.To[int64](2)), want: counted},
		"the same probe again":        {from: counted, last: result("p1", start.Add(time.Minute), ptr.To[int64](2)), want: counted},
		"the next probe adds":         {from: counted, last: result("p2", start.Add(time.Hour), ptr.To[int64](3)), want: probeCount{job: "p2", intervals: 2000, over: 5}},
		"without intervals over":      {from: probeCount{}, last: result("p1", start, nil), want: probeCount{job: "p1", intervals: 1000}},
		"finished before this leader": {from: probeCount{}, last: result("p0", start.Add(-time.Minute), ptr.To[int64](2)), want: probeCount{job: "p0"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, addProbe(tc.from, tc.last, start), cmp.AllowUnexported(probeCount{})); diff != "" {
				t.Errorf("addProbe (-want +got):\n%s", diff)
			}
		})
	}
}
