// Package withoutmultus runs the operator on a real API server that serves neither
// Multus' nor prometheus-operator's APIs, as on a cluster without them, and installs
// Multus while it runs.
package withoutmultus

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers"
	"isochron.io/isochron/test/support/scale"
	"isochron.io/isochron/test/support/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.InfoLevel)))
	var err error
	env, err = testenv.Start("../../..", testenv.Without(testenv.Multus, testenv.PrometheusOperator))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// TestRunsWithoutMultusUntilItIsInstalled: a crawler without an RT-NIC runs; one with an
// RT-NIC is placed and says that Multus is missing; once Multus' CRD and the network
// exist, the operator (never restarted) watches them and the second crawler's VMI is
// created on its RT network.
func TestRunsWithoutMultusUntilItIsInstalled(t *testing.T) {
	ctx := context.Background()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: env.Scheme, Cache: controllers.ManagerCacheOptions(), Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := controllers.NewCrawlerVMReconciler(mgr, controllers.WithRegistry(prometheus.NewRegistry()),
		controllers.WithAPIPollInterval(200*time.Millisecond))
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	const ns = "bms"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := testenv.RegisterNode(ctx, env.Client, testenv.RTNode("rt-1", 32)); err != nil {
		t.Fatal(err)
	}
	plain := scale.Crawler(ns, "plain", 100, false)
	withNIC := scale.Crawler(ns, "with-nic", 100, false)
	withNIC.Spec.RTNIC = &isov1.RTNIC{NetworkName: "rt-net", Deadline: metav1.Duration{Duration: 5 * time.Millisecond}, MinBandwidth: resource.MustParse("10M")}
	for _, c := range []*isov1.CrawlerVM{plain, withNIC} {
		if err := env.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	waitFor(t, plain, "a VMI without Multus", func(c *isov1.CrawlerVM) bool { return c.Status.VMI != nil })
	waitFor(t, withNIC, "placed and saying Multus is missing", func(c *isov1.CrawlerVM) bool {
		ready := apimeta.FindStatusCondition(c.Status.Conditions, isov1.ConditionReady)
		return c.Status.Placement != nil && ready != nil && ready.Reason == isov1.ReasonMultusNotInstalled
	})
	// Well within the two minutes a cache waiting for an unserved API would hold the
	// manager before it exits.
	t.Logf("without Multus: both crawlers decided %v after the manager started", time.Since(start).Round(time.Millisecond))

	if err := env.Install(testenv.Multus); err != nil {
		t.Fatal(err)
	}
	nad := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rt-net"},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"0.3.1","type":"bridge","bridge":"br-rt"}`},
	}
	if err := env.Client.Create(ctx, nad); err != nil {
		t.Fatal(err)
	}
	waitFor(t, withNIC, "a VMI once Multus is installed", func(c *isov1.CrawlerVM) bool { return c.Status.VMI != nil })
	// status.vmi names the VMI its VirtualMachine starts; KubeVirt creates it after.
	vmi := &kubevirtv1.VirtualMachineInstance{}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "with-nic"}, vmi)
		if err == nil {
			break
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			t.Fatalf("the VMI of with-nic: %v", err)
		}
	}
	var networks []string
	for _, n := range vmi.Spec.Networks {
		if n.Multus != nil {
			networks = append(networks, n.Multus.NetworkName)
		}
	}
	if len(networks) != 1 || networks[0] != "rt-net" {
		t.Errorf("VMI's Multus networks = %v, want [rt-net]", networks)
	}
}

// waitFor polls c until cond holds (a minute at most).
func waitFor(t *testing.T, c *isov1.CrawlerVM, what string, cond func(*isov1.CrawlerVM) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := &isov1.CrawlerVM{}
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(c), got)
		if err == nil && cond(got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not %s after a minute: err %v, status %+v", c.Name, what, err, got.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
