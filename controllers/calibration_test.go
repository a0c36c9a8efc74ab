package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/calibration"
)

// The recalibration and remediation tests: probes (whose pods the tests end, as the
// kubelet would) refute crawlers, and the operator recalibrates their node and, under
// onRefuted Replace, moves them.

func withOnRefuted(a isov1.RefutedAction) cvmOption {
	return func(c *isov1.CrawlerVM) {
		if c.Spec.Placement == nil {
			c.Spec.Placement = &isov1.Placement{}
		}
		c.Spec.Placement.OnRefuted = a
	}
}

// placedCrawler creates a crawler restricted to the nodes labelled it=nodes and reports
// its VMI Running on the node it was placed on.
func placedCrawler(t *testing.T, ns, name, nodes string, opts ...cvmOption) (*isov1.CrawlerVM, *kubevirtv1.VirtualMachineInstance) {
	t.Helper()
	c := crawler(ns, name, append([]cvmOption{withSelector("it", nodes), withProbeDuration(10 * time.Second)}, opts...)...)
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	vmi := waitForVMI(t, client.ObjectKeyFromObject(c), func(*kubevirtv1.VirtualMachineInstance) bool { return true })
	get(t, c)
	setVMIPhase(t, vmi, kubevirtv1.Running, c.Status.Placement.Node)
	return c, vmi
}

// refute ends the crawler's running probe with a p99.999 interval error of 14.2 ms,
// over its 10 ms tolerance, and waits for the verdict.
func refute(t *testing.T, c *isov1.CrawlerVM) {
	t.Helper()
	endProbe(t, c, "")
	waitForSLO(t, c, metav1.ConditionFalse, isov1.ReasonSLORefuted)
}

// endProbe ends the crawler's running probe Job, the one that is not job (its last,
// finished one; "" for none), with a refuting report, and returns its name.
func endProbe(t *testing.T, c *isov1.CrawlerVM, after string) string {
	t.Helper()
	var pod corev1.Pod
	var name string
	eventually(t, "a running probe pod", func() (bool, string) {
		for _, j := range probeJobs(t, c) {
			if j.Name == after || !j.DeletionTimestamp.IsZero() {
				continue
			}
			pods := &corev1.PodList{}
			if err := k8s.List(context.Background(), pods, client.InNamespace(c.Namespace), client.MatchingLabels{batchv1.JobNameLabel: j.Name}); err != nil {
				return false, err.Error()
			}
			if len(pods.Items) == 1 {
				pod, name = pods.Items[0], j.Name
				return true, ""
			}
		}
		return false, "no probe pod yet"
	})
	finishPod(t, &pod, 0, probeReport(t, 200_000, 14_200, 50, 0, 0))
	return name
}

func nodeCalibration(t *testing.T, node string) *isov1.NodeCalibration {
	t.Helper()
	cal := &isov1.NodeCalibration{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: node}, cal); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	return cal
}

func decimal(t *testing.T, d isov1.Decimal) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(string(d), 64)
	if err != nil {
		t.Fatalf("decimal %q: %v", d, err)
	}
	return v
}

