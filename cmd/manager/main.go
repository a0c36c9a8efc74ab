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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/rest"
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
	"isochron.io/isochron/internal/access"
	"isochron.io/isochron/internal/memlimit"
	"isochron.io/isochron/internal/version"
)

// setupLog tells how the manager starts.
var setupLog = ctrl.Log.WithName("setup")

func main() {
	o, err := parseOptions(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(2)
	}
	build := version.Get()
	if o.showVersion {
		fmt.Println("manager", build)
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	setupLog.Info("Starting the isochron manager", build.KeysAndValues()...)
	if err := run(ctrl.SetupSignalHandler(), o, build); err != nil {
		setupLog.Error(err, "The manager stopped")
		os.Exit(1)
	}
}

// run runs the manager with options o until ctx ends, or until KubeVirt's API is served
// to a manager that started without it (nil: to start again, watching it).
func run(ctx context.Context, o options, build version.Info) error {
	if err := setMemoryLimit(); err != nil {
		return fmt.Errorf("invalid environment: %w", err)
	}
	if err := registerBuildInfo(ctrlmetrics.Registry, build); err != nil {
		return fmt.Errorf("registering isochron_build_info: %w", err)
	}
	// Informers' initial lists stream in (watch-list: Kubernetes 1.32 and later serve it,
	// and client-go falls back to a list where they do not): the pods of a large cluster
	// are never held whole in memory (nodebooks).
	clientfeatures.ReplaceFeatureGates(watchListGates{clientfeatures.FeatureGates()})
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	mgr, identity, served, err := newManager(cfg, o)
	if err != nil {
		return err
	}
	master, rules, err := loadSettings(ctx, cfg, o)
	if err != nil {
		return err
	}
	if !served {
		return waitForKubeVirt(ctx, mgr)
	}
	r := controllers.NewCrawlerVMReconciler(mgr, controllers.WithNodeAccess(rules), controllers.WithConcurrency(o.concurrency), controllers.WithProbeMasterKey(master),
		controllers.WithReconcileTimeout(o.reconcileTimeout), controllers.WithLeaderIdentity(identity), controllers.WithProbes(o.probes),
		controllers.WithMinMoveInterval(o.minMoveInterval), controllers.WithRefutedNodeMemory(o.refutedMemory), controllers.WithRequestedMoveBudget(o.budget), controllers.WithNodeLostGrace(o.nodeLostGrace),
		controllers.WithUnschedulableGrace(o.unschedulableGrace), controllers.WithReleaseAfter(o.releaseAfter),
		controllers.WithSharedNetworkNamespaces(o.sharedNetworks), controllers.WithRTUplinks(o.rtUplinks))
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the CrawlerVM controller: %w", err)
	}
	// Live while no reconcile runs far past its deadline and the decision lock is not
	// held for long: a wedged manager is restarted.
	if err := mgr.AddHealthzCheck("placement", r.Healthz); err != nil {
		return fmt.Errorf("setting up the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("setting up the ready check: %w", err)
	}
	setupLog.Info("Starting manager")
	return mgr.Start(ctx)
}

// newManager makes the manager of o on cfg: with the Lease of the leader election under
// an identity it returns (empty without --leader-elect), and caching nothing of
// KubeVirt's where the cluster does not serve KubeVirt's API (served false).
func newManager(cfg *rest.Config, o options) (mgr ctrl.Manager, identity string, served bool, err error) {
	mgrOpts := ctrl.Options{
		Scheme:                 controllers.Scheme(),
		Cache:                  controllers.ManagerCacheOptions(),
		Metrics:                metricsOptions(o),
		HealthProbeBindAddress: o.probeAddr,
		PprofBindAddress:       o.pprofAddr,
		LeaderElection:         o.leaderElect,
		LeaseDuration:          &o.leaseDuration,
		RenewDeadline:          &o.renewDeadline,
		RetryPeriod:            &o.retryPeriod,
	}
	if o.leaderElect {
		// The Lease under an identity this process knows, which it writes with each
		// decision for the API server's leader fence (controllers.NewLeaderLock).
		lock, err := controllers.NewLeaderLock(cfg, o.leaderElectionNamespace, o.renewDeadline)
		if err != nil {
			return nil, "", false, fmt.Errorf("setting up leader election: %w", err)
		}
		mgrOpts.LeaderElectionResourceLockInterface, identity = lock, lock.Identity()
	}
	// Without KubeVirt's API the manager only waits for it (waitForKubeVirt), caching
	// nothing of KubeVirt's.
	if served, err = controllers.KubeVirtServed(cfg); err != nil {
		return nil, "", false, fmt.Errorf("telling whether the cluster serves KubeVirt's API: %w", err)
	}
	if !served {
		mgrOpts.Cache = cache.Options{}
	}
	if mgr, err = ctrl.NewManager(cfg, mgrOpts); err != nil {
		return nil, "", false, fmt.Errorf("creating the manager: %w", err)
	}
	return mgr, identity, served, nil
}

// metricsOptions are the metrics endpoint's: HTTPS for callers the API server
// authenticates and authorises unless --metrics-secure=false, with the certificate in
// --metrics-cert-dir where there is one there.
func metricsOptions(o options) metricsserver.Options {
	var tlsOpts []func(*tls.Config)
	if !o.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	opts := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.secureMetrics, TLSOpts: tlsOpts}
	if !o.secureMetrics {
		return opts
	}
	opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	if o.metricsCertDir == "" {
		return opts
	}
	if servingCertIn(o.metricsCertDir) {
		opts.CertDir = o.metricsCertDir
		setupLog.Info("Serving metrics with the certificate in --metrics-cert-dir", "dir", o.metricsCertDir)
	} else {
		setupLog.Info("No tls.crt and tls.key in --metrics-cert-dir: serving metrics with a self-signed certificate, which scrapers cannot verify", "dir", o.metricsCertDir)
	}
	return opts
}

