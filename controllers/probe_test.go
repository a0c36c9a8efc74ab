package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	dto "github.com/prometheus/client_model/go"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/slo"
	"isochron.io/isochron/probes/report"
	"isochron.io/isochron/test/support/kubelet"
)

// The probe tests run the real Job controller (kube-controller-manager) but no kubelet:
// the Job controller creates each probe pod, and the tests report the pod's end as the
// kubelet would, termination message included.

func withProbeDuration(d time.Duration) cvmOption {
	return func(c *isov1.CrawlerVM) { c.Spec.Probe = &isov1.Probe{Duration: &metav1.Duration{Duration: d}} }
}

// runningCrawler creates a crawler on its own node and reports its VMI Running (with the
// RT-NIC address ip, if given); it returns the crawler and the VMI.
func runningCrawler(t *testing.T, ns, name, ip string, opts ...cvmOption) (*isov1.CrawlerVM, *kubevirtv1.VirtualMachineInstance) {
	t.Helper()
	node := name + "-node"
	createNode(t, rtNode(node, "it", node), 8)
	c := crawler(ns, name, append([]cvmOption{withSelector("it", node), withProbeDuration(10 * time.Second)}, opts...)...)
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	vmi := waitForVMI(t, client.ObjectKey{Namespace: ns, Name: name}, func(*kubevirtv1.VirtualMachineInstance) bool { return true })
	if ip != "" {
		vmi.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: render.NetworkRT, IP: ip, IPs: []string{ip}}}
	}
	setVMIPhase(t, vmi, kubevirtv1.Running, node)
	return c, vmi
}

// probeJobs lists the crawler's probe Jobs.
func probeJobs(t *testing.T, c *isov1.CrawlerVM) []batchv1.Job {
	t.Helper()
	jobs := &batchv1.JobList{}
	if err := k8s.List(context.Background(), jobs, client.InNamespace(c.Namespace), client.MatchingLabels(slo.Selector(c))); err != nil {
		t.Fatal(err)
	}
	return jobs.Items
}

// waitForProbePod waits for the Job controller to create the pod of the crawler's one
// probe Job.
func waitForProbePod(t *testing.T, c *isov1.CrawlerVM) (*batchv1.Job, *corev1.Pod) {
	t.Helper()
	var job batchv1.Job
	var pod corev1.Pod
	eventually(t, "a probe Job and its pod", func() (bool, string) {
		jobs := probeJobs(t, c)
		if len(jobs) != 1 {
			return false, fmt.Sprintf("%d probe Jobs", len(jobs))
		}
		job = jobs[0]
		pods := &corev1.PodList{}
		if err := k8s.List(context.Background(), pods, client.InNamespace(c.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
			return false, err.Error()
		}
		if len(pods.Items) != 1 {
			return false, fmt.Sprintf("Job %s has %d pods", job.Name, len(pods.Items))
		}
		pod = pods.Items[0]
		return true, ""
	})
	return &job, &pod
}

// finishPod reports the probe container's end as the kubelet would.
func finishPod(t *testing.T, pod *corev1.Pod, exitCode int32, message string) {
	t.Helper()
	if err := kubelet.FinishPod(context.Background(), k8s, pod, exitCode, message); err != nil {
		t.Fatal(err)
	}
}

// probeReport is a report of n intervals with the given error at the objective and, if
// sent > 0, round trips of which late missed the deadline.
func probeReport(t *testing.T, n int64, atUs float64, over, sent, late int64) string {
	t.Helper()
	r, err := kubelet.ProbeReport(n, atUs, over, sent, late)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func waitForSLO(t *testing.T, c *isov1.CrawlerVM, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, fmt.Sprintf("SLOConfirmed=%s/%s", status, reason), func() (bool, string) {
		get(t, c)
		return hasCondition(c, isov1.ConditionSLOConfirmed, status, reason), condition(c, isov1.ConditionSLOConfirmed)
	})
}

// gauge is the value of a metric on the manager's registry with the given labels.
func gauge(t *testing.T, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue(), true
				}
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// awaitGauge waits until the series of metric name with labels is as want says (its
// value, and whether it is present): the crawler's gauges are set after the status write
// the test has seen, and the node metrics are collected from the manager's cache.
func awaitGauge(t *testing.T, name string, labels map[string]string, what string, want func(v float64, present bool) bool) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s%v %s", name, labels, what), func() (bool, string) {
		v, ok := gauge(t, name, labels)
		return want(v, ok), fmt.Sprintf("%v (present %v)", v, ok)
	})
}

