// Package testenv starts the real control plane the integration tests run on: a
// kube-apiserver and etcd (envtest, binaries built by `make envtest-bins`) with the CRDs
// of isochron, KubeVirt, Multus and prometheus-operator (ServiceMonitor, PodMonitor,
// PrometheusRule), kube-controller-manager's garbage collector and Job controllers, and
// KubeVirt's VM and migration controllers and its migration admission as package virtsim
// plays them.
package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"isochron.io/isochron/controllers"
	"isochron.io/isochron/test/support/virtsim"
)

// Env is a running control plane.
type Env struct {
	Config *rest.Config
	Scheme *runtime.Scheme
	// Client is uncached, as a user would see the API.
	Client client.Client
	// KubeVirt plays KubeVirt's VM and migration controllers (package virtsim); nil
	// with WithoutKubeVirtControllers.
	KubeVirt *virtsim.Sim
	env      *envtest.Environment
	stop     []func()
	root     string
}

// The optional third-party APIs: isochron runs without them, and Start installs them
// unless told otherwise (Without). Without KubeVirt, isochron's manager only waits for it
// and says so on every crawler; no simulation of KubeVirt's controllers runs.
const (
	KubeVirt           = "kubevirt"
	Multus             = "multus"
	PrometheusOperator = "prometheus-operator"
)

// Option changes what Start starts.
type Option func(*options)

type options struct {
	without map[string]bool
	// noKubeVirt leaves KubeVirt's controllers out (WithoutKubeVirtControllers).
	noKubeVirt bool
}

// WithoutKubeVirtControllers starts no simulation of KubeVirt's controllers: no VM starts
// a VMI. For measurements of the operator alone (make bench-placement), whose API server
// the simulation would load.
func WithoutKubeVirtControllers() Option { return func(o *options) { o.noKubeVirt = true } }

// Without leaves out the CRDs of the named optional APIs (Multus, PrometheusOperator),
// as in a cluster that lacks them; Install adds them later.
func Without(apis ...string) Option {
	return func(o *options) {
		for _, a := range apis {
			o.without[a] = true
		}
	}
}

// Start starts the control plane; root is the repository root.
func Start(root string, opts ...Option) (*Env, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run these tests with `make test-integration`, which builds kube-apiserver and etcd into bin/")
	}
	o := options{without: map[string]bool{}}
	for _, opt := range opts {
		opt(&o)
	}
	e := &Env{Scheme: controllers.Scheme(), root: root}
	crds := []string{filepath.Join(root, "config", "crd", "bases")}
	if o.without[KubeVirt] {
		o.noKubeVirt = true
	}
	for _, api := range []string{KubeVirt, Multus, PrometheusOperator} {
		if !o.without[api] {
			crds = append(crds, filepath.Join(root, "config", "thirdparty", api))
		}
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     crds,
		ErrorIfCRDPathMissing: true,
		Scheme:                e.Scheme,
	}
	if !o.noKubeVirt {
		// virt-api's migration admission, served by the simulation (virtsim.WithAdmission).
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{ValidatingWebhooks: virtsim.Webhooks()}
	}
	// A Service per crawler (its probe gateway): envtest's default /24 holds 254 of them;
	// a /16 holds what the scale tests and the placement benchmark create.
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.0.0.0/16")
	// A directory of our own for the API server's serving certificates, which envtest
	// keeps across a restart (RestartAPIServer): clients keep trusting the restarted one.
	certs, err := os.MkdirTemp("", "isochron-apiserver-")
	if err != nil {
		return nil, err
	}
	e.stop = append(e.stop, func() { _ = os.RemoveAll(certs) })
	env.ControlPlane.GetAPIServer().CertDir = certs
	// Stopping drains in-flight requests first: with operator replicas talking to it,
	// about a minute here, longer than envtest's default wait (RestartAPIServer).
	env.ControlPlaneStopTimeout = 2 * time.Minute
	cfg, err := env.Start()
	if err != nil {
		e.Stop()
		return nil, fmt.Errorf("starting the API server: %w", err)
	}
	e.stop = append(e.stop, func() { _ = env.Stop() })
	e.Config, e.env = cfg, env
	if e.Client, err = client.New(cfg, client.Options{Scheme: e.Scheme}); err != nil {
		e.Stop()
		return nil, err
	}
	stopGC, err := startControllers(env)
	if err != nil {
		e.Stop()
		return nil, fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	e.stop = append(e.stop, stopGC)
	if o.noKubeVirt {
		return e, nil
	}
	if e.KubeVirt, err = virtsim.Start(cfg, e.Scheme, virtsim.WithAdmission(env.WebhookInstallOptions)); err != nil {
		e.Stop()
		return nil, err
	}
	e.stop = append(e.stop, e.KubeVirt.Stop)
	return e, nil
}

// Install installs the CRDs of an optional API that Start left out, as an administrator
// installing it later would, and waits until the API server serves them.
func (e *Env) Install(api string) error {
	_, err := envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(e.root, "config", "thirdparty", api)}, ErrorIfPathMissing: true,
	})
	return err
}

// Stop stops everything Start started.
func (e *Env) Stop() {
	for i := len(e.stop) - 1; i >= 0; i-- {
		e.stop[i]()
	}
}

