package controllers

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/outage"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/slo"
	"isochron.io/isochron/internal/version"
)

// Results of isochron_probe_runs_total besides the verdicts.
const probeResultCancelled = "Cancelled"

// metrics are the reconciler's Prometheus metrics. Per-crawler gauges are set from
// status on every reconcile, so a new leader reports them as soon as it has reconciled
// each crawler, and they are deleted with the crawler. The reconciler owns them and
// registers them on its registry (SetupWithManager).
type metrics struct {
	probeRuns          *prometheus.CounterVec
	predictedError     *prometheus.GaugeVec
	measuredError      *prometheus.GaugeVec
	toleranceSeconds   *prometheus.GaugeVec
	rtnicMisses        *prometheus.GaugeVec
	objectiveRatio     *prometheus.GaugeVec
	budgetRemaining    *prometheus.GaugeVec
	probeIntervals     *prometheus.CounterVec
	probeIntervalsOver *prometheus.CounterVec
	placed             *prometheus.GaugeVec
	ready              *prometheus.GaugeVec
	sloConfirmed       *prometheus.GaugeVec
	atRisk             *prometheus.GaugeVec
	nodeLost           *prometheus.GaugeVec
	down               *prometheus.GaugeVec
	outages            *prometheus.CounterVec
	downtime           *prometheus.CounterVec
	placementDecisions *prometheus.CounterVec
	placementDuration  prometheus.Histogram
	placementBatch     prometheus.Histogram
	moves              *prometheus.CounterVec
	calibrationSamples *prometheus.CounterVec

	// start is when this process began reporting: probe results that finished before it
	// are not added to the counters (a previous leader did).
	start time.Time
	// counted remembers, per crawler (namespace/name), the probe Job whose intervals
	// were last added to the counters, so a result is counted once.
	mu      sync.Mutex
	counted map[string]string
}

// crawlerLabels are the labels of the per-crawler series, then extra.
func crawlerLabels(extra ...string) []string { return append([]string{"namespace", "name"}, extra...) }

