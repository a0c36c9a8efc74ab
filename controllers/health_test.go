package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/test/health"
)

// The health tests read each crawler as Flux (kstatus) and Argo CD (config/argocd/
// health.lua, run as Argo CD runs it) read it: unstructured, straight from the API
// server, both judging the same object.

// verdict is what Flux and Argo CD make of one object.
type verdict struct {
	kstatus *status.Result
	argo    health.Status
}

func (v verdict) String() string {
	return fmt.Sprintf("kstatus %s (%s); Argo CD %s (%s)", v.kstatus.Status, v.kstatus.Message, v.argo.Status, v.argo.Message)
}

func judge(t *testing.T, u *unstructured.Unstructured) verdict {
	t.Helper()
	k, err := status.Compute(u)
	if err != nil {
		t.Fatalf("kstatus of %s: %v", u.GetName(), err)
	}
	a, err := health.Argo(u)
	if err != nil {
		t.Fatalf("Argo CD health of %s: %v", u.GetName(), err)
	}
	return verdict{k, a}
}

// readCrawler reads a crawler from the API server as unstructured.
func readCrawler(t *testing.T, key client.ObjectKey) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(isov1.GroupVersion.WithKind("CrawlerVM"))
	if err := k8s.Get(context.Background(), key, u); err != nil {
		t.Fatal(err)
	}
	return u
}

// waitForHealth waits until Flux and Argo CD read the crawler as wanted and ok holds.
func waitForHealth(t *testing.T, key client.ObjectKey, kstatus status.Status, argo string, ok func(verdict) bool) (*unstructured.Unstructured, verdict) {
	t.Helper()
	var u *unstructured.Unstructured
	var v verdict
	eventually(t, fmt.Sprintf("kstatus %s and Argo CD %s", kstatus, argo), func() (bool, string) {
		u = readCrawler(t, key)
		v = judge(t, u)
		return v.kstatus.Status == kstatus && v.argo.Status == argo && ok(v), v.String()
	})
	return u, v
}

func anyVerdict(verdict) bool { return true }

// conditionOf reads a condition of an unstructured crawler.
func conditionOf(t *testing.T, u *unstructured.Unstructured, typ string) *metav1.Condition {
	t.Helper()
	c := &isov1.CrawlerVM{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, c); err != nil {
		t.Fatal(err)
	}
	return apimeta.FindStatusCondition(c.Status.Conditions, typ)
}

// createUnstructured creates c, deleted when the test ends, and returns the object
// exactly as the API server answered.
func createUnstructured(t *testing.T, c *isov1.CrawlerVM) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(isov1.GroupVersion.WithKind("CrawlerVM"))
	delete(u.Object, "status")
	if err := k8s.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	// Free its reservation for whoever uses the node next.
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), u.DeepCopy()) })
	return u
}

func TestHealthOfAnUnplaceableCrawler(t *testing.T) {
	ns := namespace(t)
	createNode(t, rtNode("health-elsewhere", "it", "health-elsewhere"), 8)
	u := createUnstructured(t, crawler(ns, "nowhere", withSelector("it", "health-nowhere")))

	// As created, before isochron wrote any status: kstatus, seeing neither
	// observedGeneration nor a condition, calls it Current; Argo CD waits.
	if v := judge(t, u); v.kstatus.Status != status.CurrentStatus || v.argo.Status != health.Progressing {
		t.Errorf("as created: %s; want kstatus Current (it cannot tell yet) and Argo CD Progressing", v)
	}

	// The one node does not match its selector: Stalled, which kstatus reads as Failed.
	key := client.ObjectKeyFromObject(u)
	_, v := waitForHealth(t, key, status.FailedStatus, health.Degraded, anyVerdict)
	for _, msg := range []string{v.kstatus.Message, v.argo.Message} {
		if !strings.Contains(msg, "no node can host") || !strings.Contains(msg, "spec.placement.nodeSelector does not match") {
			t.Errorf("message %q does not say that no node fits and why", msg)
		}
	}
	if !strings.HasPrefix(v.argo.Message, "Stalled=True (Unschedulable): ") {
		t.Errorf("Argo CD message %q does not come from the Stalled condition", v.argo.Message)
	}
}

