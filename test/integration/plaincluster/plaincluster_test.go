// Package plaincluster installs isochron's config/default on a real API server as on a
// plain cluster: KubeVirt installed, no prometheus-operator, no Multus, and Pod Security
// Admission enforcing each namespace's level. Every object must be admitted, and the
// pods the manager's Deployment and the NIC agent's DaemonSet make too.
package plaincluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"isochron.io/isochron/test/support/manifests"
	"isochron.io/isochron/test/support/testenv"
)

const root = "../../.."

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start(root, testenv.Without(testenv.Multus, testenv.PrometheusOperator), testenv.WithoutKubeVirtControllers())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// config/default installs where neither prometheus-operator nor Multus runs, each of
// its namespaces at the Pod Security level its pods need: the manager's restricted, the
// NIC agent's privileged. The API server's Pod Security admission judges the pods their
// controllers would create (a dry run of each template), and refuses the agent's pod in
// the manager's namespace: the levels are enforced, not only written.
func TestDefaultInstallsOnAPlainCluster(t *testing.T) {
	ctx := context.Background()
	objs := manifests.Build(t, root, "config/default")
	for _, o := range objs {
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
			t.Errorf("applying %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	levels := map[string]string{"isochron-system": "restricted", "isochron-nic-agent": "privileged"}
	for ns, want := range levels {
		n := &corev1.Namespace{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil {
			t.Fatal(err)
		}
		if got := n.Labels["pod-security.kubernetes.io/enforce"]; got != want {
			t.Errorf("namespace %s enforces Pod Security %q, want %q", ns, got, want)
		}
	}

	var manager, agent *corev1.PodTemplateSpec
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			d := &appsv1.Deployment{}
			convert(t, o, d)
			manager = &d.Spec.Template
			if o.GetNamespace() != "isochron-system" {
				t.Errorf("Deployment %s in namespace %s, want isochron-system", o.GetName(), o.GetNamespace())
			}
		case "DaemonSet":
			ds := &appsv1.DaemonSet{}
			convert(t, o, ds)
			agent = &ds.Spec.Template
			if o.GetNamespace() != "isochron-nic-agent" {
				t.Errorf("DaemonSet %s in namespace %s, want isochron-nic-agent", o.GetName(), o.GetNamespace())
			}
		}
	}
	if manager == nil || agent == nil {
		t.Fatalf("config/default: manager Deployment %v, NIC agent DaemonSet %v", manager != nil, agent != nil)
	}
	if err := createPod(ctx, "isochron-system", "manager", manager); err != nil {
		t.Errorf("the manager's pod in isochron-system: %v", err)
	}
	if err := createPod(ctx, "isochron-nic-agent", "nic-agent", agent); err != nil {
		t.Errorf("the NIC agent's pod in isochron-nic-agent: %v", err)
	}
	// The agent's pod where the manager runs: refused, the level is enforced.
	err := createPod(ctx, "isochron-system", "nic-agent", agent)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Errorf("the NIC agent's pod in isochron-system: %v, want refused by Pod Security (restricted)", err)
	}
}

// createPod creates, as a dry run, the pod a controller makes from template in ns.
func createPod(ctx context.Context, ns, name string, template *corev1.PodTemplateSpec) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: template.Labels}, Spec: *template.Spec.DeepCopy()}
	return env.Client.Create(ctx, pod, client.DryRunAll)
}

func convert(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatal(err)
	}
}