func newMetrics(start time.Time) *metrics {
	m := &metrics{
		probeRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "isochron_probe_runs_total",
			Help: "Probe runs that finished, by result: Confirmed, Refuted, Inconclusive, Failed, TimedOut, or Cancelled (outdated spec or VMI).",
		}, []string{"result"}),
		predictedError: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "isochron_crawler_predicted_interval_error_seconds",
			Help: "Interval error the contention model predicts for the crawler at its objective percentile on its node.",
		}, crawlerLabels()),
		measuredError: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "isochron_crawler_measured_interval_error_seconds",
			Help: "Interval error the last probe measured, by quantile (0.5, 0.99, 0.99999, and \"objective\" for the crawler's objective percentile).",
		}, crawlerLabels("quantile")),
		toleranceSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "isochron_crawler_interval_error_tolerance_seconds",
			Help: "The crawler's spec.errorBudget.tolerance.",
		}, crawlerLabels()),
		rtnicMisses: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "isochron_crawler_rtnic_deadline_misses",
			Help: "RT-NIC round trips that missed the deadline or were lost in the last probe.",
		}, crawlerLabels()),
		objectiveRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "isochron_crawler_objective_ratio",
			Help: "The crawler's spec.errorBudget.objective as a ratio (0.99999 for 99.999%); 1 minus it is the error budget.",
		}, crawlerLabels()),
		budgetRemaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "isochron_crawler_error_budget_remaining_ratio",
			Help: "Share of the error budget the last probe of the current spec left: 1 - (intervals over tolerance / intervals) / (1 - objective). Negative when overspent.",
		}, crawlerLabels()),
		probeIntervals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "isochron_crawler_probe_intervals_total",
			Help: "Intervals the crawler's probes measured, counted when each probe finishes.",
		}, crawlerLabels()),
		probeIntervalsOver: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "isochron_crawler_probe_intervals_over_tolerance_total",
			Help: "Intervals whose error exceeded the crawler's tolerance (missing requests included), counted when each probe finishes.",
		}, crawlerLabels()),
		placed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "isochron_crawler_placed",
			Help: "The Placed condition: 1 when a node holds the crawler, 0 when none can (see the condition's message).",
		}, crawlerLabels()),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "isochron_crawler_ready",
			Help: "The Ready condition: 1 when the crawler's VMI runs on its node.",
		}, crawlerLabels()),
		sloConfirmed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "isochron_crawler_slo_confirmed",
			Help: "The SLOConfirmed condition: 1 when the last probe of the current spec confirmed the crawler's SLO, 0 when it did not (refuted, inconclusive, failed); absent while unknown.",
		}, crawlerLabels()),
		atRisk: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "isochron_crawler_at_risk",
			Help: "The AtRisk condition: 1 when the crawler's prediction on its node, refreshed for what is there now, exceeds its tolerance, 0 while within; absent while it holds no node.",
		}, crawlerLabels()),
		nodeLost: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "isochron_crawler_node_lost",
			Help: "1 while the crawler's node has not been ready for longer than --node-lost-grace (Ready=False, reason NodeLost): the crawler is presumed down until the node is fenced and it starts elsewhere; 0 otherwise.",
		}, crawlerLabels()),
		down: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "isochron_crawler_down",
			Help: "1 while the crawler is in an outage (status.outages: it ran and stopped running), 0 otherwise; avg_over_time of it is the share of time it was down, which the downtime burn-rate alerts compare to the error budget.",
		}, crawlerLabels()),
		outages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "isochron_crawler_outages_total",
			Help: "Outages of the crawler, by cause (Crash, Move, Drain, NodeLoss, SpecChange, Unplaceable, Stopped), counted when each begins.",
		}, crawlerLabels("cause")),
		downtime: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "isochron_crawler_downtime_seconds_total",
			Help: "Time the crawler was down, by cause, added when each outage ends.",
		}, crawlerLabels("cause")),
		placementDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "isochron_placement_decisions_total",
			Help: "Placement decisions, by result: placed or unschedulable.",
		}, []string{"result"}),
		placementDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "isochron_placement_duration_seconds",
			Help:    "Time one placement decision took: the model's search over the candidate nodes (the cluster is read once per batch, from the cache and the ledger).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 100 us .. 3.3 s
		}),
		placementBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "isochron_placement_batch_size",
			Help:    "Crawlers decided together, on one reading of the cluster (at most --max-concurrent-reconciles).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 8), // 1 .. 128
		}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "isochron_crawler_moves_total",
			Help: "Moves of crawlers to another node, by reason (Refuted, Evacuation, SpecChange), mode (Live, Cold; \"\" for NoNode) and result: Succeeded or Failed when a move ended, NoNode when a crawler had to move and no node fits it.",
		}, []string{"reason", "mode", "result"}),
		calibrationSamples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "isochron_calibration_samples_total",
			Help: "Conclusive probes recorded in their node's calibration, by verdict (Confirmed, Refuted).",
		}, []string{"verdict"}),
		start:   start,
		counted: map[string]string{},
	}
	for _, reason := range []isov1.MoveReason{isov1.MoveRefuted, isov1.MoveEvacuation, isov1.MoveSpecChange} {
		m.moves.WithLabelValues(string(reason), string(isov1.MoveLive), string(isov1.MoveSucceeded))
	}
	m.calibrationSamples.WithLabelValues(string(isov1.VerdictConfirmed))
	m.calibrationSamples.WithLabelValues(string(isov1.VerdictRefuted))
	// Every result from 0, so that rates work from the start.
	m.placementDecisions.WithLabelValues("placed")
	m.placementDecisions.WithLabelValues("unschedulable")
	for _, v := range []isov1.ProbeVerdict{isov1.VerdictConfirmed, isov1.VerdictRefuted, isov1.VerdictInconclusive, isov1.VerdictFailed, isov1.VerdictTimedOut} {
		m.probeRuns.WithLabelValues(string(v))
	}
	m.probeRuns.WithLabelValues(probeResultCancelled)
	return m
}

// crawlerGauges are the gauges with a series per crawler.
func (m *metrics) crawlerGauges() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{m.predictedError, m.measuredError, m.toleranceSeconds, m.rtnicMisses, m.sloConfirmed,
		m.objectiveRatio, m.budgetRemaining, m.placed, m.ready, m.atRisk, m.nodeLost, m.down}
}

// NewBuildInfo is isochron_build_info: 1, labelled with the build of the running binary.
// Every replica of the manager serves it, leader or not (cmd/manager registers it).
func NewBuildInfo(v version.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "isochron_build_info",
		Help:        "Always 1, labelled with the build of the running manager: version (the Makefile's VERSION), commit and goversion.",
		ConstLabels: prometheus.Labels{"version": v.Version, "commit": v.Commit, "goversion": v.GoVersion},
	})
	g.Set(1)
	return g
}

