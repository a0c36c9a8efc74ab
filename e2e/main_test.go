//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers"
)

// Settings, from the environment. The images have no default here: make e2e passes the
// Makefile's pins (the one place versions are set), and the suite refuses to run without.
var (
	managerImage  = os.Getenv("E2E_IMG")
	nicAgentImage = os.Getenv("E2E_NIC_AGENT_IMG")
	probeImage    = os.Getenv("E2E_PROBE_IMG")
	// probeCPU, if set, becomes the manager's --probe-cpu (a fraction on nodes too small
	// to spare the probe an exclusive CPU).
	probeCPU = os.Getenv("E2E_PROBE_CPU")
	// probeGrace, if set, becomes the manager's --probe-grace (how long a probe Job may
	// take to start and report beyond its duration): longer on nodes that start pods
	// slowly, such as the emulated node VMs on a loaded machine.
	probeGrace = os.Getenv("E2E_PROBE_GRACE")
	guestImage = os.Getenv("E2E_GUEST_IMAGE")
	artifacts  = env("E2E_ARTIFACTS", "../bin/e2e-artifacts")
	kustomize  = env("KUSTOMIZE", "kustomize")
	kubectl    = env("KUBECTL", "kubectl")
	kubevirtNS = env("E2E_KUBEVIRT_NAMESPACE", "kubevirt")
	// guestRunsAgent is set when the guest is the e2e guest of e2e/guest: it runs
	// isochron's probe agent (then a probe must judge counted intervals), a UDP echo on
	// port 7 and a relay on port 8 (the tests between nodes measure a move with the echo
	// and the RT network with the relay). KubeVirt's demo guest, kind's, runs none.
	guestRunsAgent = os.Getenv("E2E_GUEST_RUNS_AGENT") != ""
	// operatorNodeSelector, if set, places the manager's pods (a label selector, as
	// kubectl takes it): the local cluster with node VMs keeps them on its control plane,
	// off the nodes the tests stop and drain.
	operatorNodeSelector = os.Getenv("E2E_OPERATOR_NODE_SELECTOR")
	// keep leaves the operator and the test namespaces in place after the run.
	keep = os.Getenv("E2E_KEEP") != ""
	// rtUplink is a host interface of the node this suite runs on, a port of the Linux
	// bridge the NIC agent test's RT network uses (make e2e-local sets it); unset, that
	// test is skipped (kind: the suite does not run on the node).
	rtUplink = os.Getenv("E2E_RT_UPLINK")
)

const (
	operatorNS  = "isochron-system"
	operatorDep = "isochron-controller-manager"
	nicAgentDS  = "isochron-nic-agent"
	nicAgentNS  = "isochron-nic-agent"
	// networksConfigMap holds the administrator's RT-network settings.
	networksConfigMap = "isochron-networks"
	fieldOwner        = client.FieldOwner("isochron-e2e")
)

// cl talks to the cluster under test.
var cl client.Client

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	for key, v := range map[string]string{"E2E_IMG": managerImage, "E2E_NIC_AGENT_IMG": nicAgentImage, "E2E_PROBE_IMG": probeImage, "E2E_GUEST_IMAGE": guestImage} {
		if v == "" {
			fmt.Fprintf(os.Stderr, "e2e: %s is not set: run the suite with make e2e (or e2e-kind, e2e-local), which passes the Makefile's pins\n", key)
			return 1
		}
	}
	scheme := controllers.Scheme()
	cfg, err := config.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: no cluster: set KUBECONFIG:", err)
		return 1
	}
	if cl, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: connecting to the cluster:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := deploy(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: deploying the operator:", err)
		saveArtifacts("deploy", "")
		return 1
	}
	code := m.Run()
	if code != 0 {
		saveArtifacts("operator", "")
	}
	if !keep {
		if err := undeploy(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: removing the operator:", err)
		}
	}
	return code
}

// operatorObjects renders config/default with the images under test: the manager's
// image and its --probe-image argument are set on the Deployment (and --probe-cpu and
// --probe-grace when E2E_PROBE_CPU and E2E_PROBE_GRACE are set), the NIC agent's image on
// its DaemonSet.
func operatorObjects() ([]*unstructured.Unstructured, error) {
	out, err := exec.Command(kustomize, "build", "../config/default").Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize build config/default: %w%s", err, stderrOf(err))
	}
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		switch {
		case u.GetKind() == "Deployment" && u.GetName() == operatorDep:
			if err := setImages(u); err != nil {
				return nil, err
			}
		case u.GetKind() == "DaemonSet" && u.GetName() == nicAgentDS:
			if err := setAgentImage(u); err != nil {
				return nil, err
			}
		case u.GetKind() == "ConfigMap" && u.GetName() == networksConfigMap && rtUplink != "":
			// The administrator names the nodes' RT uplink: the only interface the NIC
			// agents program.
			if err := unstructured.SetNestedField(u.Object, rtUplink, "data", "rtUplinks"); err != nil {
				return nil, err
			}
		}
		objs = append(objs, u)
	}
	return objs, nil
}

