package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/rtnet"
	"isochron.io/isochron/internal/slo"
)

// options are the manager's settings, read from its flags (some of which default to an
// environment variable) and checked by parseOptions.
type options struct {
	showVersion bool

	metricsAddr, probeAddr, pprofAddr string
	secureMetrics, enableHTTP2        bool
	metricsCertDir                    string

	leaderElect                               bool
	leaderElectionNamespace                   string
	leaseDuration, renewDeadline, retryPeriod time.Duration

	// namespace is the manager's own, where masterKeySecret is.
	namespace, masterKeySecret string
	reconcileTimeout           time.Duration
	concurrency, qps, burst    int

	// probes are the probe Jobs' settings (but NameKey, which the master key gives).
	probes slo.Options

	minMoveInterval, nodeLostGrace, releaseAfter, unschedulableGrace, refutedMemory time.Duration

	budget move.Budget

	sharedNetworks, rtUplinks []string

	zap zap.Options
}

// rawFlags are the flags whose values parseOptions reads further once they are parsed.
type rawFlags struct {
	probeCPU                *string
	sharedNetworks, uplinks *string
}

// parseOptions reads the manager's command line args (without the program's name);
// getenv gives the environment variables some flags default to (os.Getenv). Its error
// names the flag and what to give it; flag.ErrHelp for -help, whose usage it has printed.
func parseOptions(args []string, getenv func(string) string) (options, error) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	var o options
	raw := o.bind(fs, getenv)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return options{}, err
	} else if err != nil {
		return options{}, fmt.Errorf("%w: give it as --help lists it", err)
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("arguments %q: the manager takes only flags, which --help lists", fs.Args())
	}
	if err := o.read(raw); err != nil {
		return options{}, err
	}
	return o, nil
}

