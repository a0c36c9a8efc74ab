// Package deploy tests isochron as a user installs it, on a real kube-apiserver and etcd:
// `config/default` (built by the pinned kustomize) and `config/samples` pass a
// server-side dry-run and are installed; the manager binary runs with the
// ServiceAccount and RBAC of config/default (so a missing permission fails here); its
// metrics endpoint answers an authorised scrape and refuses others; re-applying the
// samples after the operator reconciled them changes nothing (no drift for GitOps); and
// re-applying config/default as an upgrade does keeps the administrator's settings.
package deploy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/memlimit"
	"isochron.io/isochron/test/support/binary"
	"isochron.io/isochron/test/support/manifests"
	"isochron.io/isochron/test/support/testenv"
)

const (
	root          = "../.."
	systemNS      = "isochron-system"
	managerSA     = "isochron-controller-manager"
	nicAgentNS    = "isochron-nic-agent"
	nicAgentSA    = "isochron-nic-agent"
	metricsReader = "isochron-metrics-reader"
	// applier is the field manager of the "user" (kubectl apply --server-side).
	applier = "kubectl"
	// admin is the field manager of the cluster administrator's changes to the settings
	// (kubectl edit: an update, not an apply).
	admin = "kubectl-edit"
)

var (
	env         *testenv.Env
	metricsAddr string
	// metricsCA verifies the metrics endpoint's certificate (startManager issues it).
	metricsCA  *x509.CertPool
	managerLog = &binary.Log{}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("KUSTOMIZE") == "" {
		fmt.Fprintln(os.Stderr, "KUSTOMIZE is not set: run these tests with `make test-integration`, which builds the pinned kustomize into bin/")
		return 1
	}
	var err error
	if env, err = testenv.Start(root); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	return m.Run()
}

// objects are the documents of a kustomize build, in order.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	return manifests.Build(t, root, dir)
}

// apply applies objs with server-side apply as field manager applier, taking over any
// field another manager wrote (--force-conflicts); namespaces are created for real
// first, since a dry-run object cannot live in a dry-run namespace.
func apply(t *testing.T, objs []*unstructured.Unstructured, dryRun bool) {
	t.Helper()
	applyAs(t, objs, dryRun, client.ForceOwnership)
}

// upgrade applies objs again as an upgrade does, `kubectl apply --server-side -f
// dist/install.yaml` (field manager applier) without --force-conflicts: a field
// another manager changed since the install is a conflict, not silently taken back.
func upgrade(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	applyAs(t, objs, false)
}

// applyAs applies objs, namespaces first, as field manager applier with opts.
func applyAs(t *testing.T, objs []*unstructured.Unstructured, dryRun bool, opts ...client.ApplyOption) {
	t.Helper()
	ctx := context.Background()
	opts = append([]client.ApplyOption{client.FieldOwner(applier)}, opts...)
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), opts...); err != nil {
				t.Fatalf("applying Namespace %s: %v", o.GetName(), err)
			}
		}
	}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), opts...); err != nil {
			t.Errorf("applying %s %s/%s (dry run %v): %v", o.GetKind(), o.GetNamespace(), o.GetName(), dryRun, err)
		}
	}
}