// register adds the metrics, and the node collector, to reg.
func (m *metrics) register(reg prometheus.Registerer, nodes prometheus.Collector) error {
	cs := []prometheus.Collector{m.probeRuns, m.probeIntervals, m.probeIntervalsOver, m.placementDecisions, m.placementDuration, m.placementBatch,
		m.moves, m.calibrationSamples, m.outages, m.downtime, nodes}
	for _, g := range m.crawlerGauges() {
		cs = append(cs, g)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// observe sets the crawler's gauges from its status, as persisted.
func (m *metrics) observe(cvm *isov1.CrawlerVM) {
	ns, name := cvm.Namespace, cvm.Name
	m.toleranceSeconds.WithLabelValues(ns, name).Set(cvm.Spec.ErrorBudget.Tolerance.Seconds())
	obj := cvm.Spec.ErrorBudget.ObjectivePercent()
	m.objectiveRatio.WithLabelValues(ns, name).Set(obj / 100)
	conditionGauge(m.placed, cvm, isov1.ConditionPlaced)
	conditionGauge(m.ready, cvm, isov1.ConditionReady)
	conditionGauge(m.atRisk, cvm, isov1.ConditionAtRisk)
	lost := 0.0
	if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionReady); c != nil && c.Reason == isov1.ReasonNodeLost {
		lost = 1
	}
	m.nodeLost.WithLabelValues(ns, name).Set(lost)
	down := 0.0
	if outage.Ongoing(cvm.Status.Outages) != nil {
		down = 1
	}
	m.down.WithLabelValues(ns, name).Set(down)
	// The counters exist from 0 before the first probe adds to them, so that
	// increase() over a window sees that first probe too.
	m.probeIntervals.WithLabelValues(ns, name)
	m.probeIntervalsOver.WithLabelValues(ns, name)
	m.countProbe(cvm)
	if p := cvm.Status.Placement; p != nil && p.PredictedError != nil {
		m.predictedError.WithLabelValues(ns, name).Set(p.PredictedError.Seconds())
	} else {
		m.predictedError.DeleteLabelValues(ns, name)
	}
	last := cvm.Status.LastProbe
	remaining, known := 0.0, false
	if last != nil && last.IntervalError != nil && last.IntervalError.OverTolerance != nil && last.ObservedGeneration == cvm.Generation {
		remaining, known = slo.BudgetRemaining(*last.IntervalError.OverTolerance, last.IntervalError.Intervals, obj)
	}
	if known {
		m.budgetRemaining.WithLabelValues(ns, name).Set(remaining)
	} else {
		m.budgetRemaining.DeleteLabelValues(ns, name)
	}
	if last != nil && last.IntervalError != nil {
		ie := last.IntervalError
		m.measuredError.WithLabelValues(ns, name, "0.5").Set(ie.P50.Seconds())
		m.measuredError.WithLabelValues(ns, name, "0.99").Set(ie.P99.Seconds())
		m.measuredError.WithLabelValues(ns, name, "0.99999").Set(ie.P99999.Seconds())
		m.measuredError.WithLabelValues(ns, name, "objective").Set(ie.AtObjective.Seconds())
	} else {
		m.measuredError.DeletePartialMatch(prometheus.Labels{"namespace": ns, "name": name})
	}
	if last != nil && last.RTNIC != nil {
		m.rtnicMisses.WithLabelValues(ns, name).Set(float64(last.RTNIC.Misses))
	} else {
		m.rtnicMisses.DeleteLabelValues(ns, name)
	}
	conditionGauge(m.sloConfirmed, cvm, isov1.ConditionSLOConfirmed)
}

// conditionGauge sets g to 1 or 0 from a True or False condition; Unknown or absent
// removes the series.
func conditionGauge(g *prometheus.GaugeVec, cvm *isov1.CrawlerVM, typ string) {
	switch c := apimeta.FindStatusCondition(cvm.Status.Conditions, typ); {
	case c != nil && c.Status == metav1.ConditionTrue:
		g.WithLabelValues(cvm.Namespace, cvm.Name).Set(1)
	case c != nil && c.Status == metav1.ConditionFalse:
		g.WithLabelValues(cvm.Namespace, cvm.Name).Set(0)
	default:
		g.DeleteLabelValues(cvm.Namespace, cvm.Name)
	}
}

// countProbe adds the last probe's intervals to the counters, once per probe Job, and
// only for results that finished while this process reported.
func (m *metrics) countProbe(cvm *isov1.CrawlerVM) {
	last := cvm.Status.LastProbe
	if last == nil || last.IntervalError == nil || last.CompletionTime == nil {
		return
	}
	key := cvm.Namespace + "/" + cvm.Name
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counted[key] == last.Job {
		return
	}
	m.counted[key] = last.Job
	if last.CompletionTime.Time.Before(m.start.Truncate(time.Second)) {
		return
	}
	m.probeIntervals.WithLabelValues(cvm.Namespace, cvm.Name).Add(float64(last.IntervalError.Intervals))
	if over := last.IntervalError.OverTolerance; over != nil {
		m.probeIntervalsOver.WithLabelValues(cvm.Namespace, cvm.Name).Add(float64(*over))
	}
}

// forget deletes a deleted crawler's series.
func (m *metrics) forget(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "name": name}
	for _, g := range m.crawlerGauges() {
		g.DeletePartialMatch(l)
	}
	m.probeIntervals.DeletePartialMatch(l)
	m.probeIntervalsOver.DeletePartialMatch(l)
	m.outages.DeletePartialMatch(l)
	m.downtime.DeletePartialMatch(l)
	m.mu.Lock()
	delete(m.counted, namespace+"/"+name)
	m.mu.Unlock()
}

