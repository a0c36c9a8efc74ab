package controllers

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/placement"
)

// Metrics on the manager's endpoint (controller-runtime's registry). Per-crawler gauges
// are set from status on every reconcile, so a new leader reports them as soon as it has
// reconciled each crawler, and they are deleted with the crawler.
var (
	probeRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "isochron_probe_runs_total",
		Help: "Probe runs that finished, by result: Confirmed, Refuted, Inconclusive, Failed, TimedOut, or Cancelled (outdated spec or VMI).",
	}, []string{"result"})
	predictedError = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "isochron_crawler_predicted_interval_error_seconds",
		Help: "Interval error the contention model predicts for the crawler at its objective percentile on its node.",
	}, []string{"namespace", "name"})
	measuredError = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "isochron_crawler_measured_interval_error_seconds",
		Help: "Interval error the last probe measured, by quantile (0.5, 0.99, 0.99999, and \"objective\" for the crawler's objective percentile).",
	}, []string{"namespace", "name", "quantile"})
	toleranceSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "isochron_crawler_interval_error_tolerance_seconds",
		Help: "The crawler's spec.errorBudget.tolerance.",
	}, []string{"namespace", "name"})
	rtnicMisses = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "isochron_crawler_rtnic_deadline_misses",
		Help: "RT-NIC round trips that missed the deadline or were lost in the last probe.",
	}, []string{"namespace", "name"})
	objectiveRatio = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "isochron_crawler_objective_ratio",
		Help: "The crawler's spec.errorBudget.objective as a ratio (0.99999 for 99.999%); 1 minus it is the error budget.",
	}, []string{"namespace", "name"})
	budgetRemaining = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "isochron_crawler_error_budget_remaining_ratio",
		Help: "Share of the error budget the last probe of the current spec left: 1 - (intervals over tolerance / intervals) / (1 - objective). Negative when overspent.",
	}, []string{"namespace", "name"})
	probeIntervals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "isochron_crawler_probe_intervals_total",
		Help: "Intervals the crawler's probes measured, counted when each probe finishes.",
	}, []string{"namespace", "name"})
	probeIntervalsOver = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "isochron_crawler_probe_intervals_over_tolerance_total",
		Help: "Intervals whose error exceeded the crawler's tolerance (missing requests included), counted when each probe finishes.",
	}, []string{"namespace", "name"})
	placed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "isochron_crawler_placed",
		Help: "The Placed condition: 1 when a node holds the crawler, 0 when none can (see the condition's message).",
	}, []string{"namespace", "name"})
	ready = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "isochron_crawler_ready",
		Help: "The Ready condition: 1 when the crawler's VMI runs on its node.",
	}, []string{"namespace", "name"})
	placementDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "isochron_placement_decisions_total",
		Help: "Placement decisions, by result: placed or unschedulable.",
	}, []string{"result"})
	placementDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "isochron_placement_duration_seconds",
		Help:    "Time one placement decision took: reading the cluster from the API server and running the model on the candidates.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15), // 1 ms .. 16 s
	})
	sloConfirmed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "isochron_crawler_slo_confirmed",
		Help: "The SLOConfirmed condition: 1 when the last probe of the current spec confirmed the crawler's SLO, 0 when it did not (refuted, inconclusive, failed); absent while unknown.",
	}, []string{"namespace", "name"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(probeRuns, predictedError, measuredError, toleranceSeconds, rtnicMisses, sloConfirmed,
		objectiveRatio, budgetRemaining, probeIntervals, probeIntervalsOver, placed, ready, placementDecisions, placementDuration)
	placementDecisions.WithLabelValues("placed")
	placementDecisions.WithLabelValues("unschedulable")
	for _, v := range []isov1.ProbeVerdict{isov1.VerdictConfirmed, isov1.VerdictRefuted, isov1.VerdictInconclusive, isov1.VerdictFailed, isov1.VerdictTimedOut, "Cancelled"} {
		probeRuns.WithLabelValues(string(v)) // every result from 0, so rates work from the start
	}
}