// The whole install in one test, in the order a user goes: dry run, install, run the
// manager as its ServiceAccount, apply the samples, scrape, re-apply.
func TestInstallRunScrapeReapply(t *testing.T) {
	ctx := context.Background()
	def := build(t, "config/default")
	monitoring := build(t, "config/monitoring")
	for dir, want := range map[string][]string{
		"config/default": {"CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service", "ConfigMap",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "DaemonSet", "PodDisruptionBudget", "PriorityClass"},
		"config/monitoring":  {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap", "ClusterRoleBinding"},
		"config/certmanager": {"Issuer", "Certificate"},
	} {
		kinds := map[string]bool{}
		for _, o := range map[string][]*unstructured.Unstructured{"config/default": def, "config/monitoring": monitoring, "config/certmanager": build(t, "config/certmanager")}[dir] {
			kinds[o.GetKind()] = true
		}
		for _, k := range want {
			if !kinds[k] {
				t.Errorf("%s has no %s", dir, k)
			}
		}
	}
	// config/default installs where prometheus-operator does not run.
	for _, o := range def {
		if strings.HasSuffix(o.GroupVersionKind().Group, "monitoring.coreos.com") {
			t.Errorf("config/default has %s %s, which needs prometheus-operator: it belongs in config/monitoring", o.GetKind(), o.GetName())
		}
	}
	samples := build(t, "config/samples")

	// A broken manifest fails here.
	apply(t, def, true)
	apply(t, samples, true)
	if t.Failed() {
		t.FailNow()
	}
	apply(t, def, false)
	apply(t, monitoring, true)
	apply(t, monitoring, false)

	// The manager binary, as the Deployment runs it, with the ServiceAccount's token.
	kubeconfig := serviceAccountKubeconfig(t, systemNS, managerSA)
	probeImage := deploymentArg(t, def, "--probe-image=")
	// Its environment as the kubelet fills it from the Deployment (the downward API).
	limit := deploymentMemoryLimit(t, def)
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv(memlimit.EnvVar, strconv.FormatInt(limit, 10))
	// Its settings as the kubelet hands them over from the ConfigMaps, which the install
	// leaves without keys: none set, so each flag has its default.
	vars, set := settingsEnv(t, def)
	if len(set) > 0 {
		t.Errorf("a fresh install sets the manager's %v: config/manager ships the settings ConfigMaps without keys, so that an upgrade owns none", set)
	}
	for _, v := range vars {
		t.Setenv(v, set[v])
		if _, ok := set[v]; !ok {
			_ = os.Unsetenv(v)
		}
	}
	stop := startManager(t, kubeconfig, "--probe-image="+probeImage)
	defer stop()
	soft, _ := memlimit.Soft(strconv.FormatInt(limit, 10))
	waitFor(t, "the manager to set its Go memory limit from its container's", func() (bool, string) {
		l := grep(managerLog.String(), "Go memory limit")
		return strings.Contains(l, "derived from the container's") && strings.Contains(l, strconv.FormatInt(soft, 10)), l
	})

	nodes(t)
	apply(t, samples, false)
	crawlers := []client.ObjectKey{{Namespace: "bms", Name: "tower-a"}, {Namespace: "bms", Name: "campus-b"}, {Namespace: "bms", Name: "annex-c"}}
	for _, key := range crawlers {
		waitFor(t, "the operator to place "+key.String(), func() (bool, string) {
			c := &isov1.CrawlerVM{}
			if err := env.Client.Get(ctx, key, c); err != nil {
				return false, err.Error()
			}
			placed := apimeta.FindStatusCondition(c.Status.Conditions, isov1.ConditionPlaced)
			return placed != nil && placed.Status == metav1.ConditionTrue && c.Status.ObservedGeneration == c.Generation, fmt.Sprintf("%+v", placed)
		})
	}

	t.Run("metrics need an authorised token", func(t *testing.T) {
		// The metrics reader role, bound to a scraper's ServiceAccount, as the
		// ServiceMonitor's Prometheus has it.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "prometheus"}}
		if err := env.Client.Create(ctx, sa); err != nil {
			t.Fatal(err)
		}
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "prometheus-isochron-metrics"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: metricsReader},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "prometheus"}},
		}
		if err := env.Client.Create(ctx, crb); err != nil {
			t.Fatal(err)
		}
		stranger := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "stranger"}}
		if err := env.Client.Create(ctx, stranger); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the metrics endpoint to answer", func() (bool, string) {
			code, msg := scrape(t, "")
			return code != 0, msg
		})
		if code, _ := scrape(t, ""); code != http.StatusUnauthorized {
			t.Errorf("scrape without a token: %d, want 401", code)
		}
		if code, _ := scrape(t, token(t, "default", "stranger")); code != http.StatusForbidden {
			t.Errorf("scrape with an unauthorised token: %d, want 403", code)
		}
		promToken := token(t, "default", "prometheus")
		var body string
		waitFor(t, "the placement metrics on the scrape", func() (bool, string) {
			code, b := scrape(t, promToken)
			body = b
			return code == http.StatusOK && strings.Contains(b, `isochron_crawler_placed{name="tower-a",namespace="bms"} 1`), fmt.Sprintf("status %d", code)
		})
		for _, want := range []string{
			`isochron_crawler_predicted_interval_error_seconds{name="tower-a",namespace="bms"}`,
			`isochron_crawler_interval_error_tolerance_seconds{name="annex-c",namespace="bms"}`,
			`isochron_crawler_objective_ratio{name="campus-b",namespace="bms"}`,
			`isochron_placement_decisions_total{result="placed"}`,
			`isochron_placement_duration_seconds_bucket`,
			`isochron_probe_runs_total{result="Confirmed"} 0`,
			`isochron_node_exclusive_cpus{node="rt-node-1"}`,
			`isochron_node_free_cpus{node="rt-node-2"}`,
			`isochron_node_worst_predicted_interval_error_seconds{node="rt-node-1"}`,
			`controller_runtime_reconcile_total{controller="crawlervm"`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("scrape lacks %s", want)
			}
		}
	})

	t.Run("the NIC agent runs with its RBAC and reports a node without the RT bridge", func(t *testing.T) {
		// The agent binary with config/default's nic-agent ServiceAccount and a token
		// bound to its pod on the node of the sample crawler with an RT-NIC, as the
		// DaemonSet runs it. This host has no bridge br-rt: the agent reports it on the
		// Node and on the crawler (and touches nothing: no link carries isochron's
		// schedule here).
		c := &isov1.CrawlerVM{}
		if err := env.Client.Get(ctx, crawlers[0], c); err != nil {
			t.Fatal(err)
		}
		if c.Spec.RTNIC == nil || c.Status.Placement == nil {
			t.Fatalf("sample %s: rtNIC %v, placement %v", crawlers[0], c.Spec.RTNIC, c.Status.Placement)
		}
		node := c.Status.Placement.Node
		// The administrator names the RT uplinks in the manager's namespace; the agent, in
		// its own, reads them at its start with its Role there.
		setSettings(t, isov1.NetworksConfigMap, map[string]any{isov1.NetworksRTUplinks: "br-rt"})
		defer setSettings(t, isov1.NetworksConfigMap, map[string]any{isov1.NetworksRTUplinks: nil})
		log := &binary.Log{}
		stopAgent := startBinary(t, "nic-agent", log, "--kubeconfig", agentKubeconfig(t, node),
			"--node-name", node, "--health-probe-bind-address", binary.FreePort(t))
		waitFor(t, "the NIC agent to start with the RT uplinks of "+isov1.NetworksConfigMap, func() (bool, string) {
			for _, line := range strings.Split(log.String(), "\n") {
				if strings.Contains(line, "Starting the NIC agent") {
					return strings.Contains(line, "br-rt"), line
				}
			}
			return false, log.String()
		})
		waitFor(t, "the NIC agent's RTUplinkUnavailable Event on "+node, func() (bool, string) {
			var events corev1.EventList
			if err := env.Client.List(ctx, &events, client.InNamespace("default")); err != nil {
				return false, err.Error()
			}
			for _, e := range events.Items {
				if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == node && e.Reason == isov1.EventReasonRTUplinkUnavailable {
					return strings.Contains(e.Message, "bridge br-rt"), e.Message
				}
			}
			return false, log.String()
		})
		waitFor(t, "the NIC agent to say on "+crawlers[0].String()+" why its RT-NIC is not scheduled", func() (bool, string) {
			c := &isov1.CrawlerVM{}
			if err := env.Client.Get(ctx, crawlers[0], c); err != nil {
				return false, err.Error()
			}
			return c.Status.RTNIC != nil && strings.Contains(c.Status.RTNIC.NotScheduled, "bridge br-rt"), fmt.Sprintf("%+v", c.Status.RTNIC)
		})
		stopAgent()
	})

	t.Run("a NIC agent writes only status.rtNIC of its own node's crawlers", func(t *testing.T) {
		testNICAgentIsBoundToItsNode(t, crawlers)
	})

	t.Run("only KubeVirt names a VMI's launcher pods", testLauncherIdentity)

	t.Run("a crawler's VM is isochron's to write", func(t *testing.T) { testVMOwnership(t, crawlers[1]) })
	t.Run("the manager's account creates only a crawler's objects", func(t *testing.T) { testManagerWrites(t, crawlers[1], probeImage) })

	t.Run("a namespace reaches only the nodes the administrator lets it", func(t *testing.T) {
		c := &isov1.CrawlerVM{}
		if err := env.Client.Get(ctx, crawlers[1], c); err != nil {
			t.Fatal(err)
		}
		greedy := c.DeepCopy()
		greedy.ObjectMeta = metav1.ObjectMeta{Namespace: "bms", Name: "greedy"}
		greedy.Status = isov1.CrawlerVMStatus{}
		if greedy.Spec.Placement == nil {
			greedy.Spec.Placement = &isov1.Placement{}
		}
		greedy.Spec.Placement.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		waitFor(t, "the admission policy to refuse a toleration of every taint", func() (bool, string) {
			err := env.Client.Create(ctx, greedy.DeepCopy(), client.DryRunAll)
			return err != nil && strings.Contains(err.Error(), "spec.placement.tolerations: every taint (no key): namespace bms may tolerate only no taint"), fmt.Sprint(err)
		})
		mine := greedy.DeepCopy()
		mine.Spec.Placement.Tolerations = []corev1.Toleration{{Key: "bms.example.com/dedicated", Operator: corev1.TolerationOpExists}}
		mine.Spec.Placement.NodeSelector = map[string]string{"pool": "other"}
		// The administrator lets bms tolerate its own taint, and keeps it to its pool.
		setSettings(t, isov1.NodeAccessConfigMap, map[string]any{"tolerations.bms": "bms.example.com/dedicated", "nodeSelector.bms": "pool=bms"})
		waitFor(t, "the admission policy to refuse a node selector against the namespace's", func() (bool, string) {
			err := env.Client.Create(ctx, mine.DeepCopy(), client.DryRunAll)
			return err != nil && strings.Contains(err.Error(), "spec.placement.nodeSelector: namespace bms's crawlers run only on nodes labelled pool=bms"), fmt.Sprint(err)
		})
		mine.Spec.Placement.NodeSelector = map[string]string{"pool": "bms"}
		if err := env.Client.Create(ctx, mine.DeepCopy(), client.DryRunAll); err != nil {
			t.Errorf("a toleration the namespace may use, on its pool: %v; want admitted", err)
		}
		if err := env.Client.Create(ctx, greedy.DeepCopy(), client.DryRunAll); err == nil {
			t.Error("a toleration of every taint, with bms allowed one key: admitted; want refused")
		}
		setSettings(t, isov1.NodeAccessConfigMap, map[string]any{"tolerations.bms": nil, "nodeSelector.bms": nil})
	})

	t.Run("RT networks of other namespaces are refused at admission unless shared", func(t *testing.T) {
		c := &isov1.CrawlerVM{}
		if err := env.Client.Get(ctx, crawlers[0], c); err != nil {
			t.Fatal(err)
		}
		if c.Spec.RTNIC == nil {
			t.Fatalf("sample %s has no rtNIC", crawlers[0])
		}
		other := c.DeepCopy()
		other.ObjectMeta = metav1.ObjectMeta{Namespace: "bms", Name: "borrower"}
		other.Status = isov1.CrawlerVMStatus{}
		other.Spec.RTNIC.NetworkName = "tenant-b/rt-net"
		// The policy's informers see the binding and the ConfigMap a moment after they
		// are applied.
		waitFor(t, "the admission policy to refuse tenant-b/rt-net", func() (bool, string) {
			err := env.Client.Create(ctx, other.DeepCopy(), client.DryRunAll)
			return err != nil && strings.Contains(err.Error(), "spec.rtNIC.networkName: NetworkAttachmentDefinition tenant-b/rt-net is in namespace tenant-b") &&
				strings.Contains(err.Error(), "shares (none)"), fmt.Sprint(err)
		})
		// The administrator shares tenant-b's networks.
		setSettings(t, isov1.NetworksConfigMap, map[string]any{isov1.NetworksSharedNamespaces: "rt-shared, tenant-b"})
		waitFor(t, "the admission policy to admit a shared namespace's network", func() (bool, string) {
			err := env.Client.Create(ctx, other.DeepCopy(), client.DryRunAll)
			return err == nil, fmt.Sprint(err)
		})
		// A crawler applied while tenant-b was shared, with a finalizer (as the garbage
		// collector's foreground deletion of a namespace puts on it).
		kept := other.DeepCopy()
		kept.Name, kept.Finalizers = "kept", []string{metav1.FinalizerDeleteDependents}
		if err := env.Client.Create(ctx, kept); err != nil {
			t.Fatal(err)
		}
		setSettings(t, isov1.NetworksConfigMap, map[string]any{isov1.NetworksSharedNamespaces: nil})
		waitFor(t, "the admission policy to refuse tenant-b/rt-net again", func() (bool, string) {
			err := env.Client.Create(ctx, other.DeepCopy(), client.DryRunAll)
			return err != nil, fmt.Sprint(err)
		})
		// The administrator stopped sharing tenant-b: a write that leaves the spec alone
		// is still admitted, so the garbage collector can remove its finalizer and a
		// namespace's deletion never hangs on it; a spec change is judged.
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(kept), kept); err != nil {
			t.Fatal(err)
		}
		changed := kept.DeepCopy()
		changed.Spec.RPS++
		if err := env.Client.Patch(ctx, changed, client.MergeFrom(kept), client.DryRunAll); err == nil || !strings.Contains(err.Error(), "spec.rtNIC.networkName") {
			t.Errorf("a spec change of a crawler on a network no longer shared: %v; want refused", err)
		}
		before := kept.DeepCopy()
		kept.Finalizers = nil
		if err := env.Client.Patch(ctx, kept, client.MergeFrom(before)); err != nil {
			t.Errorf("removing the finalizer of a crawler on a network no longer shared: %v; want admitted (the garbage collector does this)", err)
		}
		if err := env.Client.Delete(ctx, kept); err != nil {
			t.Error(err)
		}
	})

	t.Run("deleting isochron's CRDs is refused unless asked for by name", func(t *testing.T) {
		// A user's `kubectl delete -k config/default` (or a tool's prune) would delete
		// every CrawlerVM, and with each its VM: the CRDs go only when annotated, as
		// `make uninstall` does once no crawler is left. Dry runs: admission decides them.
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "crawlervms.isochron.io"}, crd); err != nil {
			t.Fatal(err)
		}
		if crd.GetLabels()["app.kubernetes.io/component"] != "api" {
			t.Errorf("CRD labels %v: want app.kubernetes.io/component=api, which make undeploy leaves and make uninstall removes", crd.GetLabels())
		}
		waitFor(t, "the CRD's delete refused", func() (bool, string) {
			err := env.Client.Delete(ctx, crd.DeepCopy(), client.DryRunAll)
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "make uninstall"), fmt.Sprint(err)
		})
		// Asked for by name (the annotation stored, as make uninstall writes it): admitted.
		patch := client.MergeFrom(crd.DeepCopy())
		annotations := crd.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations["isochron.io/uninstall"] = "delete-every-crawler"
		crd.SetAnnotations(annotations)
		if err := env.Client.Patch(ctx, crd, patch); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Delete(ctx, crd.DeepCopy(), client.DryRunAll); err != nil {
			t.Errorf("dry-run delete of the annotated CRD: %v, want it admitted", err)
		}
		undo := client.MergeFrom(crd.DeepCopy())
		delete(annotations, "isochron.io/uninstall")
		crd.SetAnnotations(annotations)
		if err := env.Client.Patch(ctx, crd, undo); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the manager writes its own Secrets and no other", func(t *testing.T) {
		// Its own: the probe master key in its namespace, and each crawler's guest Secret,
		// which it writes (create, patch) but cannot read: the admin's client reads them here.
		for _, key := range []client.ObjectKey{{Namespace: systemNS, Name: "isochron-probe-master-key"}, {Namespace: "bms", Name: "campus-b-guest"}} {
			waitFor(t, "Secret "+key.String(), func() (bool, string) {
				err := env.Client.Get(ctx, key, &corev1.Secret{})
				return err == nil, fmt.Sprint(err)
			})
		}
		// Anything else the manager's account writes is refused: a token Secret for any
		// service account (its token would come back in the write's answer), any other
		// Secret, a guest Secret no CrawlerVM owns.
		asManager := clientWithToken(t, token(t, systemNS, managerSA))
		for name, s := range map[string]*corev1.Secret{
			"a service account's token": {ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "loot",
				Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Type: corev1.SecretTypeServiceAccountToken},
			"another Secret": {ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "loot"}, Type: corev1.SecretTypeOpaque},
			"a guest Secret no CrawlerVM owns": {ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "nobody-guest",
				Labels: map[string]string{isov1.LabelManagedBy: isov1.ManagedBy}}, Type: corev1.SecretTypeOpaque},
		} {
			waitFor(t, "the manager's "+name+" refused", func() (bool, string) {
				err := asManager.Create(ctx, s.DeepCopy(), client.DryRunAll)
				return err != nil && strings.Contains(err.Error(), "the isochron manager writes only"), fmt.Sprint(err)
			})
		}
	})

	t.Run("only the Lease's holder changes a reservation (the leader fence)", func(t *testing.T) {
		c := &isov1.CrawlerVM{}
		if err := env.Client.Get(ctx, crawlers[0], c); err != nil {
			t.Fatal(err)
		}
		lease := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: systemNS, Name: isov1.LeaderLease}, lease); err != nil {
			t.Fatal(err)
		}
		if lease.Spec.HolderIdentity == nil || c.Status.DecidedBy != *lease.Spec.HolderIdentity {
			t.Errorf("status.decidedBy %q, want the Lease's holder %v: the manager writes its identity with its decisions", c.Status.DecidedBy, lease.Spec.HolderIdentity)
		}
		// A replica that lost the Lease writes a decision: refused.
		stale := c.DeepCopy()
		stale.Status.DecidedBy = "paused-replica_0"
		stale.Status.Placement.Node = "elsewhere"
		err := env.Client.Status().Update(ctx, stale, client.DryRunAll)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "does not hold the manager's leader election Lease") {
			t.Errorf("a reservation written by a replica that does not hold the Lease: %v, want it refused by the leader fence", err)
		}
		// Other status writes pass.
		other := c.DeepCopy()
		other.Status.DecidedBy = "paused-replica_0"
		if err := env.Client.Status().Update(ctx, other, client.DryRunAll); err != nil {
			t.Errorf("a status write that changes no reservation: %v, want it admitted", err)
		}
	})

	t.Run("an upgrade keeps the administrator's settings", func(t *testing.T) {
		// The administrator names an RT uplink, shares a namespace's networks and lets
		// every namespace tolerate a taint, with kubectl edit.
		settings := map[string]map[string]any{
			isov1.NetworksConfigMap:   {isov1.NetworksRTUplinks: "eth1", isov1.NetworksSharedNamespaces: "rt-shared"},
			isov1.NodeAccessConfigMap: {"tolerations": "example.com/rt"},
		}
		for name, keys := range settings {
			setSettings(t, name, keys)
			defer func() {
				unset := map[string]any{}
				for k := range keys {
					unset[k] = nil
				}
				setSettings(t, name, unset)
			}()
		}
		// The next release, applied as the install was and without --force-conflicts: a
		// key it set would conflict with the administrator's (and, forced, reset it).
		upgrade(t, def)
		for name, keys := range settings {
			cm := &corev1.ConfigMap{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: systemNS, Name: name}, cm); err != nil {
				t.Fatal(err)
			}
			for k, v := range keys {
				if got, ok := cm.Data[k]; !ok || got != v {
					t.Errorf("ConfigMap %s, key %s after the upgrade: %q (set: %v), want the administrator's %q", name, k, got, ok, v)
				}
			}
		}
		// The manager's next start reads them.
		if _, set := settingsEnv(t, def); set[isov1.EnvRTUplinks] != "eth1" || set[isov1.EnvSharedNetworkNamespaces] != "rt-shared" {
			t.Errorf("the manager's environment after the upgrade: %v, want %s=eth1 and %s=rt-shared", set, isov1.EnvRTUplinks, isov1.EnvSharedNetworkNamespaces)
		}
	})

	t.Run("re-applying the samples changes nothing", func(t *testing.T) {
		before := versions(t, samples)
		apply(t, samples, false)
		after := versions(t, samples)
		for key, v := range before {
			if after[key] != v {
				t.Errorf("%s changed by re-applying the same file:\nbefore: %s\nafter:  %s", key, v, after[key])
			}
		}
		// The operator never wrote spec: the user's apply owns every spec field.
		for _, key := range crawlers {
			c := &isov1.CrawlerVM{}
			if err := env.Client.Get(ctx, key, c); err != nil {
				t.Fatal(err)
			}
			for _, mf := range c.ManagedFields {
				if mf.Manager == "isochron" || strings.HasPrefix(mf.Manager, "manager") {
					if mf.Subresource != "status" {
						t.Errorf("%s: the operator (%s) manages fields outside status: %s", key, mf.Manager, mf.FieldsV1.GetRawString())
					}
				}
			}
		}
	})
}