// is wants the series present with value x.
func is(x float64) func(float64, bool) bool {
	return func(v float64, ok bool) bool { return ok && v == x }
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

func events(t *testing.T, c *isov1.CrawlerVM) []string {
	t.Helper()
	list := &corev1.EventList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(c.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.UID == c.UID {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

// awaitEvents waits for the crawler's first Event that begins with prefix (reason + ": "
// and, where it matters, the message's start) and returns all that do: an Event is
// recorded asynchronously, after the status write the test has seen.
func awaitEvents(t *testing.T, c *isov1.CrawlerVM, prefix string) []string {
	t.Helper()
	var out []string
	eventually(t, "an Event "+prefix, func() (bool, string) {
		evs := events(t, c)
		out = slices.DeleteFunc(slices.Clone(evs), func(e string) bool { return !strings.HasPrefix(e, prefix) })
		return len(out) > 0, strings.Join(evs, " | ")
	})
	return out
}

func TestProbeJobConfirmsTheSLO(t *testing.T) {
	ns := namespace(t)
	createNAD(t, ns, "rt-net")

	// The gateway Service exists from the start, before the VMI runs.
	c, _ := runningCrawler(t, ns, "probed", "10.10.0.7", withRTNIC("rt-net"))
	svc := &corev1.Service{}
	eventually(t, "the probe gateway Service", func() (bool, string) {
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "probed-probe"}, svc)
		return err == nil, fmt.Sprint(err)
	})
	if svc.Spec.Ports[0].Port != slo.GatewayPort || svc.Spec.Selector[isov1.LabelCrawlerVM] != "probed" || len(svc.OwnerReferences) != 1 {
		t.Errorf("Service ports %+v selector %v owners %+v", svc.Spec.Ports, svc.Spec.Selector, svc.OwnerReferences)
	}

	// The VMI runs: one probe Job, owned, never retried, with a deadline and a TTL,
	// probing the RT-NIC's address at the crawler's rate; its pod is Guaranteed.
	job, pod := waitForProbePod(t, c)
	get(t, c)
	s := job.Spec
	if len(job.OwnerReferences) != 1 || job.OwnerReferences[0].UID != c.UID || *s.BackoffLimit != 0 ||
		s.ActiveDeadlineSeconds == nil || *s.ActiveDeadlineSeconds < 10 || s.TTLSecondsAfterFinished == nil {
		t.Errorf("Job %s: owners %+v backoffLimit %d activeDeadlineSeconds %v ttl %v", job.Name, job.OwnerReferences, *s.BackoffLimit, s.ActiveDeadlineSeconds, s.TTLSecondsAfterFinished)
	}
	if job.Annotations[isov1.AnnotationProbeTrigger] != string(isov1.TriggerStart) {
		t.Errorf("trigger %q, want Start", job.Annotations[isov1.AnnotationProbeTrigger])
	}
	args := strings.Join(pod.Spec.Containers[0].Args, " ")
	for _, want := range []string{"slo", "--duration=10s", "--objective=99.999", "--rtt-target=10.10.0.7:7", "--rtt-rate=400", "--rtt-deadline=5ms", "--report=/dev/termination-log"} {
		if !strings.Contains(args, want) {
			t.Errorf("probe args %q lack %q", args, want)
		}
	}
	if pod.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Errorf("probe pod QoS class %q, want Guaranteed", pod.Status.QOSClass)
	}
	if pod.Annotations[nadv1.NetworkAttachmentAnnot] != ns+"/rt-net" {
		t.Errorf("probe pod networks %q, want %s/rt-net", pod.Annotations[nadv1.NetworkAttachmentAnnot], ns)
	}
	waitForSLO(t, c, metav1.ConditionUnknown, isov1.ReasonProbeRunning)

	// The probe reports; the Job completes; the result lands in status, the condition,
	// an Event and the metrics.
	finishPod(t, pod, 0, probeReport(t, 200_000, 2100, 1, 200_000, 1))
	waitForSLO(t, c, metav1.ConditionTrue, isov1.ReasonSLOMet)
	lp := c.Status.LastProbe
	if lp == nil || lp.Job != job.Name || lp.Verdict != isov1.VerdictConfirmed || lp.ObservedGeneration != c.Generation || lp.CompletionTime == nil {
		t.Fatalf("lastProbe %+v", lp)
	}
	if ie := lp.IntervalError; ie == nil || ie.Intervals != 200_000 || ie.AtObjective.Duration != 2100*time.Microsecond {
		t.Errorf("lastProbe.intervalError %+v", ie)
	}
	if rt := lp.RTNIC; rt == nil || rt.Sent != 200_000 || rt.Misses != 1 || rt.Deadline.Duration != 5*time.Millisecond {
		t.Errorf("lastProbe.rtNIC %+v", rt)
	}
	msg := apimetaMessage(c, isov1.ConditionSLOConfirmed)
	for _, want := range []string{"p99.999 interval error 2.1ms within the 10ms tolerance", "1 of 200000 RT-NIC round trips missed the 5ms deadline"} {
		if !strings.Contains(msg, want) {
			t.Errorf("SLOConfirmed message %q lacks %q", msg, want)
		}
	}
	eventually(t, "a ProbeConfirmed Event", func() (bool, string) {
		evs := events(t, c)
		return slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, isov1.EventReasonProbeConfirmed+": ") }), strings.Join(evs, " | ")
	})
	labels := map[string]string{"namespace": ns, "name": "probed"}
	awaitGauge(t, "isochron_crawler_slo_confirmed", labels, "1", is(1))
	awaitGauge(t, "isochron_crawler_measured_interval_error_seconds", map[string]string{"namespace": ns, "name": "probed", "quantile": "objective"}, "0.0021", is(0.0021))
	// 1 of 200,000 intervals over the tolerance, 2 allowed at 99.999%: half the budget left.
	awaitGauge(t, "isochron_crawler_error_budget_remaining_ratio", labels, "0.5", func(v float64, ok bool) bool { return ok && v > 0.4999 && v < 0.5001 })
	awaitGauge(t, "isochron_crawler_probe_intervals_total", labels, "200000", is(200_000))
	awaitGauge(t, "isochron_crawler_probe_intervals_over_tolerance_total", labels, "1", is(1))
	// One probe for one start: nothing more runs.
	if jobs := probeJobs(t, c); len(jobs) != 1 {
		t.Errorf("%d probe Jobs after the first finished, want 1", len(jobs))
	}

	// A spec change probes again; until that probe reports, the old result no longer
	// stands for the new spec.
	c.Spec.ErrorBudget.Tolerance = metav1.Duration{Duration: 2 * time.Millisecond}
	if err := k8s.Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	var again *batchv1.Job
	eventually(t, "a probe of the changed spec", func() (bool, string) {
		for _, j := range probeJobs(t, c) {
			if j.Name != job.Name {
				again = &j
				return true, ""
			}
		}
		return false, "only the first Job"
	})
	if again.Annotations[isov1.AnnotationProbeTrigger] != string(isov1.TriggerSpecChange) || again.Annotations[isov1.AnnotationProbeGeneration] != fmt.Sprint(c.Generation) {
		t.Errorf("Job %s annotations %v, want trigger SpecChange for generation %d", again.Name, again.Annotations, c.Generation)
	}
	waitForSLO(t, c, metav1.ConditionUnknown, isov1.ReasonProbeRunning)
	awaitGauge(t, "isochron_crawler_slo_confirmed", labels, "gone for a spec no probe has measured", func(_ float64, ok bool) bool { return !ok })
}