// bind registers the manager's flags on fs, their values going to o.
func (o *options) bind(fs *flag.FlagSet, getenv func(string) string) rawFlags {
	var raw rawFlags
	fs.BoolVar(&o.showVersion, "version", false, "Print the version, commit, build date and Go version, and exit.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address of the metrics endpoint (\"0\" disables it).")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the health and readiness probes.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address of Go's pprof endpoints (empty: off), for profiling (make bench-placement).")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader, so that only one replica places crawlers at a time.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease; empty: the manager's own namespace (in a cluster).")
	fs.StringVar(&o.namespace, "namespace", getenv("POD_NAMESPACE"), "The manager's own namespace, where it keeps the probe master key (default: $POD_NAMESPACE, which config/manager sets).")
	fs.StringVar(&o.masterKeySecret, "probe-master-key-secret", controllers.DefaultProbeMasterKeySecret, "Secret in --namespace holding the master key of the crawlers' probe credentials; the first manager creates it. Deleting it gives every crawler a new probe key, which a running guest learns only at its next start.")
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long the other replica waits, after the leader last renewed the Lease, before it takes over.")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader tries to renew the Lease before it gives up leading (and exits).")
	fs.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often replicas try to acquire or renew the Lease.")
	fs.DurationVar(&o.reconcileTimeout, "reconcile-timeout", controllers.DefaultReconcileTimeout, "Deadline of one reconcile of a crawler. The liveness probe fails when a reconcile runs past twice this, or the placement decision lock is held longer than this.")
	fs.BoolVar(&o.secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS, to callers authenticated and authorised by the API server.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false, "Serve metrics over HTTP/2 (off: HTTP/2 rapid-reset CVEs).")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "Directory of the metrics endpoint's serving certificate, tls.crt and tls.key (a kubernetes.io/tls Secret mounted there: cert-manager's, or one you issue), reloaded when they change, so that Prometheus verifies it. Empty, or without the files: a self-signed certificate, which no scraper can verify.")
	fs.IntVar(&o.concurrency, "max-concurrent-reconciles", 16, "CrawlerVMs reconciled at once; those waiting for a node are decided together, in one batch on one reading of the cluster.")
	fs.IntVar(&o.qps, "kube-api-qps", 200, "Requests per second to the API server (a placement decision writes one status; creating a VMI about three requests). The API server's priority and fairness protects it beyond that.")
	fs.IntVar(&o.burst, "kube-api-burst", 400, "Burst of requests to the API server.")
	fs.StringVar(&o.probes.Image, "probe-image", slo.DefaultImage, "The rtprobe image the probe Jobs run.")
	fs.StringVar(&o.probes.PullSecret, "probe-image-pull-secret", "", "Secret the probe Jobs and the crawlers' agent disks pull --probe-image with, from a private registry: a kubernetes.io/dockerconfigjson Secret of that name in each crawler's namespace (empty: none). Reaches a running crawler's agent disk at its next start.")
	fs.DurationVar(&o.probes.Grace, "probe-grace", 5*time.Minute, "Time a probe Job gets beyond spec.probe.duration to start and report before it is failed as timed out.")
	fs.DurationVar(&o.probes.TTL, "probe-ttl", time.Hour, "How long finished probe Jobs and their pods (with logs) are kept.")
	raw.probeCPU = fs.String("probe-cpu", slo.DefaultCPU.String(), "CPU request and limit of the probe pods (Guaranteed). A whole number gets exclusive CPUs under the static CPU Manager; a fraction (e.g. 200m) runs on the shared pool, for nodes too small to spare a CPU.")
	raw.sharedNetworks, raw.uplinks = networkFlags(fs, getenv)
	fs.DurationVar(&o.minMoveInterval, "min-move-interval", slo.DefaultMinMoveInterval, "Least time between two moves of one crawler that probes refute under spec.placement.onRefuted Replace (each is judged by a new probe before the next).")
	fs.DurationVar(&o.nodeLostGrace, "node-lost-grace", move.DefaultNodeLostGrace, "How long a crawler's node may be not ready (after Kubernetes' own node-monitor grace) before the crawler is presumed down and reported; it starts elsewhere only once the node is fenced.")
	fs.DurationVar(&o.releaseAfter, "release-after", readiness.DefaultReleaseAfter, "How long a crawler may be down because a person stopped its VM (virtctl stop) or the API server refuses its launcher pod (a ResourceQuota, a policy) before its real-time reservation is released; it is placed again once a launcher of it exists.")
	fs.DurationVar(&o.unschedulableGrace, "unschedulable-grace", move.DefaultUnschedulableGrace, "How long a crawler's launcher may be unschedulable on its node for a reason of the node (cordoned, a taint it does not tolerate, its CPUs taken) before the crawler starts on another node the model chose (once within --min-move-interval).")
	fs.DurationVar(&o.budget.Interval, "requested-move-interval", move.DefaultBudget.Interval, "A crawler moves at most once per interval on a request made outside isochron (a migration someone created, an eviction of its launcher on a node nobody cordoned); a drain (the node cordoned) is never held back.")
	fs.IntVar(&o.budget.PerNamespace, "requested-moves-per-namespace", move.DefaultBudget.PerNamespace, "The crawlers of one namespace move at most this many times per --requested-move-interval on requests made outside isochron; a request beyond it waits (an eviction) or is deleted (a migration), with an Event that says until when.")
	fs.DurationVar(&o.refutedMemory, "refuted-node-memory", move.DefaultRefutedMemory, "How long a node where a probe refuted a crawler's SLO is kept from the crawler's moves (at most 8 nodes are remembered per crawler).")
	// --kubeconfig, which ctrl.GetConfig reads (controller-runtime registers it on the
	// process's flag set; this one is the manager's own).
	config.RegisterFlags(fs)
	o.zap = zap.Options{Development: false}
	o.zap.BindFlags(fs)
	return raw
}

// read checks the parsed flags and reads those given as text (raw) into o.
func (o *options) read(raw rawFlags) error {
	var err error
	if o.probes.CPU, err = parseProbeCPU(*raw.probeCPU); err != nil {
		return err
	}
	if err := checkSecretName("--probe-image-pull-secret", o.probes.PullSecret); err != nil {
		return err
	}
	if o.sharedNetworks, err = parseNamespaces(*raw.sharedNetworks); err != nil {
		return err
	}
	if o.rtUplinks, err = rtnet.ParseUplinks(*raw.uplinks); err != nil {
		return fmt.Errorf("--rt-uplinks (or $%s): %w", isov1.EnvRTUplinks, err)
	}
	if err := o.budget.Validate(); err != nil {
		return err
	}
	if o.leaderElect {
		return checkLeaderElection(o.leaseDuration, o.renewDeadline, o.retryPeriod)
	}
	return nil
}

