package main

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/resource"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/slo"
)

// defaults are the manager's options without a flag or an environment variable.
func defaults() options {
	return options{
		metricsAddr: ":8443", probeAddr: ":8081", secureMetrics: true,
		leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second,
		masterKeySecret: controllers.DefaultProbeMasterKeySecret, reconcileTimeout: controllers.DefaultReconcileTimeout,
		concurrency: 16, qps: 200, burst: 400,
		probes:          slo.Options{Image: slo.DefaultImage, Grace: 5 * time.Minute, TTL: time.Hour, CPU: slo.DefaultCPU},
		minMoveInterval: slo.DefaultMinMoveInterval, nodeLostGrace: move.DefaultNodeLostGrace, releaseAfter: readiness.DefaultReleaseAfter,
		unschedulableGrace: move.DefaultUnschedulableGrace, refutedMemory: move.DefaultRefutedMemory,
		budget: move.DefaultBudget,
	}
}

// The manager's flags as config/manager and an administrator give them: each valid set
// is read into the options it says, each invalid one refused with an error that names
// the flag and what to give it.
func TestParseOptions(t *testing.T) {
	tests := map[string]struct {
		args []string
		env  map[string]string
		want func(*options) // the changes to defaults(); nil for an invalid set
		// wantErr are what the error must say: the flag, and the fix.
		wantErr []string
	}{
		"no flags: the defaults": {want: func(*options) {}},
		"config/manager's: leader election, its namespace, the settings' variables": {
			args: []string{"--leader-elect", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8443", "--probe-image=isochron/rtprobe:v0.1.0"},
			env:  map[string]string{"POD_NAMESPACE": "isochron-system", isov1.EnvSharedNetworkNamespaces: "rt-shared, tenant-b", isov1.EnvRTUplinks: "eth1,eth2"},
			want: func(o *options) {
				o.leaderElect, o.namespace, o.probes.Image = true, "isochron-system", "isochron/rtprobe:v0.1.0"
				o.sharedNetworks, o.rtUplinks = []string{"rt-shared", "tenant-b"}, []string{"eth1", "eth2"}
			},
		},
		"flags win over the environment, an empty one too": {
			args: []string{"--namespace=other", "--shared-network-namespaces=", "--rt-uplinks=eth3"},
			env:  map[string]string{"POD_NAMESPACE": "isochron-system", isov1.EnvSharedNetworkNamespaces: "rt-shared", isov1.EnvRTUplinks: "eth1"},
			want: func(o *options) { o.namespace, o.rtUplinks = "other", []string{"eth3"} },
		},
		"probes on a small node from a private registry": {
			args: []string{"--probe-cpu=200m", "--probe-image-pull-secret=regcred", "--probe-grace=1m", "--probe-ttl=10m"},
			want: func(o *options) {
				o.probes.CPU, o.probes.PullSecret, o.probes.Grace, o.probes.TTL = resource.MustParse("200m"), "regcred", time.Minute, 10*time.Minute
			},
		},
		"the manager's own durations, metrics, API rate and logging": {
			args: []string{"--leader-elect", "--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=5s",
				"--reconcile-timeout=1m", "--min-move-interval=2h", "--node-lost-grace=30s", "--release-after=5m", "--unschedulable-grace=1m",
				"--refuted-node-memory=48h", "--requested-move-interval=1h", "--requested-moves-per-namespace=2", "--max-concurrent-reconciles=4", "--kube-api-qps=50", "--kube-api-burst=100",
				"--metrics-secure=false", "--metrics-cert-dir=/certs", "--enable-http2", "--pprof-bind-address=:6060",
				"--probe-master-key-secret=key", "--leader-election-namespace=elsewhere", "--zap-log-level=debug", "--kubeconfig=/dev/null"},
			want: func(o *options) {
				o.leaderElect, o.leaseDuration, o.renewDeadline, o.retryPeriod = true, 30*time.Second, 20*time.Second, 5*time.Second
				o.reconcileTimeout, o.minMoveInterval, o.nodeLostGrace, o.releaseAfter = time.Minute, 2*time.Hour, 30*time.Second, 5*time.Minute
				o.unschedulableGrace, o.refutedMemory = time.Minute, 48*time.Hour
				o.budget = move.Budget{Interval: time.Hour, PerNamespace: 2}
				o.concurrency, o.qps, o.burst = 4, 50, 100
				o.secureMetrics, o.metricsCertDir, o.enableHTTP2, o.pprofAddr = false, "/certs", true, ":6060"
				o.masterKeySecret, o.leaderElectionNamespace = "key", "elsewhere"
			},
		},
		"leader election's durations are not judged without it": {
			args: []string{"--leader-elect-lease-duration=1s"},
			want: func(o *options) { o.leaseDuration = time.Second },
		},
		"--version": {args: []string{"--version"}, want: func(o *options) { o.showVersion = true }},

		"a probe CPU of zero":             {args: []string{"--probe-cpu=0"}, wantErr: []string{`--probe-cpu="0"`, "must be positive (e.g. 1, or 200m"}},
		"a probe CPU that is no quantity": {args: []string{"--probe-cpu=one"}, wantErr: []string{`--probe-cpu="one"`, "(e.g. 1, 2 or 200m)"}},
		"a pull secret no Secret can be named": {
			args:    []string{"--probe-image-pull-secret=Registry_Creds"},
			wantErr: []string{`--probe-image-pull-secret="Registry_Creds" cannot name a Secret`, "lower case alphanumeric characters"},
		},
		"a shared namespace that is no namespace, from the environment": {
			env:     map[string]string{isov1.EnvSharedNetworkNamespaces: "rt-shared,RT_Net"},
			wantErr: []string{"--shared-network-namespaces", `"RT_Net" is not a namespace name`, "lower case alphanumeric characters"},
		},
		"an uplink that is no interface name": {
			args:    []string{"--rt-uplinks=eth1,bond0/eth2"},
			wantErr: []string{"--rt-uplinks", `"bond0/eth2" is not a Linux interface name (at most 15 characters, none of '/'`},
		},
		"a Lease shorter than its renewal": {
			args:    []string{"--leader-elect", "--leader-elect-lease-duration=5s"},
			wantErr: []string{"--leader-elect-lease-duration=5s must be longer than --leader-elect-renew-deadline=10s", "raise the lease duration or shorten the deadline"},
		},
		"a renewal within a retry": {
			args:    []string{"--leader-elect", "--leader-elect-renew-deadline=2s"},
			wantErr: []string{"--leader-elect-renew-deadline=2s must be longer than 1.2 times --leader-elect-retry-period=2s", "raise the deadline or shorten the period"},
		},
		"no budget of requested moves": {
			args:    []string{"--requested-moves-per-namespace=0"},
			wantErr: []string{"--requested-moves-per-namespace 0: give at least 1, such as 5"},
		},
		"a requested-move interval of zero": {
			args:    []string{"--requested-move-interval=0s"},
			wantErr: []string{"--requested-move-interval 0s: give a positive duration, such as 10m0s"},
		},
		"no retry": {
			args:    []string{"--leader-elect", "--leader-elect-retry-period=0s"},
			wantErr: []string{"--leader-elect-retry-period=0s must be positive (default 2s)"},
		},
		"a duration without its unit": {
			args:    []string{"--probe-ttl=60"},
			wantErr: []string{`invalid value "60" for flag -probe-ttl`, "give it as --help lists it"},
		},
		"a flag misspelt": {
			args:    []string{"--probe-cpus=1"},
			wantErr: []string{"flag provided but not defined: -probe-cpus", "give it as --help lists it"},
		},
		"an argument that is no flag": {
			args:    []string{"--leader-elect", "true"},
			wantErr: []string{`arguments ["true"]`, "the manager takes only flags, which --help lists"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseOptions(tc.args, func(k string) string { return tc.env[k] })
			if tc.want == nil {
				if err == nil {
					t.Fatalf("parseOptions(%q) = %+v, want an error", tc.args, got)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("parseOptions(%q) error %q, want it to say %q", tc.args, err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("parseOptions(%q): %v", tc.args, err)
			}
			want := defaults()
			tc.want(&want)
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(options{}), cmpopts.IgnoreFields(options{}, "zap"),
				cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("parseOptions(%q) (-want +got):\n%s", tc.args, diff)
			}
		})
	}
}

// --help prints the flags and is no error to exit 1 on.
func TestParseOptionsHelp(t *testing.T) {
	if _, err := parseOptions([]string{"--help"}, func(string) string { return "" }); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("parseOptions(--help) error %v, want flag.ErrHelp", err)
	}
}