func apimetaMessage(c *isov1.CrawlerVM, typ string) string {
	for _, cond := range c.Status.Conditions {
		if cond.Type == typ {
			return cond.Message
		}
	}
	return ""
}

func TestRefutedProbe(t *testing.T) {
	c, _ := runningCrawler(t, namespace(t), "late", "")
	_, pod := waitForProbePod(t, c)
	finishPod(t, pod, 0, probeReport(t, 200_000, 14_200, 50, 0, 0))
	waitForSLO(t, c, metav1.ConditionFalse, isov1.ReasonSLORefuted)
	if msg := apimetaMessage(c, isov1.ConditionSLOConfirmed); !strings.Contains(msg, "p99.999 interval error 14.2ms exceeds the 10ms tolerance") {
		t.Errorf("SLOConfirmed message %q does not give the measured figure against the budget", msg)
	}
	awaitGauge(t, "isochron_crawler_slo_confirmed", map[string]string{"namespace": c.Namespace, "name": "late"}, "0", is(0))
}

func TestFailedProbeIsReportedAsFailed(t *testing.T) {
	c, _ := runningCrawler(t, namespace(t), "broken", "")
	_, pod := waitForProbePod(t, c)
	r := report.Report{Version: report.Version, Objective: 99.999, Error: "listening on --listen :8080: address already in use"}
	b, _ := r.Marshal()
	finishPod(t, pod, 1, string(b))
	waitForSLO(t, c, metav1.ConditionFalse, isov1.ReasonProbeFailed)
	if lp := c.Status.LastProbe; lp == nil || lp.Verdict != isov1.VerdictFailed || !strings.Contains(lp.Message, "address already in use") {
		t.Errorf("lastProbe %+v: want verdict Failed with the probe's error", lp)
	}
}