// startControllers runs kube-controller-manager (built by `make envtest-bins` next to
// kube-apiserver), which envtest does not start, with the controllers isochron relies on:
// the garbage collector (owner references delete a CrawlerVM's VMI, Service and probe
// Jobs), the Job controller (a probe Job's pods, its completion, failure and active
// deadline), the TTL-after-finished controller, and the service account controller (a
// namespace's default ServiceAccount, which pods need). No kubelet runs: tests set pod
// statuses as the kubelet would.
func startControllers(env *envtest.Environment) (func(), error) {
	path := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: run `make envtest-bins`", err)
	}
	dir, err := os.MkdirTemp("", "isochron-gc-")
	if err != nil {
		return nil, err
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := writeKubeConfig(env, "gc", kc); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "kube-controller-manager.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, "--kubeconfig", kc, "--controllers", "garbagecollector,job,ttl-after-finished,serviceaccount,disruption",
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

// RestartAPIServer stops kube-apiserver and starts it again on the same etcd, address
// and certificates, as an upgrade or a crash of the control plane would: watches break,
// clients retry, informers relist.
func (e *Env) RestartAPIServer() error {
	api := e.env.ControlPlane.GetAPIServer()
	if err := api.Stop(); err != nil {
		return fmt.Errorf("stopping kube-apiserver: %w", err)
	}
	if err := api.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again: %w", err)
	}
	return nil
}

// WriteKubeConfig writes to path a kubeconfig of an administrator named user, for a
// process run against the control plane (kube-scheduler, the manager binary).
func (e *Env) WriteKubeConfig(user, path string) error { return writeKubeConfig(e.env, user, path) }

func writeKubeConfig(env *envtest.Environment, name, path string) error {
	user, err := env.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, kubeconfig, 0o600)
}

// RTNode is a Node as the kubelet and KubeVirt's labeller of an RT node report it: static
// CPU Manager and realtime labels,
// cpus CPUs of which 2 are reserved for the host, 2Mi hugepages.
func RTNode(name string, cpus int64, labels ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		kubevirtv1.NodeSchedulable: "true", kubevirtv1.CPUManager: "true", kubevirtv1.RealtimeLabel: "true", corev1.LabelHostname: name,
	}}}
	for i := 0; i+1 < len(labels); i += 2 {
		n.Labels[labels[i]] = labels[i+1]
	}
	const gi = int64(1) << 30
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:                   *resource.NewQuantity(cpus, resource.DecimalSI),
		corev1.ResourceMemory:                *resource.NewQuantity(64*gi, resource.BinarySI),
		corev1.ResourceName("hugepages-2Mi"): *resource.NewQuantity(32*gi, resource.BinarySI),
		corev1.ResourcePods:                  *resource.NewQuantity(110, resource.DecimalSI),
	}
	alloc := capacity.DeepCopy()
	alloc[corev1.ResourceCPU] = *resource.NewQuantity(cpus-2, resource.DecimalSI)
	n.Status = corev1.NodeStatus{Capacity: capacity, Allocatable: alloc, Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(),
	}}}
	return n
}

// RegisterNode creates n and reports its status as its kubelet would. The API server
// taints a new Node not-ready until the node lifecycle controller sees it Ready; the
// taint is lifted as that controller would.
func RegisterNode(ctx context.Context, c client.Client, n *corev1.Node) error {
	status := n.Status
	if err := c.Create(ctx, n); err != nil {
		return fmt.Errorf("creating node %s: %w", n.Name, err)
	}
	n.Spec.Taints = nil
	if err := c.Update(ctx, n); err != nil {
		return fmt.Errorf("untainting node %s: %w", n.Name, err)
	}
	n.Status = status
	if err := c.Status().Update(ctx, n); err != nil {
		return fmt.Errorf("setting node %s status: %w", n.Name, err)
	}
	return nil
}

// InstallLeaderFence installs config/admission's leader fence (a ValidatingAdmissionPolicy
// and its binding) as config/default names them, its Lease parameter in leaseNamespace
// (where the test's replicas hold the manager's Lease), and returns the function that
// removes it.
func (e *Env) InstallLeaderFence(ctx context.Context, leaseNamespace string) (remove func(), err error) {
	b, err := os.ReadFile(filepath.Join(e.root, "config", "admission", "leader_fence.yaml"))
	if err != nil {
		return nil, err
	}
	docs := strings.Split(string(b), "\n---\n")
	if len(docs) != 2 {
		return nil, fmt.Errorf("leader_fence.yaml: %d documents, want the policy and its binding", len(docs))
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := yaml.UnmarshalStrict([]byte(docs[0]), policy); err != nil {
		return nil, fmt.Errorf("leader_fence.yaml: %w", err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), binding); err != nil {
		return nil, fmt.Errorf("leader_fence.yaml: %w", err)
	}
	// config/default's namePrefix, which the binding's reference already carries.
	policy.Name, binding.Name = binding.Spec.PolicyName, binding.Spec.PolicyName
	binding.Spec.ParamRef.Namespace = leaseNamespace
	if err := e.Client.Create(ctx, policy); err != nil {
		return nil, fmt.Errorf("installing the leader fence: %w", err)
	}
	if err := e.Client.Create(ctx, binding); err != nil {
		return nil, fmt.Errorf("installing the leader fence's binding: %w", err)
	}
	return func() {
		_ = e.Client.Delete(context.Background(), binding)
		_ = e.Client.Delete(context.Background(), policy)
	}, nil
}