// checkLeaderElection refuses the durations client-go's leader election would refuse
// once the manager started (leaderelection.NewLeaderElector), naming the flags.
func checkLeaderElection(lease, renew, retry time.Duration) error {
	switch {
	case retry <= 0:
		return fmt.Errorf("--leader-elect-retry-period=%s must be positive (default 2s)", retry)
	case float64(renew) <= leaderelection.JitterFactor*float64(retry):
		return fmt.Errorf("--leader-elect-renew-deadline=%s must be longer than %.1f times --leader-elect-retry-period=%s: raise the deadline or shorten the period", renew, leaderelection.JitterFactor, retry)
	case lease <= renew:
		return fmt.Errorf("--leader-elect-lease-duration=%s must be longer than --leader-elect-renew-deadline=%s, or the other replica takes over while the leader still renews: raise the lease duration or shorten the deadline", lease, renew)
	}
	return nil
}

// networkFlags registers --shared-network-namespaces and --rt-uplinks on fs. Each
// defaults to its environment variable (getenv), which config/manager fills from the
// administrator's ConfigMap isochron-networks: a key the administrator never set leaves
// it unset, and the flag empty. A flag given on the command line wins.
func networkFlags(fs *flag.FlagSet, getenv func(string) string) (shared, uplinks *string) {
	shared = fs.String("shared-network-namespaces", getenv(isov1.EnvSharedNetworkNamespaces), "Comma-separated namespaces whose RT networks (NetworkAttachmentDefinitions) CrawlerVMs of every namespace may use, as Multus' globalNamespaces; a crawler may always use its own namespace's. Default: $"+isov1.EnvSharedNetworkNamespaces+", which config/default sets from "+isov1.NetworksSharedNamespaces+" in the ConfigMap "+isov1.NetworksConfigMap+" (its ValidatingAdmissionPolicy reads it too), and leaves unset while the key is missing.")
	uplinks = fs.String("rt-uplinks", getenv(isov1.EnvRTUplinks), "Comma-separated host interfaces the cluster administrator names as RT uplinks: an RT network whose NetworkAttachmentDefinition names another with the annotation "+isov1.AnnotationRTUplink+" is refused (Ready=False, "+isov1.ReasonRTUplinkNotAllowed+"). Default: $"+isov1.EnvRTUplinks+", which config/default sets from "+isov1.NetworksRTUplinks+" in the ConfigMap "+isov1.NetworksConfigMap+" (the NIC agents read the same key), and leaves unset while the key is missing.")
	return shared, uplinks
}

// parseProbeCPU reads --probe-cpu: a positive CPU quantity.
func parseProbeCPU(s string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return q, fmt.Errorf("--probe-cpu=%q is not a CPU quantity (e.g. 1, 2 or 200m): %w", s, err)
	}
	if q.Sign() <= 0 {
		return q, fmt.Errorf("--probe-cpu=%q must be positive (e.g. 1, or 200m on a small test node)", s)
	}
	return q, nil
}

// parseNamespaces reads --shared-network-namespaces as render.SharedNamespaces reads the
// administrator's list (as the ValidatingAdmissionPolicy does).
func parseNamespaces(s string) ([]string, error) {
	namespaces, err := render.SharedNamespaces(s)
	if err != nil {
		return nil, fmt.Errorf("--shared-network-namespaces (or $%s): %w", isov1.EnvSharedNetworkNamespaces, err)
	}
	return namespaces, nil
}

// checkSecretName refuses a value of flag that cannot name a Secret ("" names none).
func checkSecretName(flag, name string) error {
	if name == "" {
		return nil
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("%s=%q cannot name a Secret: %s", flag, name, strings.Join(errs, "; "))
	}
	return nil
}