// versions is the resourceVersion of each of objs on the API server.
// versions is, for each object, what a write by the applier would change: its
// resourceVersion, except for CrawlerVMs, whose status the operator may still be writing
// while the test runs (a neighbour's arrival refreshes a prediction); for those, the
// spec's generation and the applier's entry in managedFields (its fields and the time of
// its last change), which only the applier writes.
func versions(t *testing.T, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range objs {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(o.GroupVersionKind())
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(o), u); err != nil {
			t.Fatal(err)
		}
		v := "resourceVersion " + u.GetResourceVersion()
		if o.GetKind() == "CrawlerVM" {
			v = fmt.Sprintf("generation %d", u.GetGeneration())
			for _, m := range u.GetManagedFields() {
				if m.Manager == applier && m.Operation == metav1.ManagedFieldsOperationApply && m.FieldsV1 != nil {
					v += fmt.Sprintf(", %s's fields as of %s: %s", applier, m.Time, m.FieldsV1.GetRawString())
				}
			}
		}
		out[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = v
	}
	return out
}

// setSettings changes keys of the administrator's settings ConfigMap name, in isochron's
// namespace, as kubectl edit or kubectl patch does (an update, field manager admin); a nil
// value removes its key. The ConfigMaps ship without keys (config/manager).
func setSettings(t *testing.T, name string, keys map[string]any) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"data": keys})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: name}}
	if err := env.Client.Patch(context.Background(), cm, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(admin)); err != nil {
		t.Fatalf("the administrator's change of ConfigMap %s: %v", name, err)
	}
}

