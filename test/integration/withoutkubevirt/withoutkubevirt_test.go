// Package withoutkubevirt runs the manager binary on a real API server that does not
// serve KubeVirt's API, as on a cluster where KubeVirt is not installed yet, and installs
// KubeVirt's CRDs while it runs.
package withoutkubevirt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/test/support/binary"
	"isochron.io/isochron/test/support/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start("../../..", testenv.Without(testenv.KubeVirt))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// Without KubeVirt's API the manager does not crash at every start (a crash loop): it
// runs, every CrawlerVM says KubeVirt is missing and what to do, and once KubeVirt's CRDs
// are installed the process ends cleanly (exit 0), to start again watching them.
func TestWaitsForKubeVirtWithoutACrashLoop(t *testing.T) {
	ctx := context.Background()
	for _, ns := range []string{"isochron-system", "bms"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	c := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "tower-a"}, Spec: isov1.CrawlerVMSpec{
		RPS:         100,
		ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}},
		Guest:       isov1.Guest{Image: "quay.io/isochron/crawler:0.1", Memory: resource.MustParse("1Gi")},
	}}
	if err := env.Client.Create(ctx, c); err != nil {
		t.Fatal(err)
	}

	bin := binary.Build(t, "manager")
	kubeconfig := binary.Kubeconfig(t, env.Config, &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData}, "")
	var log binary.Log
	mgr := exec.Command(bin, "--kubeconfig", kubeconfig, "--namespace=isochron-system", "--metrics-bind-address=0",
		"--health-probe-bind-address="+binary.FreePort(t))
	mgr.Stdout, mgr.Stderr = &log, &log
	if err := mgr.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- mgr.Wait() }()
	t.Cleanup(func() {
		_ = mgr.Process.Kill()
		if t.Failed() {
			t.Logf("manager log:\n%s", log.String())
		}
	})

	deadline := time.Now().Add(time.Minute)
	for {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			t.Fatal(err)
		}
		ready := apimeta.FindStatusCondition(c.Status.Conditions, isov1.ConditionReady)
		if ready != nil && ready.Reason == isov1.ReasonKubeVirtNotInstalled && strings.Contains(ready.Message, "install KubeVirt") {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the manager exited before telling the crawler (%v): a crash loop", err)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for Ready=False KubeVirtNotInstalled; last seen %+v", ready)
		}
	}

	if err := env.Install(testenv.KubeVirt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if errors.As(err, &exit) || err != nil {
			t.Fatalf("the manager exited with %v once KubeVirt was installed; want a clean exit (0), to start again watching it", err)
		}
		if !strings.Contains(log.String(), "KubeVirt's API is served now") {
			t.Errorf("the manager's log does not say why it exited")
		}
	case <-time.After(time.Minute):
		t.Fatal("the manager did not notice KubeVirt's API within a minute (it looks every 10 s)")
	}
}
