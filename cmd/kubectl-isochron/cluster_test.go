package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/cli"
	"isochron.io/isochron/test/support/testenv"
)

// The commands that cross the API server run against a real kube-apiserver (envtest)
// with the real CRDs, as a user's kubeconfig reaches it. No manager runs: the tests see
// what the plugin writes and reads.

var (
	env        *testenv.Env
	kubeconfig string
)

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		// The pure tests run anywhere (make test-unit); these need kube-apiserver and etcd.
		os.Exit(m.Run())
	}
	var err error
	env, err = testenv.Start(filepath.Join("..", ".."), testenv.WithoutKubeVirtControllers())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "kubectl-isochron-")
	if err == nil {
		kubeconfig = filepath.Join(dir, "kubeconfig")
		err = env.WriteKubeConfig("tester", kubeconfig)
	}
	if err != nil {
		env.Stop()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func needCluster(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip("KUBEBUILDER_ASSETS is not set: make test-integration runs this against a real API server")
	}
}

// on runs the plugin against the test's cluster, in namespace ns.
func on(t *testing.T, ns string, args ...string) (int, string, string) {
	t.Helper()
	return runArgs(append(args, "--kubeconfig", kubeconfig, "-n", ns)...)
}

// newNamespace creates a namespace of its own for the test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "plugin-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// placedCrawler creates a dedicated crawler at 400 requests/s and gives it the status the
// manager would: 2 vCPUs on 3 host CPUs of node, its VMI running.
func placedCrawler(t *testing.T, ns, name, node string) *isov1.CrawlerVM {
	t.Helper()
	ctx := context.Background()
	c := &isov1.CrawlerVM{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: isov1.CrawlerVMSpec{RPS: 400, ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}},
			Guest: isov1.Guest{Image: "crawler:1", Memory: resource.MustParse("1Gi")}},
	}
	if err := env.Client.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	c.Status = isov1.CrawlerVMStatus{
		Conditions: []metav1.Condition{
			{Type: isov1.ConditionPlaced, Status: metav1.ConditionTrue, Reason: isov1.ReasonPlaced, Message: "node " + node + " holds it", LastTransitionTime: now},
			{Type: isov1.ConditionReady, Status: metav1.ConditionTrue, Reason: isov1.ReasonVMIRunning, Message: "runs", LastTransitionTime: now},
		},
		Sizing:    &isov1.Sizing{VCPUs: 2, HostCPUs: 3, CPURequest: resource.MustParse("3"), Memory: resource.MustParse("1100Mi")},
		Placement: &isov1.PlacementStatus{Node: node, PredictedError: &metav1.Duration{Duration: 4200 * time.Microsecond}},
		VMI:       &isov1.VMIStatus{Name: name, Phase: string(kubevirtv1.Running)},
	}
	if err := env.Client.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStatusCommand(t *testing.T) {
	needCluster(t)
	ns := newNamespace(t)
	placedCrawler(t, ns, "tower-a", "rt-status")

	code, out, errOut := on(t, ns, "status", "tower-a")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Node:           rt-status (VMI tower-a Running)", "Why there:      node rt-status holds it", "2 vCPUs on 3 exclusive host CPUs", "To do:          nothing"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}

	code, out, errOut = on(t, ns, "status", "tower-a", "-o", "json")
	var got isov1.CrawlerVM
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || got.Kind != "CrawlerVM" || got.Status.Placement.Node != "rt-status" || len(got.ManagedFields) != 0 {
		t.Errorf("status -o json: exit %d, stderr %q, object %+v", code, errOut, got.TypeMeta)
	}
	if code, out, _ = on(t, ns, "status", "tower-a", "-o", "yaml"); code != exitOK || !strings.Contains(out, "kind: CrawlerVM\n") {
		t.Errorf("status -o yaml: exit %d:\n%s", code, out)
	}

	code, _, errOut = on(t, ns, "status", "missing")
	if code != exitError || !strings.Contains(errOut, "reading CrawlerVM missing in namespace "+ns) {
		t.Errorf("status of a missing crawler: exit %d, stderr %q", code, errOut)
	}
}

func TestCrawlerNamesComplete(t *testing.T) {
	needCluster(t)
	ns := newNamespace(t)
	placedCrawler(t, ns, "tower-a", "rt-complete")
	placedCrawler(t, ns, "gate", "rt-complete")
	// The word completed comes last, after the flags.
	code, out, errOut := runArgs("__complete", "status", "--kubeconfig", kubeconfig, "-n", ns, "tow")
	if code != exitOK || !strings.HasPrefix(out, "tower-a\n") || strings.Contains(out, "gate") {
		t.Errorf("completion: exit %d, stderr %q, out %q", code, errOut, out)
	}
}

