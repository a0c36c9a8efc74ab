package controllers

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"isochron.io/isochron/internal/access"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/slo"
)

// Option sets up a CrawlerVMReconciler (Kueue's style: WithClock and the like).
type Option func(*CrawlerVMReconciler)

// WithConcurrency reconciles up to n crawlers at once (default 1).
func WithConcurrency(n int) Option { return func(r *CrawlerVMReconciler) { r.concurrency = n } }

// WithProbes sets the probe Jobs' image and timing (default slo.DefaultOptions).
func WithProbes(o slo.Options) Option { return func(r *CrawlerVMReconciler) { r.probes = o } }

// WithClock tells the reconciler the time: tests pass a fake clock to step through
// schedules, backoffs and rate limits without sleeping.
func WithClock(c clock.PassiveClock) Option { return func(r *CrawlerVMReconciler) { r.clock = c } }

// WithMinMoveInterval sets the least time between two moves of one refuted crawler under
// spec.placement.onRefuted Replace (default slo.DefaultMinMoveInterval).
func WithMinMoveInterval(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.minMoveInterval = d }
}

// WithRefutedNodeMemory sets how long a node where a probe refuted a crawler's SLO is
// kept from the crawler's moves (default move.DefaultRefutedMemory).
func WithRefutedNodeMemory(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.refutedMemory = d }
}

// WithRequestedMoveBudget bounds the moves asked for outside isochron: migrations someone
// created, evictions on nodes nobody cordoned (default move.DefaultBudget).
func WithRequestedMoveBudget(b move.Budget) Option {
	return func(r *CrawlerVMReconciler) { r.budget = b }
}

// WithNodeLostGrace sets how long a crawler's node may be not ready before the crawler is
// presumed down (default move.DefaultNodeLostGrace).
func WithNodeLostGrace(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.nodeLostGrace = d }
}

// WithUnschedulableGrace sets how long a crawler's launcher may be unschedulable on its
// node for a reason of the node (cordoned, tainted, its CPUs taken) before the crawler
// starts on another node (default move.DefaultUnschedulableGrace).
func WithUnschedulableGrace(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.unschedulableGrace = d }
}

// WithReleaseAfter sets how long a crawler may be down because a person stopped it or
// the API server refuses its launcher before it gives up its reservation (default
// readiness.DefaultReleaseAfter).
func WithReleaseAfter(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.releaseAfter = d }
}

// WithAPIPollInterval sets how often the operator asks whether an optional API it waits
// for is served (default DefaultAPIPollInterval).
func WithAPIPollInterval(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.apiPollInterval = d }
}

// WithSharedNetworkNamespaces lets crawlers of every namespace use the RT networks of
// namespaces (Multus' globalNamespaces); otherwise a crawler uses only its own
// namespace's (render.NetworkAllowed).
func WithSharedNetworkNamespaces(namespaces []string) Option {
	return func(r *CrawlerVMReconciler) { r.sharedNetworks = namespaces }
}

// WithRTUplinks names the host interfaces an RT network may name as its uplink
// (render.UplinkAllowed); the NIC agents are given the same list.
func WithRTUplinks(uplinks []string) Option {
	return func(r *CrawlerVMReconciler) { r.rtUplinks = uplinks }
}

// WithNodeAccess sets the administrator's rules of which nodes each namespace's crawlers
// may reach (LoadNodeAccess); without it no namespace may tolerate a taint.
func WithNodeAccess(rules access.Rules) Option {
	return func(r *CrawlerVMReconciler) { r.access = rules }
}

// WithProbeMasterKey sets the probe master key (LoadProbeMasterKey), which every replica
// must share. Without it the reconciler draws a key of its own, good for one process: a
// test, or isochronctl.
func WithProbeMasterKey(key []byte) Option { return func(r *CrawlerVMReconciler) { r.master = key } }

// WithReconcileTimeout sets one reconcile's deadline (default DefaultReconcileTimeout).
func WithReconcileTimeout(d time.Duration) Option {
	return func(r *CrawlerVMReconciler) { r.reconcileTimeout = d }
}

// WithLeaderIdentity tells the reconciler the identity under which this replica holds
// the leader election Lease (NewLeaderLock): it writes it with every change of a
// reservation (status.decidedBy), which the API server's leader fence admits only while
// the Lease names it.
func WithLeaderIdentity(id string) Option { return func(r *CrawlerVMReconciler) { r.identity = id } }

// WithRegistry registers the reconciler's metrics on reg instead of the manager's metrics
// endpoint (controller-runtime's registry), as when a test runs several replicas in one
// process.
func WithRegistry(reg prometheus.Registerer) Option {
	return func(r *CrawlerVMReconciler) { r.registry = reg }
}