// nodes registers the demo's RT nodes, as their kubelets would.
func nodes(t *testing.T) {
	t.Helper()
	for _, n := range []struct {
		name string
		cpus int64
	}{{"rt-node-1", 16}, {"rt-node-2", 8}} {
		if err := testenv.RegisterNode(context.Background(), env.Client, testenv.RTNode(n.name, n.cpus)); err != nil {
			t.Fatal(err)
		}
	}
}

// token is a token of a ServiceAccount, from the TokenRequest API.
func token(t *testing.T, namespace, name string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

func ptr[T any](v T) *T { return &v }

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the ServiceAccount.
func serviceAccountKubeconfig(t *testing.T, namespace, name string) string {
	t.Helper()
	return binary.Kubeconfig(t, env.Config, &clientcmdapi.AuthInfo{Token: token(t, namespace, name)}, namespace)
}

// startManager builds and runs cmd/manager with the flags of config/manager and secure
// metrics on a free loopback port.
func startManager(t *testing.T, kubeconfig string, args ...string) (stop func()) {
	t.Helper()
	metricsAddr = binary.FreePort(t)
	// The metrics endpoint's certificate, as the Secret isochron-metrics-server-cert
	// mounts it (--metrics-cert-dir): for the address the test scrapes, issued by a CA
	// the scrape verifies against, as Prometheus does with the Secret's ca.crt.
	host, _, err := net.SplitHostPort(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("isochron-controller-manager-metrics-service.isochron-system.svc", []net.IP{net.ParseIP(host)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	metricsCA = x509.NewCertPool()
	metricsCA.AppendCertsFromPEM(certPEM)
	return startBinary(t, "manager", managerLog, append([]string{"--kubeconfig", kubeconfig,
		"--leader-elect", "--leader-election-namespace=" + systemNS, "--namespace=" + systemNS,
		"--metrics-bind-address=" + metricsAddr, "--metrics-cert-dir=" + dir, "--health-probe-bind-address=" + binary.FreePort(t)}, args...)...)
}

// deploymentArg is the value of the manager Deployment's argument that starts with
// prefix, in the objects objs.
func deploymentArg(t *testing.T, objs []*unstructured.Unstructured, prefix string) string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" || o.GetName() != managerSA {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
			for _, a := range args {
				if v, ok := strings.CutPrefix(a, prefix); ok {
					return v
				}
			}
		}
	}
	t.Fatalf("the manager's Deployment has no argument %s", prefix)
	return ""
}

// managerContainer is the manager's container in its Deployment in objs.
func managerContainer(t *testing.T, objs []*unstructured.Unstructured) corev1.Container {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" || o.GetName() != managerSA {
			continue
		}
		dep := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, dep); err != nil {
			t.Fatal(err)
		}
		return dep.Spec.Template.Spec.Containers[0]
	}
	t.Fatalf("no Deployment %s", managerSA)
	return corev1.Container{}
}