func TestMoveCommand(t *testing.T) {
	needCluster(t)
	ns := newNamespace(t)
	placedCrawler(t, ns, "tower-a", "rt-move")
	code, out, errOut := on(t, ns, "move", "tower-a")
	if code != exitOK || !strings.Contains(out, "Asked for a move of crawler "+ns+"/tower-a off node rt-move") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	migs := &kubevirtv1.VirtualMachineInstanceMigrationList{}
	if err := env.Client.List(context.Background(), migs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(migs.Items) != 1 || migs.Items[0].Spec.VMIName != "tower-a" || migs.Items[0].Labels[isov1.LabelCrawlerVM] != "" || migs.Items[0].Spec.AddedNodeSelector != nil {
		t.Errorf("migrations %+v, want one of VMI tower-a, not labelled as isochron's, with no target", migs.Items)
	}

	placedCrawler(t, ns, "gate", "rt-move")
	code, out, errOut = on(t, ns, "move", "gate", "--to", "rt-move-2")
	if code != exitOK || !strings.Contains(out, "moves to node rt-move-2 if its model says that node holds it") {
		t.Fatalf("--to: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if err := env.Client.List(context.Background(), migs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	targets := map[string]string{}
	for _, m := range migs.Items {
		targets[m.Spec.VMIName] = m.Spec.AddedNodeSelector[corev1.LabelHostname]
	}
	if targets["gate"] != "rt-move-2" {
		t.Errorf("migrations %+v: want gate's to ask for node rt-move-2", migs.Items)
	}
	if code, _, errOut := on(t, ns, "move", "gate", "--to", "rt-move"); code != exitInvalid || !strings.Contains(errOut, "runs on node rt-move already") {
		t.Errorf("--to its own node: exit %d, stderr %q", code, errOut)
	}
}

func TestProbeCommand(t *testing.T) {
	needCluster(t)
	ns := newNamespace(t)
	c := placedCrawler(t, ns, "tower-a", "rt-probe")
	before := time.Now().Truncate(time.Second)
	if code, _, errOut := on(t, ns, "probe", "tower-a"); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339, c.Annotations[isov1.AnnotationProbeRequested])
	if err != nil || at.Before(before) || at.After(time.Now()) {
		t.Errorf("annotation %s = %q (%v), want the time of the request", isov1.AnnotationProbeRequested, c.Annotations[isov1.AnnotationProbeRequested], err)
	}
}

// plan places the files' crawlers beside the cluster's, which keep their nodes: the
// resident takes 3 of plan-a's 4 allocatable CPUs, so the new crawler goes to plan-b.
func TestPlanCommand(t *testing.T) {
	needCluster(t)
	ctx := context.Background()
	ns := newNamespace(t)
	for _, n := range []string{"plan-a", "plan-b"} {
		if err := testenv.RegisterNode(ctx, env.Client, testenv.RTNode(n, 6, "plan", ns)); err != nil {
			t.Fatal(err)
		}
	}
	placedCrawler(t, ns, "resident", "plan-a")
	file := filepath.Join(t.TempDir(), "new.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: isochron.io/v1alpha1
kind: CrawlerVM
metadata: {name: newcomer}
spec:
  rps: 400
  errorBudget: {tolerance: 10ms}
  guest: {image: img, memory: 1Gi}
  placement:
    nodeSelector: {plan: `+ns+`}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := on(t, ns, "plan", "-f", file, "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	var res cli.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Crawlers) != 1 || res.Crawlers[0].Key() != ns+"/newcomer" || res.Crawlers[0].Node != "plan-b" {
		t.Errorf("crawlers %+v, want %s/newcomer on plan-b", res.Crawlers, ns)
	}
	for _, n := range res.Nodes {
		if n.Name == "plan-a" && (len(n.Crawlers) != 1 || n.Crawlers[0] != ns+"/resident") {
			t.Errorf("plan-a holds %v, want the resident", n.Crawlers)
		}
	}

	// Nodes in the files: plan reads those from the cluster.
	if err := os.WriteFile(file, []byte("apiVersion: v1\nkind: Node\nmetadata: {name: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut = on(t, ns, "plan", "-f", file); code != exitInvalid || !strings.Contains(errOut, "plan reads those from the cluster") {
		t.Errorf("plan of a Node: exit %d, stderr %q", code, errOut)
	}
}

func TestVersionCommand(t *testing.T) {
	needCluster(t)
	ctx := context.Background()
	setVersion(t, "dev")
	code, out, errOut := on(t, "default", "version")
	if code != exitOK || out != "kubectl-isochron: dev\nmanager: not installed (no Deployment isochron-system/isochron-controller-manager)\n" {
		t.Errorf("without a manager: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"control-plane": "controller-manager"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: managerDeployment},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: managerContainer, Image: "isochron/manager:v0.9.0"}}},
		}},
	}
	if err := env.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = on(t, "default", "version")
	if code != exitOK || out != "kubectl-isochron: dev\nmanager: v0.9.0\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