func setImages(u *unstructured.Unstructured) error {
	dep := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, dep); err != nil {
		return err
	}
	for i := range dep.Spec.Template.Spec.Containers {
		c := &dep.Spec.Template.Spec.Containers[i]
		if c.Name != "manager" {
			continue
		}
		c.Image = managerImage
		for j, a := range c.Args {
			if strings.HasPrefix(a, "--probe-image=") {
				c.Args[j] = "--probe-image=" + probeImage
			}
		}
		if probeCPU != "" {
			c.Args = append(c.Args, "--probe-cpu="+probeCPU)
		}
		if probeGrace != "" {
			c.Args = append(c.Args, "--probe-grace="+probeGrace)
		}
	}
	if operatorNodeSelector != "" {
		sel, err := labels.ConvertSelectorToLabelsMap(operatorNodeSelector)
		if err != nil {
			return fmt.Errorf("E2E_OPERATOR_NODE_SELECTOR %q: %w", operatorNodeSelector, err)
		}
		dep.Spec.Template.Spec.NodeSelector = sel
		// The control plane the selector names may be tainted (kind taints it once the
		// cluster has workers).
		dep.Spec.Template.Spec.Tolerations = append(dep.Spec.Template.Spec.Tolerations, corev1.Toleration{
			Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
		})
	}
	return setObject(u, dep, "Deployment")
}

// setAgentImage sets the NIC agent's image on its DaemonSet.
func setAgentImage(u *unstructured.Unstructured) error {
	ds := &appsv1.DaemonSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ds); err != nil {
		return err
	}
	found := false
	for i := range ds.Spec.Template.Spec.Containers {
		if c := &ds.Spec.Template.Spec.Containers[i]; c.Name == "nic-agent" {
			c.Image, found = nicAgentImage, true
		}
	}
	if !found {
		return fmt.Errorf("DaemonSet %s has no container nic-agent to set the image %s on", nicAgentDS, nicAgentImage)
	}
	return setObject(u, ds, "DaemonSet")
}

// setObject makes u the apps/v1 object obj of kind, edited from u, without its status.
func setObject(u *unstructured.Unstructured, obj any, kind string) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	delete(m, "status")
	u.Object = m
	u.SetAPIVersion("apps/v1")
	u.SetKind(kind)
	return nil
}

func deploy(ctx context.Context) error {
	objs, err := operatorObjects()
	if err != nil {
		return err
	}
	// The undeploy before (make e2e-local-multi runs the suite in steps; an uninstall
	// test) may still be deleting isochron's namespaces.
	if err := waitNamespaces(ctx); err != nil {
		return err
	}
	for _, o := range objs {
		if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), fieldOwner, client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	fmt.Printf("e2e: deployed the operator (%s, NIC agent %s, probes %s); waiting for it\n", managerImage, nicAgentImage, probeImage)
	return poll(ctx, 5*time.Minute, func() (bool, string, error) {
		if err := cl.List(ctx, &isov1.CrawlerVMList{}); err != nil {
			return false, "CrawlerVM API not served yet: " + err.Error(), nil //nolint:nilerr // not served yet is transient: keep polling
		}
		dep := &appsv1.Deployment{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: operatorDep}, dep); err != nil {
			return false, "", err
		}
		if dep.Status.AvailableReplicas == 0 {
			return false, fmt.Sprintf("deployment %s: none available", operatorDep), nil
		}
		// The RT-network admission policy denies every CrawlerVM until the API server has
		// read its parameter ConfigMap ("no params found for policy binding"): a crawler
		// must pass a dry run first. An API server from which the operator was removed
		// before never reads it again (kubernetes/kubernetes#130887: the ConfigMap
		// informer of a policy's paramKind stops for good once no binding names it), so
		// the message says so.
		if err := cl.Create(ctx, crawler(operatorNS, "e2e-admission-check"), client.DryRunAll); err != nil {
			return false, "a CrawlerVM is not admitted yet: " + err.Error() + " (if the operator was removed from this API server before, " + //nolint:nilerr // the policy's parameters arrive shortly: keep polling
				"kube-apiserver has lost the policy's parameters until it restarts: kubernetes/kubernetes#130887)", nil
		}
		return true, "", nil
	})
}

