package controllers

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/outage"
	"isochron.io/isochron/internal/slo"
)

// crawlerGauge is one of the gauges with a series per crawler.
type crawlerGauge int

const (
	gaugePredicted crawlerGauge = iota
	gaugeMeasured               // by quantile
	gaugeTolerance
	gaugeRTNICMisses
	gaugeObjective
	gaugeBudgetRemaining
	gaugePlaced
	gaugeReady
	gaugeSLOConfirmed
	gaugeAtRisk
	gaugeNodeLost
	gaugeDown
	crawlerGauges // how many there are
)

// crawlerGaugeOpts are each per-crawler gauge's name and help.
var crawlerGaugeOpts = [crawlerGauges]prometheus.Opts{
	gaugePredicted: {Name: "isochron_crawler_predicted_interval_error_seconds",
		Help: "Interval error the contention model predicts for the crawler at its objective percentile on its node."},
	gaugeMeasured: {Name: "isochron_crawler_measured_interval_error_seconds",
		Help: "Interval error the last probe measured, by quantile (0.5, 0.99, 0.99999, and \"objective\" for the crawler's objective percentile)."},
	gaugeTolerance: {Name: "isochron_crawler_interval_error_tolerance_seconds",
		Help: "The crawler's spec.errorBudget.tolerance."},
	gaugeRTNICMisses: {Name: "isochron_crawler_rtnic_deadline_misses",
		Help: "RT-NIC round trips that missed the deadline or were lost in the last probe."},
	gaugeObjective: {Name: "isochron_crawler_objective_ratio",
		Help: "The crawler's spec.errorBudget.objective as a ratio (0.99999 for 99.999%); 1 minus it is the error budget."},
	gaugeBudgetRemaining: {Name: "isochron_crawler_error_budget_remaining_ratio",
		Help: "Share of the error budget the last probe of the current spec left: 1 - (intervals over tolerance / intervals) / (1 - objective). Negative when overspent."},
	gaugePlaced: {Name: "isochron_crawler_placed",
		Help: "The Placed condition: 1 when a node holds the crawler, 0 when none can (see the condition's message)."},
	gaugeReady: {Name: "isochron_crawler_ready",
		Help: "The Ready condition: 1 when the crawler's VMI runs on its node."},
	gaugeSLOConfirmed: {Name: "isochron_crawler_slo_confirmed",
		Help: "The SLOConfirmed condition: 1 when the last probe of the current spec confirmed the crawler's SLO, 0 when it did not (refuted, inconclusive, failed); absent while unknown."},
	gaugeAtRisk: {Name: "isochron_crawler_at_risk",
		Help: "The AtRisk condition: 1 when the crawler's prediction on its node, refreshed for what is there now, exceeds its tolerance, 0 while within; absent while it holds no node."},
	gaugeNodeLost: {Name: "isochron_crawler_node_lost",
		Help: "1 while the crawler's node has not been ready for longer than --node-lost-grace (Ready=False, reason NodeLost): the crawler is presumed down until the node is fenced and it starts elsewhere; 0 otherwise."},
	gaugeDown: {Name: "isochron_crawler_down",
		Help: "1 while the crawler is in an outage (status.outages: it ran and stopped running), 0 otherwise; avg_over_time of it is the share of time it was down, which the downtime burn-rate alerts compare to the error budget."},
}

// crawlerSample is the value of one of a crawler's gauges; quantile is set for
// gaugeMeasured only.
type crawlerSample struct {
	gauge    crawlerGauge
	quantile string
	value    float64
}

// crawlerSamples appends to dst the values of cvm's gauges as its status says. A
// condition's gauge is absent while the condition is Unknown or missing; the prediction
// while the crawler holds no node or has none; the budget remaining without a probe of
// the current spec; the measured errors and RT-NIC misses without a probe that reported
// them.
func crawlerSamples(dst []crawlerSample, cvm *isov1.CrawlerVM) []crawlerSample {
	add := func(g crawlerGauge, v float64) { dst = append(dst, crawlerSample{gauge: g, value: v}) }
	obj := cvm.Spec.ErrorBudget.ObjectivePercent()
	add(gaugeTolerance, cvm.Spec.ErrorBudget.Tolerance.Seconds())
	add(gaugeObjective, obj/100)
	for _, cg := range []struct {
		gauge crawlerGauge
		typ   string
	}{{gaugePlaced, isov1.ConditionPlaced}, {gaugeReady, isov1.ConditionReady}, {gaugeAtRisk, isov1.ConditionAtRisk}, {gaugeSLOConfirmed, isov1.ConditionSLOConfirmed}} {
		switch c := apimeta.FindStatusCondition(cvm.Status.Conditions, cg.typ); {
		case c != nil && c.Status == metav1.ConditionTrue:
			add(cg.gauge, 1)
		case c != nil && c.Status == metav1.ConditionFalse:
			add(cg.gauge, 0)
		}
	}
	lost := 0.0
	if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionReady); c != nil && c.Reason == isov1.ReasonNodeLost {
		lost = 1
	}
	add(gaugeNodeLost, lost)
	down := 0.0
	if outage.Ongoing(cvm.Status.Outages) != nil {
		down = 1
	}
	add(gaugeDown, down)
	if p := cvm.Status.Placement; p != nil && p.PredictedError != nil {
		add(gaugePredicted, p.PredictedError.Seconds())
	}
	last := cvm.Status.LastProbe
	if last != nil && last.IntervalError != nil && last.IntervalError.OverTolerance != nil && last.ObservedGeneration == cvm.Generation {
		if remaining, known := slo.BudgetRemaining(*last.IntervalError.OverTolerance, last.IntervalError.Intervals, obj); known {
			add(gaugeBudgetRemaining, remaining)
		}
	}
	if last != nil && last.IntervalError != nil {
		ie := last.IntervalError
		for _, q := range []struct {
			quantile string
			d        metav1.Duration
		}{{"0.5", ie.P50}, {"0.99", ie.P99}, {"0.99999", ie.P99999}, {"objective", ie.AtObjective}} {
			dst = append(dst, crawlerSample{gauge: gaugeMeasured, quantile: q.quantile, value: q.d.Seconds()})
		}
	}
	if last != nil && last.RTNIC != nil {
		add(gaugeRTNICMisses, float64(last.RTNIC.Misses))
	}
	return dst
}