func TestTimedOutProbeIsReportedAsTimedOut(t *testing.T) {
	// Nobody reports the pod's end: the Job controller fails the Job at its active
	// deadline (10 s + the suite's grace).
	c, _ := runningCrawler(t, namespace(t), "silent", "")
	job, _ := waitForProbePod(t, c)
	eventuallyWithin(t, 60*time.Second, "SLOConfirmed=False/ProbeTimedOut", func() (bool, string) {
		get(t, c)
		return hasCondition(c, isov1.ConditionSLOConfirmed, metav1.ConditionFalse, isov1.ReasonProbeTimedOut), condition(c, isov1.ConditionSLOConfirmed)
	})
	if lp := c.Status.LastProbe; lp == nil || lp.Job != job.Name || lp.Verdict != isov1.VerdictTimedOut || !strings.Contains(lp.Message, "active deadline") {
		t.Errorf("lastProbe %+v: want verdict TimedOut for Job %s", lp, job.Name)
	}
}

func TestNoSecondProbeWhileOneRuns(t *testing.T) {
	ctx := context.Background()
	c, vmi := runningCrawler(t, namespace(t), "busy", "")
	first, _ := waitForProbePod(t, c)

	// A spec change while the probe runs: the outdated probe is cancelled, and the new
	// one starts only once the old Job and its pod are gone.
	get(t, c)
	c.Spec.Probe.Duration = &metav1.Duration{Duration: 11 * time.Second}
	if err := k8s.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	var second *batchv1.Job
	eventually(t, "the probe of the new spec", func() (bool, string) {
		jobs := probeJobs(t, c)
		if len(jobs) > 1 {
			names := []string{}
			for _, j := range jobs {
				names = append(names, j.Name)
			}
			t.Fatalf("two probe Jobs at once: %v", names)
		}
		if len(jobs) == 1 && jobs[0].Name != first.Name {
			second = &jobs[0]
			return true, ""
		}
		return false, fmt.Sprintf("%d Jobs", len(jobs))
	})
	// Trigger Start: no probe of this VMI has finished yet.
	if second.Annotations[isov1.AnnotationProbeTrigger] != string(isov1.TriggerStart) || second.Annotations[isov1.AnnotationProbeGeneration] != fmt.Sprint(c.Generation) {
		t.Errorf("second Job annotations %v, want trigger Start for generation %d", second.Annotations, c.Generation)
	}
	awaitEvents(t, c, isov1.EventReasonProbeCancelled+": Cancelled probe Job "+first.Name)
	// Many reconciles later (each touch of the owned VMI makes one) there is still only
	// the one Job.
	for i := range 5 {
		get(t, vmi)
		vmi.Labels["touched"] = fmt.Sprint(i)
		if err := k8s.Update(ctx, vmi); err != nil {
			t.Fatal(err)
		}
	}
	if jobs := probeJobs(t, c); len(jobs) != 1 {
		t.Errorf("%d probe Jobs, want 1", len(jobs))
	}
}

