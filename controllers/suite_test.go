package controllers_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers"
	"isochron.io/isochron/internal/placement"
)

// The suite runs on a real kube-apiserver and etcd (envtest, binaries built by
// `make envtest-bins`) with the real CRDs of isochron, KubeVirt and Multus installed, and
// the operator's reconciler running in a manager as in production.
var (
	k8s    client.Client // an uncached client, as a user would see the API
	scheme = runtime.NewScheme()
	cfg    *rest.Config
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run these tests with `make test-integration`, which builds kube-apiserver and etcd into bin/")
		return 1
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(zapLevel())))
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, isov1.AddToScheme, kubevirtv1.AddToScheme, nadv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	root := filepath.Join("..")
	env := &envtest.Environment{
		CRDDirectoryPaths: []string{
			filepath.Join(root, "config", "crd", "bases"),
			filepath.Join(root, "config", "thirdparty", "kubevirt"),
			filepath.Join(root, "config", "thirdparty", "multus"),
		},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	var err error
	cfg, err = env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the API server: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the API server: %v\n", err)
		}
	}()
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	// The garbage collector that deletes a CrawlerVM's VMI through its owner reference
	// lives in kube-controller-manager, which envtest does not start: run it.
	stopGC, err := startGarbageCollector(env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the garbage collector: %v\n", err)
		return 1
	}
	defer stopGC()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		panic(err)
	}
	if err := (&controllers.CrawlerVMReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorderFor("isochron"),
	}).SetupWithManager(mgr); err != nil {
		panic(err)
	}
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintf(os.Stderr, "manager: %v\n", err)
	}
	return code
}

func zapLevel() zapcore.Level {
	if os.Getenv("TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

// --- builders -----------------------------------------------------------------

const gi = int64(1) << 30

// rtNode is a Node as the kubelet of an RT node reports it: static CPU Manager label,
// allocatable CPUs and 2Mi hugepages.
func rtNode(name string, labels ...string) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			placement.CPUManagerLabel: "true", "kubernetes.io/hostname": name,
		}},
	}
	for i := 0; i+1 < len(labels); i += 2 {
		n.Labels[labels[i]] = labels[i+1]
	}
	return n.DeepCopy()
}

func nodeStatus(cpus int64) corev1.NodeStatus {
	res := corev1.ResourceList{
		corev1.ResourceCPU:                   *resource.NewQuantity(cpus, resource.DecimalSI),
		corev1.ResourceMemory:                *resource.NewQuantity(64*gi, resource.BinarySI),
		corev1.ResourceName("hugepages-2Mi"): *resource.NewQuantity(32*gi, resource.BinarySI),
		corev1.ResourcePods:                  *resource.NewQuantity(110, resource.DecimalSI),
	}
	return corev1.NodeStatus{Capacity: res, Allocatable: res, Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(),
	}}}
}

// createNode registers a Node with its allocatable resources (status is a subresource).
func createNode(t *testing.T, n *corev1.Node, cpus int64) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Create(ctx, n); err != nil {
		t.Fatalf("creating node %s: %v", n.Name, err)
	}
	// The API server taints a new Node not-ready; the node lifecycle controller lifts the
	// taint once the kubelet reports Ready. Do both, as they would.
	n.Spec.Taints = nil
	if err := k8s.Update(ctx, n); err != nil {
		t.Fatalf("untainting node %s: %v", n.Name, err)
	}
	n.Status = nodeStatus(cpus)
	if err := k8s.Status().Update(ctx, n); err != nil {
		t.Fatalf("setting node %s status: %v", n.Name, err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "it-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

type cvmOption func(*isov1.CrawlerVM)

func crawler(ns, name string, opts ...cvmOption) *isov1.CrawlerVM {
	c := &isov1.CrawlerVM{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: isov1.CrawlerVMSpec{
			RPS:         400,
			ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}},
			Guest:       isov1.Guest{Image: "quay.io/isochron/crawler:0.1", Memory: resource.MustParse("1Gi")},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func withRPS(rps int32) cvmOption { return func(c *isov1.CrawlerVM) { c.Spec.RPS = rps } }

func withSelector(k, v string) cvmOption {
	return func(c *isov1.CrawlerVM) {
		c.Spec.Placement = &isov1.Placement{NodeSelector: map[string]string{k: v}}
	}
}

func withRTNIC(network string) cvmOption {
	return func(c *isov1.CrawlerVM) {
		c.Spec.RTNIC = &isov1.RTNIC{NetworkName: network, Deadline: metav1.Duration{Duration: 5 * time.Millisecond}, MinBandwidth: resource.MustParse("100M")}
	}
}

// eventually polls cond until it holds or the deadline passes: waiting for the
// operator, never sleeping in its place.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last seen: %s", what, last)
}

func get(t *testing.T, obj client.Object) bool {
	t.Helper()
	err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
	if err != nil && client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	return err == nil
}

// startGarbageCollector runs kube-controller-manager (built by `make envtest-bins` next
// to kube-apiserver) with only its garbage collector, against the test API server.
func startGarbageCollector(env *envtest.Environment) (func(), error) {
	path := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: run `make envtest-bins`", err)
	}
	user, err := env.AddUser(envtest.User{Name: "gc", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "isochron-gc-")
	if err != nil {
		return nil, err
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "kube-controller-manager.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, "--kubeconfig", kc, "--controllers", "garbagecollector",
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = log.Close()
		_ = os.RemoveAll(dir)
	}, nil
}