func TestHealthFromPlacementToRefutedSLO(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	createNode(t, rtNode("health-1", "it", "health-1"), 8)
	c := crawler(ns, "judged", withSelector("it", "health-1"), withProbeDuration(10*time.Second))
	createUnstructured(t, c)
	key := client.ObjectKeyFromObject(c)

	// Placed, its VMI not yet running: Reconciling, read as InProgress and Progressing.
	vmi := waitForVMI(t, key, func(*kubevirtv1.VirtualMachineInstance) bool { return true })
	waitForHealth(t, key, status.InProgressStatus, health.Progressing, func(v verdict) bool {
		return strings.HasPrefix(v.argo.Message, "Reconciling=True (VMIPending): ") && strings.Contains(v.kstatus.Message, "VMI judged created")
	})

	// The VMI runs, its first probe with it: Current and Healthy, the SLO not known yet.
	setVMIPhase(t, vmi, kubevirtv1.Running, "health-1")
	get(t, c)
	_, pod := waitForProbePod(t, c)
	_, v := waitForHealth(t, key, status.CurrentStatus, health.Healthy, func(v verdict) bool {
		return strings.Contains(v.argo.Message, "SLOConfirmed=Unknown (ProbeRunning)")
	})
	if !strings.HasPrefix(v.argo.Message, "VMI judged runs on node health-1; ") {
		t.Errorf("Argo CD message %q does not say where the VMI runs", v.argo.Message)
	}

	// The probe measures 14.2 ms against the 10 ms tolerance: the crawler is still
	// reconciled (kstatus Current), and Argo CD reports the refuted SLO.
	finishPod(t, pod, 0, probeReport(t, 200_000, 14_200, 50, 0, 0))
	u, v := waitForHealth(t, key, status.CurrentStatus, health.Degraded, anyVerdict)
	if want := "SLO refuted: p99.999 interval error 14.2ms exceeds the 10ms tolerance"; !strings.HasPrefix(v.argo.Message, want) {
		t.Errorf("Argo CD message %q, want it to start with %q", v.argo.Message, want)
	}

	// A new guest image: the VMI is replaced. The API server's answer to the update
	// already reads as in progress, and so does every write until the new VMI runs.
	states := watchCrawler(t, u)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u = readCrawler(t, key)
		if err := unstructured.SetNestedField(u.Object, "quay.io/isochron/crawler:0.2", "spec", "guest", "image"); err != nil {
			return err
		}
		return k8s.Update(ctx, u)
	}); err != nil {
		t.Fatal(err)
	}
	changed := u.GetGeneration()
	// readyAgain tells the state in which the VMI of the changed spec runs.
	readyAgain := func(s *unstructured.Unstructured) bool {
		ready := conditionOf(t, s, isov1.ConditionReady)
		return s.GetGeneration() == changed && ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == changed
	}
	if v := judge(t, u); v.kstatus.Status != status.InProgressStatus || v.argo.Status != health.Progressing ||
		!strings.Contains(v.kstatus.Message, fmt.Sprintf("latest observed generation is %d", changed-1)) {
		t.Errorf("right after the spec change: %s; want kstatus InProgress and Argo CD Progressing until generation %d is observed", v, changed)
	}
	vmi = waitForVMI(t, key, func(n *kubevirtv1.VirtualMachineInstance) bool {
		return n.UID != vmi.UID && n.Spec.Volumes[0].ContainerDisk != nil && n.Spec.Volumes[0].ContainerDisk.Image == "quay.io/isochron/crawler:0.2"
	})
	setVMIPhase(t, vmi, kubevirtv1.Running, "health-1")
	waitForHealth(t, key, status.CurrentStatus, health.Healthy, func(verdict) bool {
		return readyAgain(readCrawler(t, key))
	})

	// Every state isochron wrote between the update and the new VMI running.
	eventually(t, "the watch to deliver the Ready crawler", func() (bool, string) {
		seen := states()
		return slices.ContainsFunc(seen, readyAgain), fmt.Sprintf("%d states", len(seen))
	})
	checked := 0
	for _, s := range states() {
		if s.GetGeneration() < changed {
			continue // written before the update
		}
		if readyAgain(s) {
			break
		}
		checked++
		v := judge(t, s)
		what := fmt.Sprintf("resourceVersion %s (generation %d, observed %v; %s)", s.GetResourceVersion(), s.GetGeneration(), observedGeneration(s), conditionsOf(s))
		if v.argo.Status != health.Progressing {
			t.Errorf("Argo CD reads %s as %s (%s) before the new VMI runs", what, v.argo.Status, v.argo.Message)
		}
		if v.kstatus.Status != status.InProgressStatus {
			// Placing the changed spec writes status.observedGeneration before the
			// VMI is checked: setProgress counts the Ready of the earlier generation
			// as Reconciling, so no write in between reads Current.
			t.Errorf("kstatus reads %s as %s (%s) before the new VMI runs", what, v.kstatus.Status, v.kstatus.Message)
		}
	}
	if checked == 0 {
		t.Error("the watch saw no state between the spec change and the new VMI running")
	}
}

// watchCrawler records every state of the crawler the API server serves after u, until
// the test ends; the returned function lists those seen so far.
func watchCrawler(t *testing.T, u *unstructured.Unstructured) func() []*unstructured.Unstructured {
	t.Helper()
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(isov1.GroupVersion.WithKind("CrawlerVMList"))
	w, err := wc.Watch(context.Background(), list, client.InNamespace(u.GetNamespace()),
		client.MatchingFields{"metadata.name": u.GetName()},
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: u.GetResourceVersion()}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []*unstructured.Unstructured
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			if o, ok := e.Object.(*unstructured.Unstructured); ok && e.Type == watch.Modified {
				mu.Lock()
				seen = append(seen, o)
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return func() []*unstructured.Unstructured {
		mu.Lock()
		defer mu.Unlock()
		return append([]*unstructured.Unstructured(nil), seen...)
	}
}

func observedGeneration(u *unstructured.Unstructured) any {
	g, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	if !found {
		return "none"
	}
	return g
}

func conditionsOf(u *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var out []string
	for _, c := range conds {
		m, _ := c.(map[string]any)
		out = append(out, fmt.Sprintf("%v=%v/%v@%v", m["type"], m["status"], m["reason"], m["observedGeneration"]))
	}
	return strings.Join(out, " ")
}