// deploymentMemoryLimit is the manager Deployment's memory limit in bytes, which its
// container must be handed in memlimit.EnvVar (resourceFieldRef limits.memory).
func deploymentMemoryLimit(t *testing.T, objs []*unstructured.Unstructured) int64 {
	t.Helper()
	c := managerContainer(t, objs)
	handed := false
	for _, e := range c.Env {
		if e.Name == memlimit.EnvVar && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" {
			handed = true
		}
		if e.Name == "GOMEMLIMIT" {
			t.Errorf("the manager's Deployment sets GOMEMLIMIT=%s: a fixed figure does not follow its memory limit", e.Value)
		}
	}
	if !handed {
		t.Errorf("the manager's Deployment does not hand its container's limits.memory in %s", memlimit.EnvVar)
	}
	q, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		t.Fatal("the manager's Deployment has no memory limit")
	}
	return q.Value()
}

// settingsEnv is the manager's environment from ConfigMaps as the kubelet fills it from
// its Deployment in objs and the live ConfigMaps in isochron's namespace: vars are the
// variables of its configMapKeyRefs, set those whose key is there, with its value; the
// others are unset. A key missing from a reference not optional is an error (the kubelet
// would not start the container), and so is an argument that refers to a variable
// (Kubernetes passes an unset variable's $(VAR) literally).
func settingsEnv(t *testing.T, objs []*unstructured.Unstructured) (vars []string, set map[string]string) {
	t.Helper()
	c := managerContainer(t, objs)
	for _, a := range c.Args {
		if strings.Contains(a, "$(") {
			t.Errorf("the manager's argument %s refers to a variable, which is unset while its ConfigMap key is: Kubernetes then passes it literally", a)
		}
	}
	set = map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.ConfigMapKeyRef
		vars = append(vars, e.Name)
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: systemNS, Name: ref.Name}, cm); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if v, ok := cm.Data[ref.Key]; ok {
			set[e.Name] = v
		} else if ref.Optional == nil || !*ref.Optional {
			t.Errorf("the manager's %s: key %s of ConfigMap %s is not set, and the reference is not optional: the kubelet would not start the manager", e.Name, ref.Key, ref.Name)
		}
	}
	return vars, set
}

// startBinary builds ./cmd/<name> as the image ships it and runs it with args, its
// output in log; stop interrupts it and fails the test if the API server refused it
// anything ("forbidden": a permission config/default's RBAC lacks).
func startBinary(t *testing.T, name string, log *binary.Log, args ...string) (stop func()) {
	t.Helper()
	bin := binary.Build(t, name)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	return func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, log.String())
		}
		if strings.Contains(log.String(), "forbidden") {
			t.Errorf("the %s was refused something with the RBAC of config/default:\n%s", name, grep(log.String(), "forbidden"))
		}
	}
}

func grep(s, what string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, what) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// scrape GETs the metrics endpoint over HTTPS (the manager's self-signed certificate)
// with the bearer token, if any.
func scrape(t *testing.T, bearer string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "https://"+metricsAddr+"/metrics", nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: metricsCA, MinVersion: tls.VersionTLS12}}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitFor polls cond for up to a minute: waiting for the operator, not sleeping in
// its place.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last seen: %s\nmanager log:\n%s", what, last, managerLog)
}