// observe sets the crawler's gauges from its status, as persisted.
func observe(cvm *isov1.CrawlerVM) {
	ns, name := cvm.Namespace, cvm.Name
	toleranceSeconds.WithLabelValues(ns, name).Set(cvm.Spec.ErrorBudget.Tolerance.Seconds())
	obj, _ := strconv.ParseFloat(cvm.Spec.ErrorBudget.Objective, 64)
	objectiveRatio.WithLabelValues(ns, name).Set(obj / 100)
	conditionGauge(placed, cvm, isov1.ConditionPlaced)
	conditionGauge(ready, cvm, isov1.ConditionReady)
	// The counters exist from 0 before the first probe adds to them, so that
	// increase() over a window sees that first probe too.
	probeIntervals.WithLabelValues(ns, name)
	probeIntervalsOver.WithLabelValues(ns, name)
	countProbe(cvm)
	if p := cvm.Status.Placement; p != nil && p.PredictedError != nil {
		predictedError.WithLabelValues(ns, name).Set(p.PredictedError.Seconds())
	} else {
		predictedError.DeleteLabelValues(ns, name)
	}
	last := cvm.Status.LastProbe
	if last != nil && last.IntervalError != nil && last.IntervalError.OverTolerance != nil && last.ObservedGeneration == cvm.Generation && obj < 100 {
		ie := last.IntervalError
		budgetRemaining.WithLabelValues(ns, name).Set(1 - float64(*ie.OverTolerance)/float64(ie.Intervals)/(1-obj/100))
	} else {
		budgetRemaining.DeleteLabelValues(ns, name)
	}
	if last != nil && last.IntervalError != nil {
		ie := last.IntervalError
		measuredError.WithLabelValues(ns, name, "0.5").Set(ie.P50.Seconds())
		measuredError.WithLabelValues(ns, name, "0.99").Set(ie.P99.Seconds())
		measuredError.WithLabelValues(ns, name, "0.99999").Set(ie.P99999.Seconds())
		measuredError.WithLabelValues(ns, name, "objective").Set(ie.AtObjective.Seconds())
	} else {
		measuredError.DeletePartialMatch(prometheus.Labels{"namespace": ns, "name": name})
	}
	if last != nil && last.RTNIC != nil {
		rtnicMisses.WithLabelValues(ns, name).Set(float64(last.RTNIC.Misses))
	} else {
		rtnicMisses.DeleteLabelValues(ns, name)
	}
	conditionGauge(sloConfirmed, cvm, isov1.ConditionSLOConfirmed)
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

// counted remembers, per crawler, the probe Job whose intervals were last added to the
// counters, so a result is counted once. Results that finished before this process
// started are not counted (a previous leader did).
var counted = struct {
	sync.Mutex
	job map[string]string
}{job: map[string]string{}}

var processStart = time.Now()

func countProbe(cvm *isov1.CrawlerVM) {
	last := cvm.Status.LastProbe
	if last == nil || last.IntervalError == nil || last.CompletionTime == nil {
		return
	}
	key := cvm.Namespace + "/" + cvm.Name
	counted.Lock()
	defer counted.Unlock()
	if counted.job[key] == last.Job {
		return
	}
	counted.job[key] = last.Job
	if last.CompletionTime.Time.Before(processStart.Truncate(time.Second)) {
		return
	}
	probeIntervals.WithLabelValues(cvm.Namespace, cvm.Name).Add(float64(last.IntervalError.Intervals))
	if over := last.IntervalError.OverTolerance; over != nil {
		probeIntervalsOver.WithLabelValues(cvm.Namespace, cvm.Name).Add(float64(*over))
	}
}

// forget deletes a deleted crawler's series.
func forget(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "name": name}
	for _, g := range []*prometheus.GaugeVec{predictedError, measuredError, toleranceSeconds, rtnicMisses, sloConfirmed, objectiveRatio, budgetRemaining, placed, ready} {
		g.DeletePartialMatch(l)
	}
	probeIntervals.DeletePartialMatch(l)
	probeIntervalsOver.DeletePartialMatch(l)
	counted.Lock()
	delete(counted.job, namespace+"/"+name)
	counted.Unlock()
}

// nodeCollector reports, at each scrape, every node's exclusive CPUs used and free and
// the worst interval error the model predicts there, computed from the cache. Only the
// leader reports, like the per-crawler series.
type nodeCollector struct {
	r      *CrawlerVMReconciler
	leader <-chan struct{}
}

var (
	nodeExclusiveDesc = prometheus.NewDesc("isochron_node_exclusive_cpus",
		"CPUs held exclusively on the node: dedicated crawlers' host CPUs (vCPUs and emulator threads) and other Guaranteed pods' pinned CPUs.", []string{"node"}, nil)
	nodeFreeDesc = prometheus.NewDesc("isochron_node_free_cpus",
		"Allocatable CPUs on the node left for another crawler (exclusive or shared).", []string{"node"}, nil)
	nodeCrawlersDesc = prometheus.NewDesc("isochron_node_crawlers",
		"Crawlers placed on the node.", []string{"node"}, nil)
	nodeWorstDesc = prometheus.NewDesc("isochron_node_worst_predicted_interval_error_seconds",
		"Largest interval error the contention model predicts for a crawler on the node (0 without crawlers).", []string{"node"}, nil)
)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodeExclusiveDesc
	ch <- nodeFreeDesc
	ch <- nodeCrawlersDesc
	ch <- nodeWorstDesc
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.leader:
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inv, err := c.r.gather(ctx, c.r.Client)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(nodeExclusiveDesc, err)
		return
	}
	for _, s := range placement.Summarize(inv.nodes, inv.residents) {
		ch <- prometheus.MustNewConstMetric(nodeExclusiveDesc, prometheus.GaugeValue, float64(s.ExclusiveMilli)/1000, s.Node)
		ch <- prometheus.MustNewConstMetric(nodeFreeDesc, prometheus.GaugeValue, float64(s.FreeMilli)/1000, s.Node)
		ch <- prometheus.MustNewConstMetric(nodeCrawlersDesc, prometheus.GaugeValue, float64(len(s.Crawlers)), s.Node)
		ch <- prometheus.MustNewConstMetric(nodeWorstDesc, prometheus.GaugeValue, s.WorstPredicted.Seconds(), s.Node)
	}
}

// registerNodeCollector adds the node collector to the manager's registry once per
// process (a second manager in the same process, as in tests, shares the first's).
func registerNodeCollector(r *CrawlerVMReconciler, leader <-chan struct{}) error {
	err := ctrlmetrics.Registry.Register(&nodeCollector{r: r, leader: leader})
	if _, dup := err.(prometheus.AlreadyRegisteredError); dup {
		return nil
	}
	return err
}
