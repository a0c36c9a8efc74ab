package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	isov1 "isochron.io/isochron/api/v1alpha1"
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
	sloConfirmed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "isochron_crawler_slo_confirmed",
		Help: "The SLOConfirmed condition: 1 when the last probe of the current spec confirmed the crawler's SLO, 0 when it did not (refuted, inconclusive, failed); absent while unknown.",
	}, []string{"namespace", "name"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(probeRuns, predictedError, measuredError, toleranceSeconds, rtnicMisses, sloConfirmed)
	for _, v := range []isov1.ProbeVerdict{isov1.VerdictConfirmed, isov1.VerdictRefuted, isov1.VerdictInconclusive, isov1.VerdictFailed, isov1.VerdictTimedOut, "Cancelled"} {
		probeRuns.WithLabelValues(string(v)) // every result from 0, so rates work from the start
	}
}

// observe sets the crawler's gauges from its status.
func observe(cvm *isov1.CrawlerVM) {
	ns, name := cvm.Namespace, cvm.Name
	toleranceSeconds.WithLabelValues(ns, name).Set(cvm.Spec.ErrorBudget.Tolerance.Seconds())
	if p := cvm.Status.Placement; p != nil && p.PredictedError != nil {
		predictedError.WithLabelValues(ns, name).Set(p.PredictedError.Seconds())
	} else {
		predictedError.DeleteLabelValues(ns, name)
	}
	last := cvm.Status.LastProbe
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
	switch c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionSLOConfirmed); {
	case c != nil && c.Status == metav1.ConditionTrue:
		sloConfirmed.WithLabelValues(ns, name).Set(1)
	case c != nil && c.Status == metav1.ConditionFalse:
		sloConfirmed.WithLabelValues(ns, name).Set(0)
	default:
		sloConfirmed.DeleteLabelValues(ns, name)
	}
}

// forget deletes a deleted crawler's series.
func forget(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "name": name}
	for _, g := range []*prometheus.GaugeVec{predictedError, measuredError, toleranceSeconds, rtnicMisses, sloConfirmed} {
		g.DeletePartialMatch(l)
	}
}