// A failed probe is not left until the next schedule slot or spec change: it is tried
// again once its backoff (a minute after the first failure) has passed, and only then.
func TestFailedProbeIsRetriedAfterItsBackoff(t *testing.T) {
	c, vmi := runningCrawler(t, namespace(t), "retried", "")
	_, pod := waitForProbePod(t, c)
	r := report.Report{Version: report.Version, Objective: 99.999, Error: "no CPU for the probe"}
	b, _ := r.Marshal()
	finishPod(t, pod, 1, string(b))
	waitForSLO(t, c, metav1.ConditionFalse, isov1.ReasonProbeFailed)
	if lp := c.Status.LastProbe; lp.ConsecutiveFailures != 1 {
		t.Errorf("lastProbe.consecutiveFailures = %d, want 1", lp.ConsecutiveFailures)
	}
	if msg := condition(c, isov1.ConditionSLOConfirmed); !strings.Contains(msg, "tried again at") {
		t.Errorf("SLOConfirmed %q does not say when the probe is tried again", msg)
	}
	retries := func() []string {
		var names []string
		for _, j := range probeJobs(t, c) {
			if j.Annotations[isov1.AnnotationProbeTrigger] == string(isov1.TriggerRetry) {
				names = append(names, j.Name)
			}
		}
		return names
	}

	// The reconcile that recorded the failure (its status is what waitForSLO saw) decided
	// the next probe too: none yet, within the backoff.
	if got := retries(); len(got) != 0 {
		t.Fatalf("retry Jobs %v started within the backoff", got)
	}

	clk.Step(61 * time.Second)
	touch(t, vmi, "after the backoff")
	eventually(t, "a retry probe Job", func() (bool, string) {
		got := retries()
		return len(got) == 1, fmt.Sprintf("retry Jobs %v", got)
	})
}

// What tells of a status change (a probe's Event and count) happens once the status that
// records it is written: a write that loses a conflict drops it, and the next reconcile,
// which records the change again, tells it once.
func TestEffectsWaitForTheStatusWrite(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	c := crawler(ns, "conflicted", withSelector("it", "no-such-node"))
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	// The operator's own write first (it cannot place the crawler), so that the test's
	// writes conflict only where the test makes them.
	waitForCrawler(t, c, "Placed=False", func(c *isov1.CrawlerVM) bool {
		return hasCondition(c, isov1.ConditionPlaced, metav1.ConditionFalse, isov1.ReasonUnschedulable)
	})
	direct, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	conflicts := 1
	cl := interceptor.NewClient(direct, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if conflicts > 0 {
				conflicts--
				return apierrors.NewConflict(isov1.GroupVersion.WithResource("crawlervms").GroupResource(), obj.GetName(), fmt.Errorf("the object has been modified"))
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	told := 0
	attempt := func() error {
		cvm := &isov1.CrawlerVM{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), cvm); err != nil {
			return err
		}
		w := controllers.NewStatusWriter(cl, record.NewFakeRecorder(10), cvm)
		cvm.Status.LastProbe = &isov1.ProbeResult{Job: "conflicted-probe-1", Trigger: isov1.TriggerStart, ObservedGeneration: cvm.Generation,
			StartTime: metav1.Now(), Verdict: isov1.VerdictFailed, Reason: isov1.ReasonProbeFailed}
		w.After(func() { told++ })
		return w.Persist(ctx, cvm)
	}
	if err := attempt(); !apierrors.IsConflict(err) {
		t.Fatalf("first write: %v, want a conflict", err)
	}
	if told != 0 {
		t.Fatalf("told %d times after a write that lost a conflict, want 0", told)
	}
	if err := attempt(); err != nil {
		t.Fatal(err)
	}
	if told != 1 {
		t.Errorf("told %d times, want once", told)
	}
}