// Refuting probes recalibrate their node: one probe alone does not move the model, a
// second that agrees does; from then on every prediction on the node carries the
// correction (a neighbour's rises), and a node of the same class without probes of its
// own takes the class's. With onRefuted Report nothing moves.
func TestRefutingProbesRecalibrateTheNodeAndItsClass(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	class := &isov1.ContentionProfile{
		ObjectMeta: metav1.ObjectMeta{Name: "cal-class"},
		Spec:       isov1.ContentionProfileSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"cal-class": "x"}}},
	}
	if err := k8s.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), class) })
	createNode(t, rtNode("cal-1", "it", "cal-1", "cal-class", "x"), 16)
	createNode(t, rtNode("cal-2", "it", "cal-2", "cal-class", "x"), 16)
	a, vmiA := placedCrawler(t, ns, "cal-a", "cal-1")
	b, _ := placedCrawler(t, ns, "cal-b", "cal-1")
	n, _ := placedCrawler(t, ns, "cal-n", "cal-1")
	m, _ := placedCrawler(t, ns, "cal-m", "cal-2")
	get(t, n)
	before := n.Status.Placement.PredictedError.Duration

	refute(t, a)
	cal := nodeCalibration(t, "cal-1")
	if len(cal.Status.Samples) != 1 || cal.Status.Correction != "" || cal.Status.Profile != "cal-class" {
		t.Fatalf("after one refuting probe, NodeCalibration cal-1 status %+v: want one sample of profile cal-class and no correction", cal.Status)
	}
	if s := cal.Status.Samples[0]; s.Crawler != ns+"/cal-a" || s.Measured.Duration != 14200*time.Microsecond || s.Predicted.Duration <= 0 {
		t.Errorf("sample %+v: want crawler %s/cal-a, measured 14.2ms and the model's prediction", s, ns)
	}
	if get(t, n); n.Status.Placement.Correction != "" || n.Status.Placement.PredictedError.Duration != before {
		t.Errorf("one probe moved the neighbour's prediction: %+v, was %s", n.Status.Placement, before)
	}

	refute(t, b)
	eventually(t, "NodeCalibration cal-1 to have a correction", func() (bool, string) {
		cal = nodeCalibration(t, "cal-1")
		return cal.Status.Correction != "", fmt.Sprintf("%+v", cal.Status)
	})
	var ratios []float64
	for _, s := range cal.Status.Samples {
		ratios = append(ratios, decimal(t, s.Ratio))
	}
	k := decimal(t, cal.Status.Correction)
	if want := calibration.Of(ratios).Correction; k != want || k <= 1 {
		t.Fatalf("correction %v from ratios %v, want %v (> 1: the probes measured more than predicted)", k, ratios, want)
	}
	eventually(t, "the neighbour's prediction to carry the correction", func() (bool, string) {
		get(t, n)
		p := n.Status.Placement
		return p.Correction == cal.Status.Correction, fmt.Sprintf("%+v", p)
	})
	want := time.Duration(float64(before) * k)
	t.Logf("cal-1: ratios %v, correction %v; the neighbour's prediction %s, now %s", ratios, k, before, n.Status.Placement.PredictedError.Duration)
	if got := n.Status.Placement.PredictedError.Duration; got < want-5*time.Microsecond || got > want+5*time.Microsecond {
		t.Errorf("neighbour predicted %s after the correction %v, want %s (%s × %v)", got, k, want, before, k)
	}
	if want > n.Spec.ErrorBudget.Tolerance.Duration {
		waitForCrawler(t, n, "the recalibrated neighbour to be AtRisk", func(c *isov1.CrawlerVM) bool {
			return hasCondition(c, isov1.ConditionAtRisk, metav1.ConditionTrue, isov1.ReasonPredictedOverTolerance)
		})
	}
	if got := awaitEvents(t, b, isov1.EventReasonRecalibrated+": "); !slices.ContainsFunc(got, func(e string) bool { return strings.Contains(e, "node cal-1") }) {
		t.Errorf("no Recalibrated Event for node cal-1 on %s: %v", b.Name, got)
	}
	// The node metrics are collected from the cache, which has seen the correction by now
	// or will shortly.
	eventually(t, "isochron_node_calibration_correction{node=cal-1,source=Node}", func() (bool, string) {
		v, ok := gauge(t, "isochron_node_calibration_correction", map[string]string{"node": "cal-1", "source": "Node"})
		return ok && v == k, fmt.Sprintf("%v (present %v), want %v", v, ok, k)
	})

	// The class: cal-2 has no probe of its own and takes the pooled correction.
	eventually(t, "the class correction on profile cal-class and crawler cal-m", func() (bool, string) {
		get(t, class)
		get(t, m)
		return class.Status.Correction != "" && m.Status.Placement.Correction == class.Status.Correction,
			fmt.Sprintf("profile status %+v; cal-m placement %+v", class.Status, m.Status.Placement)
	})
	if *class.Status.Samples != 2 || *class.Status.Nodes != 1 || class.Status.ObservedGeneration != class.Generation {
		t.Errorf("profile status %+v: want 2 samples on 1 node, generation %d", class.Status, class.Generation)
	}

	// Report: nobody moved.
	for _, c := range []*isov1.CrawlerVM{a, b} {
		get(t, c)
		if c.Status.Placement.Node != "cal-1" || c.Status.LastRemediation != nil {
			t.Errorf("%s under onRefuted Report: node %s, lastRemediation %+v; want it to stay on cal-1 and only report", c.Name, c.Status.Placement.Node, c.Status.LastRemediation)
		}
	}
	if get(t, vmiA); !vmiA.DeletionTimestamp.IsZero() {
		t.Error("the VMI of a Report crawler is being deleted")
	}
}

// moves counts the crawler's Moved Events.
func moves(t *testing.T, c *isov1.CrawlerVM) []string {
	t.Helper()
	var out []string
	for _, e := range events(t, c) {
		if strings.HasPrefix(e, isov1.EventReasonMoving+": ") {
			out = append(out, e)
		}
	}
	return out
}

// touch makes the crawler reconcile, as any change of its VMI does: a merge patch of an
// annotation, which no concurrent write of KubeVirt's or isochron's makes conflict.
func touch(t *testing.T, vmi *kubevirtv1.VirtualMachineInstance, what string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{"test/touched": what}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Patch(context.Background(), vmi, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// Under Replace, a refuted crawler that no other node can hold stays, keeps its VMI and
// says so, once.
func TestRefutedCrawlerWithNowhereToGoStays(t *testing.T) {
	ns := namespace(t)
	createNode(t, rtNode("stay-1", "it", "stay"), 16)
	c, vmi := placedCrawler(t, ns, "stayer", "stay", withOnRefuted(isov1.RefutedReplace))
	refute(t, c)
	waitForCrawler(t, c, "lastRemediation: stayed", func(c *isov1.CrawlerVM) bool {
		return c.Status.LastRemediation != nil
	})
	r := c.Status.LastRemediation
	if r.To != "" || r.From != "stay-1" || !strings.Contains(r.Message, "no other node is predicted to fit it") {
		t.Errorf("lastRemediation %+v: want it to stay on stay-1 and say why", r)
	}
	// The Event is recorded asynchronously, after the status write seen above.
	awaitEvents(t, c, isov1.EventReasonNoBetterNode+": ")
	touch(t, vmi, "again")
	stayed := eventsOf(t, c, isov1.EventReasonNoBetterNode)
	if len(stayed) != 1 || len(moves(t, c)) != 0 {
		t.Errorf("NoBetterNode Events %v and Moved %v: want one and none", stayed, moves(t, c))
	}
	if get(t, c); c.Status.Placement.Node != "stay-1" {
		t.Errorf("moved to %s", c.Status.Placement.Node)
	}
	if get(t, vmi); !vmi.DeletionTimestamp.IsZero() {
		t.Error("the VMI of a crawler that stays is being deleted")
	}
}