// crawlerCollector reports, at each scrape, every crawler's gauges (crawlerSamples) from
// the crawlers in the cache: their statuses as persisted. Held in gauge vectors, their
// series were a fifth of the manager's heap with 10,000 crawlers (docs/placement.md).
// Only the leader reports, like the node collector.
type crawlerCollector struct {
	cache  client.Reader
	leader <-chan struct{}
	descs  [crawlerGauges]*prometheus.Desc
}

func newCrawlerCollector(cache client.Reader, leader <-chan struct{}) *crawlerCollector {
	c := &crawlerCollector{cache: cache, leader: leader}
	for g, o := range crawlerGaugeOpts {
		labels := crawlerLabels()
		if crawlerGauge(g) == gaugeMeasured {
			labels = crawlerLabels("quantile")
		}
		c.descs[g] = prometheus.NewDesc(o.Name, o.Help, labels, nil)
	}
	return c
}

func (c *crawlerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *crawlerCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.leader:
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Only read: the cache's own objects, not copies.
	cvms := &isov1.CrawlerVMList{}
	if err := c.cache.List(ctx, cvms, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(c.descs[gaugeReady], err)
		return
	}
	var samples []crawlerSample
	for i := range cvms.Items {
		cvm := &cvms.Items[i]
		samples = crawlerSamples(samples[:0], cvm)
		for _, s := range samples {
			labels := []string{cvm.Namespace, cvm.Name}
			if s.gauge == gaugeMeasured {
				labels = append(labels, s.quantile)
			}
			ch <- prometheus.MustNewConstMetric(c.descs[s.gauge], prometheus.GaugeValue, s.value, labels...)
		}
	}
}

// probeCount is what a crawler's probes added to its counters: the intervals they
// measured and those over its tolerance, and the probe Job last counted.
type probeCount struct {
	job             string
	intervals, over float64
}

// addProbe is c with the probe result last added, once per probe Job, and only when it
// finished at or after start (when this process began reporting: a previous leader
// counted those before).
func addProbe(c probeCount, last *isov1.ProbeResult, start time.Time) probeCount {
	if last == nil || last.IntervalError == nil || last.CompletionTime == nil || c.job == last.Job {
		return c
	}
	c.job = last.Job
	if last.CompletionTime.Time.Before(start.Truncate(time.Second)) {
		return c
	}
	c.intervals += float64(last.IntervalError.Intervals)
	if over := last.IntervalError.OverTolerance; over != nil {
		c.over += float64(*over)
	}
	return c
}

// probeCounters are the per-crawler probe interval counters of the crawlers this
// process reconciled (from 0, so that increase() over a window sees a crawler's first
// probe too), reported at each scrape. A probeCount per crawler instead of two series
// in counter vectors: those were 10 MB of the heap with 10,000 crawlers.
type probeCounters struct {
	intervals, over *prometheus.Desc
	start           time.Time
	mu              sync.Mutex
	by              map[types.NamespacedName]probeCount
}

func newProbeCounters(start time.Time) *probeCounters {
	return &probeCounters{start: start, by: map[types.NamespacedName]probeCount{},
		intervals: prometheus.NewDesc("isochron_crawler_probe_intervals_total",
			"Intervals the crawler's probes measured, counted when each probe finishes.", crawlerLabels(), nil),
		over: prometheus.NewDesc("isochron_crawler_probe_intervals_over_tolerance_total",
			"Intervals whose error exceeded the crawler's tolerance (missing requests included), counted when each probe finishes.", crawlerLabels(), nil)}
}

// observe adds the crawler's last probe, as persisted.
func (p *probeCounters) observe(cvm *isov1.CrawlerVM) {
	key := types.NamespacedName{Namespace: cvm.Namespace, Name: cvm.Name}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.by[key] = addProbe(p.by[key], cvm.Status.LastProbe, p.start)
}

// forget deletes a deleted crawler's counters.
func (p *probeCounters) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.by, key)
}

func (p *probeCounters) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.intervals
	ch <- p.over
}

func (p *probeCounters) Collect(ch chan<- prometheus.Metric) {
	// Sent from a copy: a reconcile's observe does not wait for the scrape.
	p.mu.Lock()
	by := maps.Clone(p.by)
	p.mu.Unlock()
	for key, c := range by {
		ch <- prometheus.MustNewConstMetric(p.intervals, prometheus.CounterValue, c.intervals, key.Namespace, key.Name)
		ch <- prometheus.MustNewConstMetric(p.over, prometheus.CounterValue, c.over, key.Namespace, key.Name)
	}
}
