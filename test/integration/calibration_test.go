package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/slo"
	"isochron.io/isochron/test/support/kubelet"
	"isochron.io/isochron/test/support/scale"
	"isochron.io/isochron/test/support/testenv"
)

// waitFor polls cond until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", limit, what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runAndRefute reports the crawler's VMI Running on its node, as virt-handler would, and
// ends its first probe with a refuting report (14.2 ms at p99.999 against 10 ms), as the
// kubelet would.
func runAndRefute(t *testing.T, c *isov1.CrawlerVM) {
	t.Helper()
	ctx := context.Background()
	vmi := &kubevirtv1.VirtualMachineInstance{}
	waitFor(t, time.Minute, "the VMI of "+c.Name, func() (bool, string) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), vmi)
		return err == nil, fmt.Sprint(err)
	})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	if err := kubelet.SetVMIPhase(ctx, env.Client, vmi, kubevirtv1.Running, c.Status.Placement.Node); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	waitFor(t, time.Minute, "the probe pod of "+c.Name, func() (bool, string) {
		jobs := &batchv1.JobList{}
		if err := env.Client.List(ctx, jobs, client.InNamespace(c.Namespace), client.MatchingLabels(slo.Selector(c))); err != nil || len(jobs.Items) != 1 {
			return false, fmt.Sprintf("probe Jobs: %v", err)
		}
		pods := &corev1.PodList{}
		if err := env.Client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels{batchv1.JobNameLabel: jobs.Items[0].Name}); err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprintf("pods of Job %s: %v", jobs.Items[0].Name, err)
		}
		pod = pods.Items[0]
		return true, ""
	})
	report, err := kubelet.ProbeReport(200_000, 14_200, 50, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := kubelet.FinishPod(ctx, env.Client, &pod, 0, report); err != nil {
		t.Fatal(err)
	}
}

// A restarted operator keeps the calibration: it lives in the API (the node's
// NodeCalibration), not in the operator's memory. One replica records refuting probes of
// three namespaces on a node (the fewest that make a correction) and is killed; the next
// replica, a new process with nothing of the first, places a new crawler there with the
// node's correction.
func TestCalibrationSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	node := testenv.RTNode("restart-1", 26, "pool", "restart")
	if err := testenv.RegisterNode(ctx, env.Client, node); err != nil {
		t.Fatal(err)
	}
	onNode := func(c *isov1.CrawlerVM) *isov1.CrawlerVM {
		c.Spec.Placement = &isov1.Placement{NodeSelector: map[string]string{"pool": "restart"}}
		c.Spec.Probe = &isov1.Probe{Duration: &metav1.Duration{Duration: 10 * time.Second}}
		return c
	}

	stop := replica(t, "first", 1)
	var refuted []*isov1.CrawlerVM
	for _, name := range []string{"a", "b", "d"} {
		refuted = append(refuted, onNode(scale.Crawler(namespace(t, "restart-"+name), name, 400, false)))
	}
	createAll(t, refuted)
	for _, c := range refuted {
		runAndRefute(t, c)
	}
	cal := &isov1.NodeCalibration{}
	waitFor(t, time.Minute, "NodeCalibration restart-1 to have a correction", func() (bool, string) {
		err := env.Client.Get(ctx, client.ObjectKey{Name: "restart-1"}, cal)
		return err == nil && cal.Status.Correction != "", fmt.Sprintf("%+v %v", cal.Status, err)
	})
	stop()

	stop = replica(t, "second", 1)
	defer stop()
	c := onNode(scale.Crawler(refuted[0].Namespace, "c", 100, false))
	createAll(t, []*isov1.CrawlerVM{c})
	waitFor(t, time.Minute, "crawler c placed with the node's correction", func() (bool, string) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err.Error()
		}
		p := c.Status.Placement
		return p != nil && p.Correction == cal.Status.Correction, fmt.Sprintf("placement %+v", p)
	})
	t.Logf("node restart-1: correction %s from %d samples; crawler c predicted %s after the restart",
		cal.Status.Correction, len(cal.Status.Samples), c.Status.Placement.PredictedError.Duration)
}