// waitNamespaces waits until neither of isochron's namespaces is being deleted: nothing
// can be created in one until it is gone.
func waitNamespaces(ctx context.Context) error {
	for _, name := range []string{operatorNS, nicAgentNS} {
		if err := poll(ctx, 5*time.Minute, func() (bool, string, error) {
			ns := &corev1.Namespace{}
			if err := cl.Get(ctx, client.ObjectKey{Name: name}, ns); apierrors.IsNotFound(err) {
				return true, "", nil
			} else if err != nil {
				return false, "", err
			}
			return ns.DeletionTimestamp.IsZero(), fmt.Sprintf("namespace %s is being deleted (%s)", name, ns.Status.Phase), nil
		}); err != nil {
			return fmt.Errorf("waiting for namespace %s: %w", name, err)
		}
	}
	return nil
}

// waitOperatorGone waits until no pod of the manager or the NIC agents is left.
func waitOperatorGone(ctx context.Context, t *testing.T) {
	t.Helper()
	waitFor(t, deleteTimeout, "the manager's and the NIC agents' pods gone", func() (bool, string, error) {
		var left []string
		for _, ns := range []string{operatorNS, nicAgentNS} {
			pods := &corev1.PodList{}
			if err := cl.List(ctx, pods, client.InNamespace(ns)); err != nil {
				return false, "", err
			}
			for _, p := range pods.Items {
				left = append(left, ns+"/"+p.Name)
			}
		}
		return len(left) == 0, fmt.Sprintf("still there: %v", left), nil
	})
}

// waitNamespacesGone waits until isochron's namespaces an uninstall deletes are gone:
// nothing can be created in a namespace being deleted.
func waitNamespacesGone(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := waitNamespaces(ctx); err != nil {
		t.Fatal(err)
	}
}

// undeploy removes the operator after the suite as make undeploy does: its API and
// settings stay (kept), so that crawlers left behind keep their CRDs, and the admission
// policies keep their bindings: kube-apiserver stops watching a policy's parameters for
// good once no binding names it (kubernetes/kubernetes#130887), and the next run on the
// same API server would have its leader fence judge with a Lease holder long gone.
func undeploy(ctx context.Context) error {
	objs, err := operatorObjects()
	if err != nil {
		return err
	}
	var errs []error
	for i := len(objs) - 1; i >= 0; i-- {
		if kept.Matches(labels.Set(objs[i].GetLabels())) {
			continue
		}
		if err := cl.Delete(ctx, objs[i]); client.IgnoreNotFound(err) != nil && !meta.IsNoMatchError(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// poll calls cond every 2 s until it returns true, an error, or timeout passes; the
// timeout error carries cond's last message.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		ok, msg, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		last = msg
		select {
		case <-ctx.Done():
			return fmt.Errorf("not after %s: %s", timeout, last)
		case <-time.After(2 * time.Second):
		}
	}
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

// saveArtifacts writes what explains a failure under E2E_ARTIFACTS/<name>: the
// namespace's events and objects as YAML (when namespace is set), the nodes and their
// events, and the logs of the operator and the NIC agents. Errors are printed, never
// fatal: artifacts are best effort.
func saveArtifacts(name, namespace string) {
	dir := filepath.Join(artifacts, strings.ReplaceAll(name, "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: artifacts:", err)
		return
	}
	dumps := map[string][]string{
		"nodes.yaml":           {"get", "nodes", "-o", "yaml"},
		"operator.log":         {"logs", "-n", operatorNS, "-l", "control-plane=controller-manager", "--all-containers", "--prefix", "--tail=-1"},
		"operator-pods.yaml":   {"get", "pods", "-n", operatorNS, "-o", "yaml"},
		"operator-events.yaml": {"get", "events", "-n", operatorNS, "-o", "yaml"},
		"nic-agent.log":        {"logs", "-n", nicAgentNS, "-l", "app.kubernetes.io/component=nic-agent", "--all-containers", "--prefix", "--tail=-1"},
		"node-events.yaml":     {"get", "events", "-A", "--field-selector", "involvedObject.kind=Node", "-o", "yaml"},
	}
	if namespace != "" {
		dumps["events.yaml"] = []string{"get", "events", "-n", namespace, "-o", "yaml"}
		dumps["objects.yaml"] = []string{"get", "crawlervms,virtualmachines,virtualmachineinstances,virtualmachineinstancemigrations,pods,jobs,services", "-n", namespace, "-o", "yaml"}
		dumps["virt-launcher.log"] = []string{"logs", "-n", namespace, "-l", "kubevirt.io=virt-launcher", "--all-containers", "--prefix", "--tail=-1"}
	}
	for file, args := range dumps {
		out, err := exec.Command(kubectl, args...).CombinedOutput()
		if err != nil {
			out = append(out, []byte(fmt.Sprintf("\nkubectl %s: %v\n", strings.Join(args, " "), err))...)
		}
		if err := os.WriteFile(filepath.Join(dir, file), out, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: artifacts:", err)
		}
	}
	fmt.Fprintf(os.Stderr, "e2e: artifacts of %s in %s\n", name, dir)
}