// nodeCollector reports, at each scrape, every node's exclusive CPUs used and free and
// the worst interval error the model predicts there, computed from the cache. Only the
// leader reports, like the per-crawler series.
type nodeCollector struct {
	r      *CrawlerVMReconciler
	leader <-chan struct{}

	exclusive, free, crawlers, worst, correction, samples *prometheus.Desc
}

func newNodeCollector(r *CrawlerVMReconciler, leader <-chan struct{}) *nodeCollector {
	node := []string{"node"}
	return &nodeCollector{
		r: r, leader: leader,
		exclusive: prometheus.NewDesc("isochron_node_exclusive_cpus",
			"CPUs held exclusively on the node: dedicated crawlers' host CPUs (vCPUs and emulator threads) and other Guaranteed pods' pinned CPUs.", node, nil),
		free: prometheus.NewDesc("isochron_node_free_cpus",
			"Allocatable CPUs on the node left for another crawler (exclusive or shared).", node, nil),
		crawlers: prometheus.NewDesc("isochron_node_crawlers",
			"Crawlers placed on the node.", node, nil),
		worst: prometheus.NewDesc("isochron_node_worst_predicted_interval_error_seconds",
			"Largest interval error the contention model predicts for a crawler on the node (0 without crawlers).", node, nil),
		correction: prometheus.NewDesc("isochron_node_calibration_correction",
			"Correction from probes that multiplies every prediction on the node, by source: Node (its own probes), Class (its profile's nodes'), None (samples from too few namespaces: 1).", []string{"node", "source"}, nil),
		samples: prometheus.NewDesc("isochron_node_calibration_samples",
			"Probe samples of the node's current profile in its NodeCalibration (at most 15: the 3 newest of each of 5 namespaces).", node, nil),
	}
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.exclusive
	ch <- c.free
	ch <- c.crawlers
	ch <- c.worst
	ch <- c.correction
	ch <- c.samples
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.leader:
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inv, err := c.r.placer.gather(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.exclusive, err)
		return
	}
	for _, s := range placement.Summarize(inv.nodes, inv.residents) {
		ch <- prometheus.MustNewConstMetric(c.exclusive, prometheus.GaugeValue, float64(s.ExclusiveMilli)/1000, s.Node)
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(s.FreeMilli)/1000, s.Node)
		ch <- prometheus.MustNewConstMetric(c.crawlers, prometheus.GaugeValue, float64(len(s.Crawlers)), s.Node)
		ch <- prometheus.MustNewConstMetric(c.worst, prometheus.GaugeValue, s.WorstPredicted.Seconds(), s.Node)
		cal := inv.calibration[s.Node]
		ch <- prometheus.MustNewConstMetric(c.correction, prometheus.GaugeValue, cal.correction, s.Node, string(cal.source))
		ch <- prometheus.MustNewConstMetric(c.samples, prometheus.GaugeValue, float64(cal.samples), s.Node)
	}
}