// loadSettings reads, before the manager starts and with a client of its own (the
// manager's cache is not running yet, and it never caches Secrets), the probe master key
// and the administrator's node access rules from the manager's namespace.
func loadSettings(ctx context.Context, cfg *rest.Config, o options) (master []byte, rules access.Rules, err error) {
	direct, err := client.New(cfg, client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		return nil, rules, fmt.Errorf("creating a client: %w", err)
	}
	if master, err = controllers.LoadProbeMasterKey(ctx, direct, o.namespace, o.masterKeySecret); err != nil {
		return nil, rules, fmt.Errorf("reading the probe master key: %w", err)
	}
	rules, found, err := controllers.LoadNodeAccess(ctx, direct, o.namespace)
	if err != nil {
		return nil, rules, fmt.Errorf("invalid node access rules (fix the ConfigMap %s and restart the manager): %w", isov1.NodeAccessConfigMap, err)
	}
	if !found {
		setupLog.Info("No ConfigMap "+isov1.NodeAccessConfigMap+" in the manager's namespace: no namespace's crawlers may tolerate a taint", "namespace", o.namespace)
	}
	return master, rules, nil
}

// waitForKubeVirt runs the manager without KubeVirt's API: every CrawlerVM says it is
// missing, and the process ends (to start again, watching it) once it is served; not a
// crash loop.
func waitForKubeVirt(ctx context.Context, mgr ctrl.Manager) error {
	setupLog.Info("The cluster does not serve KubeVirt's API: waiting for it; every CrawlerVM says so (Ready=False, " + isov1.ReasonKubeVirtNotInstalled + ")")
	if err := controllers.WaitForKubeVirt(mgr, 10*time.Second); err != nil {
		return fmt.Errorf("setting up the wait for KubeVirt: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("setting up the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("setting up the ready check: %w", err)
	}
	err := mgr.Start(ctx)
	if errors.Is(err, controllers.ErrKubeVirtServed) {
		setupLog.Info("KubeVirt's API is served now: exiting, to start again watching it")
		return nil
	}
	return err
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
