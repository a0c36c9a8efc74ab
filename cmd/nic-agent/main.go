// Command nic-agent is isochron's NIC agent: one per node (DaemonSet isochron-nic-agent,
// host network and PID namespace, NET_ADMIN and SYS_NICE only), it programs the egress of
// the node's RT uplinks from the CrawlerVMs placed on the node (controllers/nicagent,
// internal/nic) and runs the RTvNIC study's feedback on their classes (docs/rt-network.md),
// and keeps its dedicated crawlers' vCPU threads realtime where KubeVirt left them not
// (VCPUGuard, internal/hostsched; docs/availability.md).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers"
	"isochron.io/isochron/controllers/nicagent"
	"isochron.io/isochron/internal/nic"
	"isochron.io/isochron/internal/rtnet"
	"isochron.io/isochron/internal/version"
)

func main() {
	var node, probeAddr, show, uplinks, networksConfig string
	flag.StringVar(&node, "node-name", os.Getenv("NODE_NAME"), "The node the agent runs on (the DaemonSet passes spec.nodeName as NODE_NAME).")
	flag.StringVar(&uplinks, "rt-uplinks", os.Getenv(isov1.EnvRTUplinks), "Comma-separated host interfaces the agent may program as RT uplinks, named by the cluster administrator; when empty, read from --networks-config. No other interface is ever touched; none named: none.")
	flag.StringVar(&networksConfig, "networks-config", "isochron-system/"+isov1.NetworksConfigMap, "namespace/name of the ConfigMap whose "+isov1.NetworksRTUplinks+" names the RT uplinks (the administrator's, in the manager's namespace), read through the API server at the agent's start when --rt-uplinks is empty; restart the agents after a change. Empty: none.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8082", "Address of the health and readiness probes.")
	flag.StringVar(&show, "show-uplink", "", "Print what the kernel has on this link's egress (root qdisc, isochron's RT classes and filters) as JSON, and exit: kubectl exec into the agent's pod, whose image holds no tc.")
	showVersion := flag.Bool("version", false, "Print the version, commit, build date and Go version, and exit.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	build := version.Get()
	if *showVersion {
		fmt.Println("nic-agent", build)
		return
	}
	if show != "" {
		os.Exit(showUplink(os.Stdout, show))
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")
	if node == "" {
		log.Error(nil, "No node: set --node-name or NODE_NAME (the DaemonSet sets it from spec.nodeName)")
		os.Exit(1)
	}
	// The agent's cache: its own node's crawlers, launchers, VMIs and Node only.
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 controllers.Scheme(),
		Cache:                  nicagent.CacheOptions(node),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: probeAddr,
	})
	if err != nil {
		log.Error(err, "Unable to create manager")
		os.Exit(1)
	}
	if uplinks == "" && networksConfig != "" {
		if uplinks, err = readUplinks(mgr.GetAPIReader(), networksConfig); err != nil {
			log.Error(err, "Cannot read the RT uplinks")
			os.Exit(1)
		}
	}
	named, err := rtnet.ParseUplinks(uplinks)
	if err != nil {
		log.Error(err, "Invalid --rt-uplinks")
		os.Exit(1)
	}
	if len(named) == 0 {
		log.Info("No RT uplink is named: the agent programs no interface; set rtUplinks in the ConfigMap isochron-networks")
	}
	r := &nicagent.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor(isov1.NICAgent), Node: node, Uplinks: named, Programmer: newHost()}
	if err := r.SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up the NIC agent")
		os.Exit(1)
	}
	g := &nicagent.VCPUGuard{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor(isov1.NICAgent), Node: node, Threads: threads{}}
	if err := g.SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up the vCPU guard")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "Unable to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "Unable to set up ready check")
		os.Exit(1)
	}
	log.Info("Starting the NIC agent", append([]any{"node", node, "rtUplinks", named}, build.KeysAndValues()...)...)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "NIC agent stopped")
		os.Exit(1)
	}
}

// showUplink prints nic.Read of link as JSON to w; the exit code.
func showUplink(w io.Writer, link string) int {
	r, err := nic.Read(link)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nic-agent:", err)
		return 1
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "nic-agent:", err)
		return 1
	}
	return 0
}

// readUplinks reads rtUplinks from the ConfigMap ref (namespace/name) through the API
// server: "" when the ConfigMap or the key is missing (no uplink named).
func readUplinks(api client.Reader, ref string) (string, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return "", fmt.Errorf("--networks-config %q: want namespace/name", ref)
	}
	cm := &corev1.ConfigMap{}
	if err := api.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading ConfigMap %s (--networks-config): %w", ref, err)
	}
	return cm.Data[isov1.NetworksRTUplinks], nil
}
