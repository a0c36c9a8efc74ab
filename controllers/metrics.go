package controllers

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/version"
)

// Results of isochron_probe_runs_total besides the verdicts.
const probeResultCancelled = "Cancelled"

// metrics are the reconciler's Prometheus metrics. The per-crawler gauges are computed
// from each crawler's status in the cache at each scrape (crawlerCollector), so they
// cost no memory between scrapes and go with the crawler; the per-crawler counters are
// added to as probes and outages end. The reconciler owns them and registers them on
// its registry (SetupWithManager).
type metrics struct {
	probeRuns          *prometheus.CounterVec
	probeIntervals     *probeCounters
	outages            *prometheus.CounterVec
	downtime           *prometheus.CounterVec
	placementDecisions *prometheus.CounterVec
	placementDuration  prometheus.Histogram
	placementBatch     prometheus.Histogram
	moves              *prometheus.CounterVec
	calibrationSamples *prometheus.CounterVec
}

// crawlerLabels are the labels of the per-crawler series, then extra.
func crawlerLabels(extra ...string) []string { return append([]string{"namespace", "name"}, extra...) }

func newMetrics(start time.Time) *metrics {
	m := &metrics{
		probeRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "isochron_probe_runs_total",
			Help: "Probe runs that finished, by result: Confirmed, Refuted, Inconclusive, Failed, TimedOut, or Cancelled (outdated spec or VMI).",
		}, []string{"result"}),
		probeIntervals: newProbeCounters(start),
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

// register adds the metrics, the crawler collector and the node collector to reg.
func (m *metrics) register(reg prometheus.Registerer, collectors ...prometheus.Collector) error {
	cs := append([]prometheus.Collector{m.probeRuns, m.probeIntervals, m.placementDecisions, m.placementDuration, m.placementBatch,
		m.moves, m.calibrationSamples, m.outages, m.downtime}, collectors...)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// observe adds the crawler's last probe, as persisted, to its counters (the gauges are
// read from the cache at each scrape: crawlerCollector).
func (m *metrics) observe(cvm *isov1.CrawlerVM) {
	m.probeIntervals.observe(cvm)
}

// forget deletes a deleted crawler's counters.
func (m *metrics) forget(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "name": name}
	m.outages.DeletePartialMatch(l)
	m.downtime.DeletePartialMatch(l)
	m.probeIntervals.forget(types.NamespacedName{Namespace: namespace, Name: name})
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
	held, err := c.r.placer.Held(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.exclusive, err)
		return
	}
	for _, s := range held {
		ch <- prometheus.MustNewConstMetric(c.exclusive, prometheus.GaugeValue, float64(s.ExclusiveMilli)/1000, s.Node)
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(s.FreeMilli)/1000, s.Node)
		ch <- prometheus.MustNewConstMetric(c.crawlers, prometheus.GaugeValue, float64(len(s.Crawlers)), s.Node)
		ch <- prometheus.MustNewConstMetric(c.worst, prometheus.GaugeValue, s.WorstPredicted.Seconds(), s.Node)
		ch <- prometheus.MustNewConstMetric(c.correction, prometheus.GaugeValue, s.Correction, s.Node, string(s.Source))
		ch <- prometheus.MustNewConstMetric(c.samples, prometheus.GaugeValue, float64(s.Samples), s.Node)
	}
}
