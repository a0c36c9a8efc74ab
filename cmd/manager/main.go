// Command manager runs the isochron operator.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	clientfeatures "k8s.io/client-go/features"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers"
	"isochron.io/isochron/internal/memlimit"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/rtnet"
	"isochron.io/isochron/internal/slo"
	"isochron.io/isochron/internal/version"
)

// setupLog tells how the manager starts.
var setupLog = ctrl.Log.WithName("setup")

func main() {
	var metricsAddr, probeAddr, pprofAddr string
	var leaderElect, secureMetrics, enableHTTP2 bool
	var metricsCertDir string
	var concurrency, qps, burst int
	var probeImage, probePullSecret, probeCPU, leaderElectionNamespace, namespace, masterKeySecret string
	var probeGrace, probeTTL, minMoveInterval, refutedMemory, nodeLostGrace, unschedulableGrace, releaseAfter, reconcileTimeout time.Duration
	var leaseDuration, renewDeadline, retryPeriod time.Duration
	var showVersion bool
	flag.BoolVar(&showVersion, "version", false, "Print the version, commit, build date and Go version, and exit.")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "Address of the metrics endpoint (\"0\" disables it).")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the health and readiness probes.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "", "Address of Go's pprof endpoints (empty: off), for profiling (make bench-placement).")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader, so that only one replica places crawlers at a time.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease; empty: the manager's own namespace (in a cluster).")
	flag.StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"), "The manager's own namespace, where it keeps the probe master key (default: $POD_NAMESPACE, which config/manager sets).")
	flag.StringVar(&masterKeySecret, "probe-master-key-secret", controllers.DefaultProbeMasterKeySecret, "Secret in --namespace holding the master key of the crawlers' probe credentials; the first manager creates it. Deleting it gives every crawler a new probe key, which a running guest learns only at its next start.")
	flag.DurationVar(&leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long the other replica waits, after the leader last renewed the Lease, before it takes over.")
	flag.DurationVar(&renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader tries to renew the Lease before it gives up leading (and exits).")
	flag.DurationVar(&retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often replicas try to acquire or renew the Lease.")
	flag.DurationVar(&reconcileTimeout, "reconcile-timeout", controllers.DefaultReconcileTimeout, "Deadline of one reconcile of a crawler. The liveness probe fails when a reconcile runs past twice this, or the placement decision lock is held longer than this.")
	flag.BoolVar(&secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS, to callers authenticated and authorised by the API server.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false, "Serve metrics over HTTP/2 (off: HTTP/2 rapid-reset CVEs).")
	flag.StringVar(&metricsCertDir, "metrics-cert-dir", "", "Directory of the metrics endpoint's serving certificate, tls.crt and tls.key (a kubernetes.io/tls Secret mounted there: cert-manager's, or one you issue), reloaded when they change, so that Prometheus verifies it. Empty, or without the files: a self-signed certificate, which no scraper can verify.")
	flag.IntVar(&concurrency, "max-concurrent-reconciles", 16, "CrawlerVMs reconciled at once; those waiting for a node are decided together, in one batch on one reading of the cluster.")
	flag.IntVar(&qps, "kube-api-qps", 200, "Requests per second to the API server (a placement decision writes one status; creating a VMI about three requests). The API server's priority and fairness protects it beyond that.")
	flag.IntVar(&burst, "kube-api-burst", 400, "Burst of requests to the API server.")
	flag.StringVar(&probeImage, "probe-image", slo.DefaultImage, "The rtprobe image the probe Jobs run.")
	flag.StringVar(&probePullSecret, "probe-image-pull-secret", "", "Secret the probe Jobs and the crawlers' agent disks pull --probe-image with, from a private registry: a kubernetes.io/dockerconfigjson Secret of that name in each crawler's namespace (empty: none). Reaches a running crawler's agent disk at its next start.")
	flag.DurationVar(&probeGrace, "probe-grace", 5*time.Minute, "Time a probe Job gets beyond spec.probe.duration to start and report before it is failed as timed out.")
	flag.DurationVar(&probeTTL, "probe-ttl", time.Hour, "How long finished probe Jobs and their pods (with logs) are kept.")
	flag.StringVar(&probeCPU, "probe-cpu", slo.DefaultCPU.String(), "CPU request and limit of the probe pods (Guaranteed). A whole number gets exclusive CPUs under the static CPU Manager; a fraction (e.g. 200m) runs on the shared pool, for nodes too small to spare a CPU.")
	sharedNetworks, rtUplinks := networkFlags(flag.CommandLine, os.Getenv)
	flag.DurationVar(&minMoveInterval, "min-move-interval", slo.DefaultMinMoveInterval, "Least time between two moves of one crawler that probes refute under spec.placement.onRefuted Replace (each is judged by a new probe before the next).")
	flag.DurationVar(&nodeLostGrace, "node-lost-grace", move.DefaultNodeLostGrace, "How long a crawler's node may be not ready (after Kubernetes' own node-monitor grace) before the crawler is presumed down and reported; it starts elsewhere only once the node is fenced.")
	flag.DurationVar(&releaseAfter, "release-after", readiness.DefaultReleaseAfter, "How long a crawler may be down because a person stopped its VM (virtctl stop) or the API server refuses its launcher pod (a ResourceQuota, a policy) before its real-time reservation is released; it is placed again once a launcher of it exists.")
	flag.DurationVar(&unschedulableGrace, "unschedulable-grace", move.DefaultUnschedulableGrace, "How long a crawler's launcher may be unschedulable on its node for a reason of the node (cordoned, a taint it does not tolerate, its CPUs taken) before the crawler starts on another node the model chose (once within --min-move-interval).")
	flag.DurationVar(&refutedMemory, "refuted-node-memory", move.DefaultRefutedMemory, "How long a node where a probe refuted a crawler's SLO is kept from the crawler's moves (at most 8 nodes are remembered per crawler).")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	build := version.Get()
	if showVersion {
		fmt.Println("manager", build)
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	setupLog.Info("Starting the isochron manager", build.KeysAndValues()...)
	if err := setMemoryLimit(); err != nil {
		setupLog.Error(err, "Invalid environment")
		os.Exit(1)
	}

	var tlsOpts []func(*tls.Config)
	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{BindAddress: metricsAddr, SecureServing: secureMetrics, TLSOpts: tlsOpts}
	if secureMetrics && metricsCertDir != "" {
		if servingCertIn(metricsCertDir) {
			metricsOpts.CertDir = metricsCertDir
			setupLog.Info("Serving metrics with the certificate in --metrics-cert-dir", "dir", metricsCertDir)
		} else {
			setupLog.Info("No tls.crt and tls.key in --metrics-cert-dir: serving metrics with a self-signed certificate, which scrapers cannot verify", "dir", metricsCertDir)
		}
	}
	if secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	cpu, err := parseProbeCPU(probeCPU)
	if err != nil {
		setupLog.Error(err, "Invalid flag")
		os.Exit(1)
	}
	if err := checkSecretName("--probe-image-pull-secret", probePullSecret); err != nil {
		setupLog.Error(err, "Invalid flag")
		os.Exit(1)
	}
	shared, err := parseNamespaces(*sharedNetworks)
	if err != nil {
		setupLog.Error(err, "Invalid flag")
		os.Exit(1)
	}
	uplinks, err := rtnet.ParseUplinks(*rtUplinks)
	if err != nil {
		setupLog.Error(err, "Invalid flag --rt-uplinks")
		os.Exit(1)
	}

	if err := registerBuildInfo(ctrlmetrics.Registry, build); err != nil {
		setupLog.Error(err, "Unable to register isochron_build_info")
		os.Exit(1)
	}

	// Informers' initial lists stream in (watch-list: Kubernetes 1.32 and later serve it,
	// and client-go falls back to a list where they do not): the pods of a large cluster
	// are never held whole in memory (nodebooks).
	clientfeatures.ReplaceFeatureGates(watchListGates{clientfeatures.FeatureGates()})
	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(qps), burst
	mgrOpts := ctrl.Options{
		Scheme:                 controllers.Scheme(),
		Cache:                  controllers.ManagerCacheOptions(),
		Metrics:                metricsOpts,
		HealthProbeBindAddress: probeAddr,
		PprofBindAddress:       pprofAddr,
		LeaderElection:         leaderElect,
		LeaseDuration:          &leaseDuration,
		RenewDeadline:          &renewDeadline,
		RetryPeriod:            &retryPeriod,
	}
	identity := ""
	if leaderElect {
		// The Lease under an identity this process knows, which it writes with each
		// decision for the API server's leader fence (controllers.NewLeaderLock).
		lock, err := controllers.NewLeaderLock(cfg, leaderElectionNamespace, renewDeadline)
		if err != nil {
			setupLog.Error(err, "Unable to set up leader election")
			os.Exit(1)
		}
		mgrOpts.LeaderElectionResourceLockInterface, identity = lock, lock.Identity()
	}
	// Without KubeVirt's API the manager only waits for it (waitForKubeVirt), caching
	// nothing of KubeVirt's.
	served, err := controllers.KubeVirtServed(cfg)
	if err != nil {
		setupLog.Error(err, "Unable to tell whether the cluster serves KubeVirt's API")
		os.Exit(1)
	}
	if !served {
		mgrOpts.Cache = cache.Options{}
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		setupLog.Error(err, "Unable to create manager")
		os.Exit(1)
	}
	// Read before the manager starts, with a client of its own (the manager's cache is not
	// running yet, and it never caches Secrets).
	direct, err := client.New(cfg, client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		setupLog.Error(err, "Unable to create a client")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	master, err := controllers.LoadProbeMasterKey(ctx, direct, namespace, masterKeySecret)
	if err != nil {
		setupLog.Error(err, "Unable to read the probe master key")
		os.Exit(1)
	}
	rules, found, err := controllers.LoadNodeAccess(ctx, direct, namespace)
	if err != nil {
		setupLog.Error(err, "Invalid node access rules: fix the ConfigMap and restart the manager")
		os.Exit(1)
	}
	if !found {
		setupLog.Info("No ConfigMap "+isov1.NodeAccessConfigMap+" in the manager's namespace: no namespace's crawlers may tolerate a taint", "namespace", namespace)
	}
	if !served {
		waitForKubeVirt(ctx, mgr)
		return
	}
	r := controllers.NewCrawlerVMReconciler(mgr, controllers.WithNodeAccess(rules), controllers.WithConcurrency(concurrency), controllers.WithProbeMasterKey(master),
		controllers.WithReconcileTimeout(reconcileTimeout), controllers.WithLeaderIdentity(identity),
		controllers.WithProbes(slo.Options{Image: probeImage, Grace: probeGrace, TTL: probeTTL, CPU: cpu, PullSecret: probePullSecret}),
		controllers.WithMinMoveInterval(minMoveInterval), controllers.WithRefutedNodeMemory(refutedMemory), controllers.WithNodeLostGrace(nodeLostGrace), controllers.WithUnschedulableGrace(unschedulableGrace), controllers.WithReleaseAfter(releaseAfter), controllers.WithSharedNetworkNamespaces(shared), controllers.WithRTUplinks(uplinks))
	if err := r.SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "Unable to set up controller", "controller", "CrawlerVM")
		os.Exit(1)
	}
	// Live while no reconcile runs far past its deadline and the decision lock is not
	// held for long: a wedged manager is restarted.
	if err := mgr.AddHealthzCheck("placement", r.Healthz); err != nil {
		setupLog.Error(err, "Unable to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "Unable to set up ready check")
		os.Exit(1)
	}
	setupLog.Info("Starting manager")
	if err := mgr.Start(ctx); err != nil {
		setupLog.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}

// waitForKubeVirt runs the manager without KubeVirt's API: every CrawlerVM says it is
// missing, and the process ends (to start again, watching it) once it is served; not a
// crash loop.
func waitForKubeVirt(ctx context.Context, mgr ctrl.Manager) {
	setupLog.Info("The cluster does not serve KubeVirt's API: waiting for it; every CrawlerVM says so (Ready=False, " + isov1.ReasonKubeVirtNotInstalled + ")")
	if err := controllers.WaitForKubeVirt(mgr, 10*time.Second); err != nil {
		setupLog.Error(err, "Unable to set up the wait for KubeVirt")
		os.Exit(1)
	}
	for name, check := range map[string]healthz.Checker{"healthz": healthz.Ping, "readyz": healthz.Ping} {
		add := mgr.AddHealthzCheck
		if name == "readyz" {
			add = mgr.AddReadyzCheck
		}
		if err := add(name, check); err != nil {
			setupLog.Error(err, "Unable to set up health check")
			os.Exit(1)
		}
	}
	err := mgr.Start(ctx)
	if errors.Is(err, controllers.ErrKubeVirtServed) {
		setupLog.Info("KubeVirt's API is served now: exiting, to start again watching it")
		os.Exit(0)
	}
	if err != nil {
		setupLog.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}

// registerBuildInfo registers isochron_build_info of build on reg (the metrics endpoint's),
// whether or not this replica leads and KubeVirt is served.
func registerBuildInfo(reg prometheus.Registerer, build version.Info) error {
	return reg.Register(controllers.NewBuildInfo(build))
}

// watchListGates are client-go's feature gates with WatchListClient on, unless the
// environment sets it (KUBE_FEATURE_WatchListClient).
type watchListGates struct{ clientfeatures.Gates }

func (g watchListGates) Enabled(f clientfeatures.Feature) bool {
	if _, set := os.LookupEnv("KUBE_FEATURE_" + string(clientfeatures.WatchListClient)); f == clientfeatures.WatchListClient && !set {
		return true
	}
	return g.Gates.Enabled(f)
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

// parseNamespaces reads --shared-network-namespaces: namespace names separated by commas
// (spaces around them ignored, as the ValidatingAdmissionPolicy ignores them).
func parseNamespaces(s string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			return nil, fmt.Errorf("--shared-network-namespaces: %q is not a namespace name: %s", n, strings.Join(errs, "; "))
		}
		out = append(out, n)
	}
	return out, nil
}

// servingCertIn says whether dir holds a serving certificate and its key as a
// kubernetes.io/tls Secret mounts them (tls.crt, tls.key).
func servingCertIn(dir string) bool {
	for _, f := range []string{"tls.crt", "tls.key"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

// setMemoryLimit sets the Go runtime's soft memory limit to memlimit.Percent of the
// container's (memlimit.EnvVar, which config/manager sets from limits.memory), unless
// GOMEMLIMIT says otherwise; outside a container, with neither, there is none.
func setMemoryLimit() error {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		setupLog.Info("Go memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return nil
	}
	v, ok := os.LookupEnv(memlimit.EnvVar)
	if !ok {
		return nil
	}
	soft, err := memlimit.Soft(v)
	if err != nil {
		return err
	}
	debug.SetMemoryLimit(soft)
	setupLog.Info("Go memory limit derived from the container's", "containerLimitBytes", v, "percent", memlimit.Percent, "softLimitBytes", soft)
	return nil
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
