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
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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
	return endProbeWith(t, c, after, probeReport(t, 200_000, 14_200, 50, 0, 0))
}

// endProbeWith ends the crawler's running probe Job that is not after with the report,
// as the kubelet would, and returns its name.
func endProbeWith(t *testing.T, c *isov1.CrawlerVM, after, report string) string {
	t.Helper()
	var pod corev1.Pod
	var name string
	eventually(t, "a running probe pod of "+c.Name, func() (bool, string) {
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
	finishPod(t, &pod, 0, report)
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

// calibratedCondition is the Calibrated condition of a NodeCalibration's or a
// ContentionProfile's status as "Status Reason: message", "none" when absent.
func calibratedCondition(cs []metav1.Condition) string {
	c := apimeta.FindStatusCondition(cs, isov1.ConditionCalibrated)
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
}

func decimal(t *testing.T, d isov1.Decimal) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(string(d), 64)
	if err != nil {
		t.Fatalf("decimal %q: %v", d, err)
	}
	return v
}

// Refuting probes recalibrate their node once they come from three namespaces: the
// probes of one or two namespaces do not move the model, a third's that agree do; from
// then on every prediction on the node carries the correction (a neighbour's rises), and
// a node of the same class without probes of its own takes the class's. With onRefuted
// Report nothing moves.
func TestRefutingProbesRecalibrateTheNodeAndItsClass(t *testing.T) {
	ctx := context.Background()
	nsA, nsB, nsC := namespace(t), namespace(t), namespace(t)
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
	a, vmiA := placedCrawler(t, nsA, "cal-a", "cal-1")
	b, _ := placedCrawler(t, nsB, "cal-b", "cal-1")
	c, _ := placedCrawler(t, nsC, "cal-c", "cal-1")
	n, _ := placedCrawler(t, nsA, "cal-n", "cal-1")
	m, _ := placedCrawler(t, nsA, "cal-m", "cal-2")
	get(t, n)
	before := n.Status.Placement.PredictedError.Duration

	refute(t, a)
	cal := nodeCalibration(t, "cal-1")
	if len(cal.Status.Samples) != 1 || cal.Status.Correction != "" || cal.Status.Profile != "cal-class" {
		t.Fatalf("after one refuting probe, NodeCalibration cal-1 status %+v: want one sample of profile cal-class and no correction", cal.Status)
	}
	if s := cal.Status.Samples[0]; s.Crawler != nsA+"/cal-a" || s.Measured.Duration != 14200*time.Microsecond || s.Predicted.Duration <= 0 {
		t.Errorf("sample %+v: want crawler %s/cal-a, measured 14.2ms and the model's prediction", s, nsA)
	}
	refute(t, b)
	cal = nodeCalibration(t, "cal-1")
	want := "False TooFewNamespaces: samples from 2 namespaces, 3 needed: the node takes its class's correction, if its profile has one; no namespace moves the shared model alone"
	if got := calibratedCondition(cal.Status.Conditions); len(cal.Status.Samples) != 2 || cal.Status.Correction != "" || got != want {
		t.Fatalf("after refuting probes of two namespaces, NodeCalibration cal-1 status %+v, condition %s: want no correction and %s", cal.Status, got, want)
	}
	if get(t, n); n.Status.Placement.Correction != "" || n.Status.Placement.PredictedError.Duration != before {
		t.Errorf("the probes of two namespaces moved the neighbour's prediction: %+v, was %s", n.Status.Placement, before)
	}

	refute(t, c)
	eventually(t, "NodeCalibration cal-1 to have a correction", func() (bool, string) {
		cal = nodeCalibration(t, "cal-1")
		return cal.Status.Correction != "", fmt.Sprintf("%+v", cal.Status)
	})
	if *cal.Status.Namespaces != 3 || !strings.HasPrefix(calibratedCondition(cal.Status.Conditions), "True EnoughNamespaces: the node's own correction is "+string(cal.Status.Correction)+", from 3 samples of 3 namespaces") {
		t.Errorf("NodeCalibration cal-1: %d namespaces, condition %s", *cal.Status.Namespaces, calibratedCondition(cal.Status.Conditions))
	}
	samples := make([]calibration.Sample, 0, len(cal.Status.Samples))
	for _, s := range cal.Status.Samples {
		samples = append(samples, calibration.Sample{Crawler: s.Crawler, Ratio: decimal(t, s.Ratio)})
	}
	k := decimal(t, cal.Status.Correction)
	if want := calibration.Of(samples).Correction; k != want || k <= 1 {
		t.Fatalf("correction %v from samples %+v, want %v (> 1: the probes measured more than predicted)", k, samples, want)
	}
	eventually(t, "the neighbour's prediction to carry the correction", func() (bool, string) {
		get(t, n)
		p := n.Status.Placement
		return p.Correction == cal.Status.Correction, fmt.Sprintf("%+v", p)
	})
	wantPredicted := time.Duration(float64(before) * k)
	t.Logf("cal-1: samples %+v, correction %v; the neighbour's prediction %s, now %s", samples, k, before, n.Status.Placement.PredictedError.Duration)
	if got := n.Status.Placement.PredictedError.Duration; got < wantPredicted-5*time.Microsecond || got > wantPredicted+5*time.Microsecond {
		t.Errorf("neighbour predicted %s after the correction %v, want %s (%s × %v)", got, k, wantPredicted, before, k)
	}
	if wantPredicted > n.Spec.ErrorBudget.Tolerance.Duration {
		waitForCrawler(t, n, "the recalibrated neighbour to be AtRisk", func(c *isov1.CrawlerVM) bool {
			return hasCondition(c, isov1.ConditionAtRisk, metav1.ConditionTrue, isov1.ReasonPredictedOverTolerance)
		})
	}
	if got := awaitEvents(t, c, isov1.EventReasonRecalibrated+": "); !slices.ContainsFunc(got, func(e string) bool {
		return strings.Contains(e, "node cal-1") && strings.Contains(e, "the node's own (samples from 3 namespaces)")
	}) {
		t.Errorf("no Recalibrated Event for node cal-1 on %s saying it rests on 3 namespaces: %v", c.Name, got)
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
	if *class.Status.Samples != 3 || *class.Status.Nodes != 1 || *class.Status.Namespaces != 3 || class.Status.ObservedGeneration != class.Generation {
		t.Errorf("profile status %+v: want 3 samples of 3 namespaces on 1 node, generation %d", class.Status, class.Generation)
	}

	// Report: nobody moved.
	for _, c := range []*isov1.CrawlerVM{a, b, c} {
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

func withTolerance(d time.Duration) cvmOption {
	return func(c *isov1.CrawlerVM) { c.Spec.ErrorBudget.Tolerance = metav1.Duration{Duration: d} }
}

// awaitSample waits until the NodeCalibration of node holds the sample of probe Job job,
// and returns it.
func awaitSample(t *testing.T, node, job string) *isov1.NodeCalibration {
	t.Helper()
	var cal *isov1.NodeCalibration
	eventually(t, "the sample of probe Job "+job+" on node "+node, func() (bool, string) {
		cal = nodeCalibration(t, node)
		return slices.ContainsFunc(cal.Status.Samples, func(s isov1.CalibrationSample) bool { return s.Job == job }), fmt.Sprintf("%+v", cal.Status)
	})
	return cal
}

// A tenant whose guests lie about themselves moves neither its node's correction nor
// its class's, and so neither its neighbours' verdicts nor what else the node accepts.
// Three honest namespaces calibrate node trust-1 at 1 (their probes measure what the
// model predicts); the attacker's namespace then runs four crawlers there and two on
// trust-2, of the same class, whose guests stall on purpose: every probe measures 5 s
// against a 10 ms tolerance, a ratio in the thousands. The node's correction and the
// class's stay 1; trust-2, where only the attacker probed, has no correction of its own;
// the neighbours, which a fourfold correction would put over their tolerance, stay
// within it and are placed again without a correction, and so is a new crawler.
func TestOneNamespaceCannotMoveTheSharedModel(t *testing.T) {
	ctx := context.Background()
	class := &isov1.ContentionProfile{
		ObjectMeta: metav1.ObjectMeta{Name: "trust-class"},
		Spec:       isov1.ContentionProfileSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"trust-class": "x"}}},
	}
	if err := k8s.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), class) })
	createNode(t, rtNode("trust-1", "it", "trust-1", "trust-class", "x"), 32)
	createNode(t, rtNode("trust-2", "it", "trust-2", "trust-class", "x"), 32)
	honest := []string{namespace(t), namespace(t), namespace(t)}
	liar := namespace(t)

	// The honest crawlers' tolerance of 10s puts the ratio's floor at 1s: whatever they
	// measure below it, their ratio is exactly 1.
	var probed []*isov1.CrawlerVM
	for i, ns := range honest {
		c, _ := placedCrawler(t, ns, fmt.Sprintf("honest-%d", i), "trust-1", withRPS(50), withTolerance(10*time.Second))
		probed = append(probed, c)
	}
	// The neighbours: a fourfold correction would put them over their 3ms tolerance.
	neighbourTolerance := 3 * time.Millisecond
	n1, _ := placedCrawler(t, honest[0], "neighbour-1", "trust-1", withTolerance(neighbourTolerance))
	n2, _ := placedCrawler(t, honest[1], "neighbour-2", "trust-2", withTolerance(neighbourTolerance))
	var stalls []*isov1.CrawlerVM
	for i, node := range []string{"trust-1", "trust-1", "trust-1", "trust-1", "trust-2", "trust-2"} {
		c, _ := placedCrawler(t, liar, fmt.Sprintf("stall-%d", i), node, withRPS(50))
		stalls = append(stalls, c)
	}
	for _, n := range []*isov1.CrawlerVM{n1, n2} {
		get(t, n)
		p := n.Status.Placement.PredictedError.Duration
		t.Logf("%s on %s: predicted %s, tolerance %s", n.Name, n.Status.Placement.Node, p, neighbourTolerance)
		if time.Duration(float64(p)*calibration.Max) <= neighbourTolerance || !hasCondition(n, isov1.ConditionAtRisk, metav1.ConditionFalse, isov1.ReasonPredictedWithinTolerance) {
			t.Fatalf("test setup: %s predicted %s, AtRisk %s: want within its %s tolerance, and over it at %vx",
				n.Name, p, condition(n, isov1.ConditionAtRisk), neighbourTolerance, calibration.Max)
		}
	}

	// The honest namespaces calibrate trust-1, and the class, at 1.
	for _, c := range probed {
		awaitSample(t, "trust-1", endProbeWith(t, c, "", probeReport(t, 200_000, 5_000, 0, 0, 0)))
	}
	cal := nodeCalibration(t, "trust-1")
	if cal.Status.Correction != "1" || *cal.Status.Namespaces != 3 {
		t.Fatalf("trust-1 after the honest probes: %+v, want correction 1 from 3 namespaces", cal.Status)
	}
	eventually(t, "the class correction of 3 namespaces", func() (bool, string) {
		get(t, class)
		return ptr.Deref(class.Status.Namespaces, 0) == 3, fmt.Sprintf("%+v", class.Status)
	})
	if class.Status.Correction != "1" {
		t.Fatalf("class after the honest probes: %+v, want correction 1", class.Status)
	}

	// The attack: every stalled guest's probe measures 5s. After each, trust-1 keeps the
	// honest namespaces' correction and trust-2 has none of its own.
	for _, c := range stalls {
		job := endProbeWith(t, c, "", probeReport(t, 200_000, 5_000_000, 200_000, 0, 0))
		node := c.Status.Placement.Node
		cal := awaitSample(t, node, job)
		if want := map[string]isov1.Decimal{"trust-1": "1", "trust-2": ""}[node]; cal.Status.Correction != want {
			t.Fatalf("after probe Job %s of the attacker's %s, node %s's correction is %q, want %q: %s",
				job, c.Name, node, cal.Status.Correction, want, calibratedCondition(cal.Status.Conditions))
		}
	}
	cal = nodeCalibration(t, "trust-1")
	attackerSamples := 0
	for _, s := range cal.Status.Samples {
		if strings.HasPrefix(s.Crawler, liar+"/") {
			attackerSamples++
			if r := decimal(t, s.Ratio); r < 100 {
				t.Errorf("attacker's sample %+v: ratio %v, want the stall's thousands", s, r)
			}
		}
	}
	t.Logf("trust-1 after the attack: correction %s, %d namespaces, %d samples (%d the attacker's); %s",
		cal.Status.Correction, *cal.Status.Namespaces, len(cal.Status.Samples), attackerSamples, calibratedCondition(cal.Status.Conditions))
	if cal.Status.Correction != "1" || *cal.Status.Namespaces != 4 || attackerSamples != calibration.PerNamespace {
		t.Errorf("trust-1 after the attack: correction %q from %d namespaces, %d of the attacker's samples kept; want 1, 4 and %d",
			cal.Status.Correction, *cal.Status.Namespaces, attackerSamples, calibration.PerNamespace)
	}
	cal2 := nodeCalibration(t, "trust-2")
	want := "False TooFewNamespaces: samples from 1 namespace, 3 needed: the node takes its class's correction, if its profile has one; no namespace moves the shared model alone"
	if got := calibratedCondition(cal2.Status.Conditions); cal2.Status.Correction != "" || got != want {
		t.Errorf("trust-2, probed by the attacker alone: correction %q, condition %s; want none and %s", cal2.Status.Correction, got, want)
	}
	eventually(t, "the class to count the attacker's namespace", func() (bool, string) {
		get(t, class)
		return ptr.Deref(class.Status.Namespaces, 0) == 4, fmt.Sprintf("%+v", class.Status)
	})
	if class.Status.Correction != "1" {
		t.Errorf("class after the attack: %+v (%s), want correction 1", class.Status, calibratedCondition(class.Status.Conditions))
	}

	// The neighbours. Once the manager's cache holds the attacked calibrations (the node
	// metrics are collected from it), a new decision for each reads them: they stay
	// within their tolerance, without a correction, and a new crawler is placed.
	for node, cal := range map[string]*isov1.NodeCalibration{"trust-1": cal, "trust-2": cal2} {
		awaitGauge(t, "isochron_node_calibration_samples", map[string]string{"node": node}, fmt.Sprint(len(cal.Status.Samples)), is(float64(len(cal.Status.Samples))))
	}
	for _, n := range []*isov1.CrawlerVM{n1, n2} {
		// A merge patch: no conflict with the manager's status writes.
		if err := k8s.Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"probe":{"duration":"11s"}}}`))); err != nil {
			t.Fatal(err)
		}
	}
	late := crawler(honest[2], "late", withSelector("it", "trust-1"), withTolerance(neighbourTolerance))
	if err := k8s.Create(ctx, late); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*isov1.CrawlerVM{n1, n2, late} {
		waitForCrawler(t, n, "a decision for the current spec", func(c *isov1.CrawlerVM) bool {
			return c.Status.ObservedGeneration == c.Generation && apimeta.FindStatusCondition(c.Status.Conditions, isov1.ConditionPlaced) != nil
		})
		if !hasCondition(n, isov1.ConditionPlaced, metav1.ConditionTrue, isov1.ReasonPlaced) ||
			!hasCondition(n, isov1.ConditionAtRisk, metav1.ConditionFalse, isov1.ReasonPredictedWithinTolerance) ||
			n.Status.Placement.Correction != "" {
			t.Errorf("%s after the attack: Placed %s, AtRisk %s, placement %+v; want placed within its tolerance, no correction",
				n.Name, condition(n, isov1.ConditionPlaced), condition(n, isov1.ConditionAtRisk), n.Status.Placement)
		}
	}
}
