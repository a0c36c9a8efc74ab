package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/slo"
	"isochron.io/isochron/probes/credential"
	"isochron.io/isochron/probes/report"
	"isochron.io/isochron/test/support/virtsim"
)

// What a probe trusts (docs/probes.md): only the Job whose UID isochron recorded when it
// created it, and of it only a pod it controls that runs its template. These tests play
// a tenant who writes Jobs and pods with a probe's labels and owner references.

// recordedProbe waits for the crawler to record a probe Job (status.activeProbe) other
// than the one whose UID is not ("" for any), and for the Job controller's pod of it; it
// returns both.
func recordedProbe(t *testing.T, c *isov1.CrawlerVM, not string) (*batchv1.Job, *corev1.Pod) {
	t.Helper()
	job := &batchv1.Job{}
	var pod *corev1.Pod
	eventually(t, "a recorded probe Job and its pod", func() (bool, string) {
		get(t, c)
		a := c.Status.ActiveProbe
		if a == nil || a.UID == not {
			return false, fmt.Sprintf("activeProbe %+v", a)
		}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: c.Namespace, Name: a.Job}, job); err != nil {
			return false, err.Error()
		}
		if string(job.UID) != a.UID {
			return false, fmt.Sprintf("Job %s has UID %s, the crawler records %s", job.Name, job.UID, a.UID)
		}
		pod = podOf(t, job)
		return pod != nil, "no pod of Job " + job.Name
	})
	return job, pod
}

// podOf is the pod the Job controller made for job, nil for none yet.
func podOf(t *testing.T, job *batchv1.Job) *corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := k8s.List(context.Background(), pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.ControllerUidLabel: string(job.UID)}); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if metav1.IsControlledBy(&pods.Items[i], job) && pods.Items[i].Spec.Containers[0].Image == job.Spec.Template.Spec.Containers[0].Image {
			return &pods.Items[i]
		}
	}
	return nil
}

// tenantJob is a Job a tenant writes to pass for the crawler's probe: the probe's labels,
// an owner reference to the crawler, its own program.
func tenantJob(c *isov1.CrawlerVM, name string) *batchv1.Job {
	labels := slo.Selector(c)
	labels[isov1.LabelManagedBy] = isov1.ManagedBy
	labels[isov1.LabelName] = isov1.ProbeName
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name, Labels: labels,
			Annotations:     map[string]string{isov1.AnnotationProbeTrigger: string(isov1.TriggerStart), isov1.AnnotationProbeGeneration: "1"},
			OwnerReferences: []metav1.OwnerReference{render.OwnerReference(c)}},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: ptr.To(false),
					Containers: []corev1.Container{{Name: "rtprobe", Image: "tenant/liar"}}},
			},
		},
	}
}

// refuting and confirming are probe reports: 14.2 ms and 2.1 ms at p99.999 over 200,000
// intervals.
func refuting(t *testing.T) string { return probeReport(t, 200_000, 14_200, 50, 0, 0) }

func confirming(t *testing.T, foreign int64) string {
	t.Helper()
	r, err := report.Parse(probeReport(t, 200_000, 2100, 0, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	r.Interval.Foreign = foreign
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A Job the tenant writes with a probe's labels and an owner reference to its crawler is
// not a probe: it holds no probe back, its pod's report is never read, and the probe
// isochron created (its UID in status.activeProbe, its key from the guest Secret, the
// only pods the probe Service selects) judges the crawler. Requests the gateway did not
// count are told and change nothing.
func TestTenantsProbeJobIsNotBelieved(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	node := "forged-node"
	createNode(t, rtNode(node, "it", node), 8)
	c := crawler(ns, "forged", withSelector("it", node), withProbeDuration(10*time.Second))
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	vmi := waitForVMI(t, client.ObjectKeyFromObject(c), func(*kubevirtv1.VirtualMachineInstance) bool { return true })

	// Before the VMI runs, the tenant's Job waits, unfinished, to pass for a running probe.
	forged := tenantJob(c, "forged-probe-0")
	if err := k8s.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	setVMIPhase(t, vmi, kubevirtv1.Running, node)
	job, pod := recordedProbe(t, c, "")
	if job.UID == forged.UID {
		t.Fatalf("the crawler records the tenant's Job %s as its probe", forged.Name)
	}

	// The probe pod has the crawler's key from the guest Secret, which holds the key the
	// manager derives for this crawler and the user data the VMI names.
	key := credential.Encode(credential.Key(masterKey, string(c.UID)))
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.GuestSecretName(c)}}
	if !get(t, secret) || string(secret.Data[render.SecretKeyProbeKey]) != key || !strings.Contains(string(secret.Data[render.SecretKeyUserData]), "k="+key) ||
		!metav1.IsControlledBy(secret, c) {
		t.Errorf("guest Secret %s: probe-key %q, user data with the key %v, owners %+v; want the crawler's key in both, owned by the crawler",
			secret.Name, secret.Data[render.SecretKeyProbeKey], strings.Contains(string(secret.Data[render.SecretKeyUserData]), "k="+key), secret.OwnerReferences)
	}
	if env := pod.Spec.Containers[0].Env; len(env) != 1 || env[0].ValueFrom.SecretKeyRef.Name != secret.Name || env[0].ValueFrom.SecretKeyRef.Key != render.SecretKeyProbeKey {
		t.Errorf("probe pod env %+v: want the key from Secret %s", env, secret.Name)
	}
	// The probe Service selects the recorded Job's pods only: not the tenant's.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: slo.ServiceName(c)}}
	eventually(t, "the probe Service to select the recorded Job's pods", func() (bool, string) {
		get(t, svc)
		return svc.Spec.Selector[batchv1.ControllerUidLabel] == string(job.UID), fmt.Sprint(svc.Spec.Selector)
	})

	// The tenant's pod reports a refutation and its Job completes: nothing comes of it.
	var forgedPod *corev1.Pod
	eventually(t, "the tenant Job's pod", func() (bool, string) {
		get(t, forged)
		forgedPod = podOf(t, forged)
		return forgedPod != nil, ""
	})
	finishPod(t, forgedPod, 0, refuting(t))
	eventually(t, "the tenant's Job to complete", func() (bool, string) {
		get(t, forged)
		done, _, _, _ := slo.Finished(forged)
		return done, fmt.Sprint(forged.Status.Conditions)
	})
	// The real probe confirms, while another pod's requests reached its gateway.
	finishPod(t, pod, 0, confirming(t, 5000))
	waitForSLO(t, c, metav1.ConditionTrue, isov1.ReasonSLOMet)
	if lp := c.Status.LastProbe; lp.Job != job.Name || lp.ForeignRequests != 5000 || c.Status.ActiveProbe != nil || len(c.Status.RefutedOn) > 0 {
		t.Errorf("lastProbe %s (foreign %d), activeProbe %+v, refutedOn %+v; want %s's verdict, 5000 foreign requests told, nothing active, nothing refuted",
			lp.Job, lp.ForeignRequests, c.Status.ActiveProbe, c.Status.RefutedOn, job.Name)
	}
	if !strings.Contains(c.Status.LastProbe.Message, "5000 requests without the crawler's probe credential reached the gateway and were not counted") {
		t.Errorf("lastProbe.message %q does not tell of the foreign requests", c.Status.LastProbe.Message)
	}
	awaitEvents(t, c, isov1.EventReasonProbeForeignTraffic+": Probe Job "+job.Name+": 5000 requests")
	if got := eventsOf(t, c, isov1.EventReasonProbeRefuted); len(got) > 0 {
		t.Errorf("the tenant's report became a verdict: %v", got)
	}
}

// A Job that holds the name of the crawler's next probe (a probe whose record was lost,
// or one someone made under that name) does not keep the probe from running: it is
// deleted, and the probe created afresh under its name.
func TestJobHoldingTheProbesNameDoesNotBlockIt(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	node := "squat-node"
	createNode(t, rtNode(node, "it", node), 8)
	c := crawler(ns, "squatted", withSelector("it", node), withProbeDuration(10*time.Second))
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	vmi := waitForVMI(t, client.ObjectKeyFromObject(c), func(*kubevirtv1.VirtualMachineInstance) bool { return true })
	get(t, c)
	name := slo.JobName(credential.NameKey(masterKey), c, slo.Run{Trigger: isov1.TriggerStart, Generation: c.Generation, VMIUID: string(vmi.UID), Node: node})
	squatter := tenantJob(c, name)
	squatter.Labels, squatter.OwnerReferences = nil, nil // just the name
	squatter.Spec.Template.Labels = nil
	if err := k8s.Create(ctx, squatter); err != nil {
		t.Fatal(err)
	}
	setVMIPhase(t, vmi, kubevirtv1.Running, node)
	job, _ := recordedProbe(t, c, "")
	if job.Name != name || job.UID == squatter.UID {
		t.Errorf("recorded Job %s (uid %s); want isochron's own under the name %s, not the squatter's (uid %s)", job.Name, job.UID, name, squatter.UID)
	}
}

// Of the recorded Job, only a pod it controls and that runs its template is read: a pod
// with the Job's name label, or one the Job controls that runs another program, reports
// nothing, however late it finished.
func TestTenantsProbePodIsNotBelieved(t *testing.T) {
	ctx := context.Background()
	c, _ := runningCrawler(t, namespace(t), "podforger", "")
	job, pod := recordedProbe(t, c, "")
	later := metav1.NewTime(time.Now().Add(time.Hour))
	liar := corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: ptr.To(false),
		Containers: []corev1.Container{{Name: "rtprobe", Image: "tenant/liar"}}}
	forge := func(name string, labels map[string]string, owned bool, spec corev1.PodSpec) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name, Labels: map[string]string{batchv1.JobNameLabel: job.Name}},
			Spec:       spec,
		}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
		}
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		// Ended before it carries the labels the Job controller selects by, so that the
		// Job controller neither counts it nor stops the real pod for it.
		p.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "rtprobe", Image: "tenant/liar",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: refuting(t), StartedAt: later, FinishedAt: later}}}}}
		if err := k8s.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		if len(labels) > 0 {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
			if err := k8s.Patch(ctx, p, client.RawPatch("application/merge-patch+json", patch)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One with the Job's name label and its very template, not controlled by it; one the
	// Job controls, running the tenant's program.
	forge("named", nil, false, *job.Spec.Template.Spec.DeepCopy())
	forge("controlled", map[string]string{batchv1.ControllerUidLabel: string(job.UID)}, true, liar)
	finishPod(t, pod, 0, confirming(t, 0))
	waitForSLO(t, c, metav1.ConditionTrue, isov1.ReasonSLOMet)
	if lp := c.Status.LastProbe; lp.Job != job.Name || lp.IntervalError == nil || lp.IntervalError.AtObjective.Duration != 2100*time.Microsecond {
		t.Errorf("lastProbe %+v: want the real pod's 2.1ms", lp)
	}
}

// A crawler moved twice is measured on its third node: the Moved probe there is a run of
// its own, whatever the Moved probe on the second node left behind.
func TestCrawlerMovedTwiceIsProbedOnItsThirdNode(t *testing.T) {
	ns := namespace(t)
	for _, n := range []string{"three-1", "three-2", "three-3"} {
		createNode(t, rtNode(n, "it", "three"), 16)
	}
	migrations(t, ns, func(*kubevirtv1.VirtualMachineInstanceMigration) virtsim.Outcome { return virtsim.Complete })
	c, vmi := placedCrawler(t, ns, "wanderer", "three", withOnRefuted(isov1.RefutedReplace))
	visited := []string{c.Status.Placement.Node}
	var done []string
	for move := 1; move <= 2; move++ {
		done = append(done, endProbe(t, c, last(done)))
		waitForCrawler(t, c, fmt.Sprintf("move %d to end on a new node", move), func(c *isov1.CrawlerVM) bool {
			return c.Status.Move == nil && c.Status.LastMove != nil && c.Status.Placement != nil && !contains(visited, c.Status.Placement.Node) &&
				c.Status.LastMove.To == c.Status.Placement.Node
		})
		visited = append(visited, c.Status.Placement.Node)
		clk.Step(time.Hour + time.Minute) // the minimum interval between two moves
		touch(t, vmi, fmt.Sprintf("after move %d", move))
	}
	// On the third node: a Moved probe of its own, which judges the crawler there.
	job, pod := recordedProbe(t, c, "")
	if contains(done, job.Name) || job.Annotations[isov1.AnnotationProbeTrigger] != string(isov1.TriggerMoved) || job.Annotations[isov1.AnnotationProbeNode] != visited[2] {
		t.Fatalf("probe Job %s (%v) on the third node %s; earlier probes %v", job.Name, job.Annotations, visited[2], done)
	}
	finishPod(t, pod, 0, confirming(t, 0))
	waitForSLO(t, c, metav1.ConditionTrue, isov1.ReasonSLOMet)
	if lp := c.Status.LastProbe; lp.Node != visited[2] || lp.Trigger != isov1.TriggerMoved {
		t.Errorf("lastProbe on %q (%s), want a Moved probe on %s", lp.Node, lp.Trigger, visited[2])
	}
}

// updateSpec changes the crawler's spec as a user would, on the copy the API server has
// (the operator writes its status meanwhile).
func updateSpec(t *testing.T, c *isov1.CrawlerVM, edit func(*isov1.CrawlerVM)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		get(t, c)
		edit(c)
		return k8s.Update(context.Background(), c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// A probe cancelled while its pod is on a node whose kubelet does not answer (here: none
// runs, so the pod bound to the node is never reported gone) holds the crawler's next
// probe back for slo.CancelWait, no longer.
func TestCancelledProbeOnAnUnreachableNodeDoesNotBlock(t *testing.T) {
	ctx := context.Background()
	c, _ := runningCrawler(t, namespace(t), "stranded", "")
	first, pod := recordedProbe(t, c, "")
	// The scheduler binds the probe pod to a node; no kubelet will ever act on it.
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "stranded-node"}}
	if err := k8s.SubResource("binding").Create(ctx, pod, binding); err != nil {
		t.Fatal(err)
	}
	// A spec change cancels it: the Job is deleted in the foreground, and its pod stays.
	updateSpec(t, c, func(c *isov1.CrawlerVM) { c.Spec.Probe.Duration = &metav1.Duration{Duration: 11 * time.Second} })
	waitForCrawler(t, c, "the probe cancelled", func(c *isov1.CrawlerVM) bool {
		return c.Status.ActiveProbe != nil && c.Status.ActiveProbe.UID == string(first.UID) && c.Status.ActiveProbe.CancelTime != nil
	})
	eventually(t, "the probe pod stuck terminating", func() (bool, string) {
		get(t, pod)
		return !pod.DeletionTimestamp.IsZero(), "not being deleted"
	})
	// Within the wait, no second probe: several reconciles later, still the first.
	for i := range 3 {
		touch(t, waitForVMI(t, client.ObjectKeyFromObject(c), func(*kubevirtv1.VirtualMachineInstance) bool { return true }), fmt.Sprintf("within the wait %d", i))
	}
	if get(t, c); c.Status.ActiveProbe == nil || c.Status.ActiveProbe.UID != string(first.UID) {
		t.Fatalf("activeProbe %+v within the wait, want the cancelled %s", c.Status.ActiveProbe, first.Name)
	}
	// After it, the next probe starts; the old Job stays until its pod is gone.
	clk.Step(slo.CancelWait + time.Second)
	touch(t, waitForVMI(t, client.ObjectKeyFromObject(c), func(*kubevirtv1.VirtualMachineInstance) bool { return true }), "after the wait")
	second, _ := recordedProbe(t, c, string(first.UID))
	if second.Annotations[isov1.AnnotationProbeGeneration] != fmt.Sprint(c.Generation) {
		t.Errorf("the next probe measures generation %s, want %d", second.Annotations[isov1.AnnotationProbeGeneration], c.Generation)
	}
	awaitEvents(t, c, isov1.EventReasonProbeAbandoned+": Probe Job "+first.Name)
	if !get(t, first) || first.DeletionTimestamp.IsZero() {
		t.Errorf("the cancelled Job %s is gone or not being deleted: its pod, on a node without a kubelet, cannot be", first.Name)
	}
}

// Finished probe Jobs are kept slo.KeepFinished deep per crawler, whatever the TTL: a
// crawler whose probes fail again and again does not pile them up.
func TestFinishedProbeJobsAreBounded(t *testing.T) {
	c, vmi := runningCrawler(t, namespace(t), "failing-often", "")
	var finished []string
	prev := ""
	for i := 1; i <= slo.KeepFinished+2; i++ {
		job, pod := recordedProbe(t, c, prev)
		prev = string(job.UID)
		r := report.Report{Version: report.Version, Objective: 99.999, Error: fmt.Sprintf("failure %d", i)}
		b, _ := r.Marshal()
		finishPod(t, pod, 1, string(b))
		finished = append(finished, job.Name)
		waitForCrawler(t, c, fmt.Sprintf("failure %d recorded", i), func(c *isov1.CrawlerVM) bool {
			return c.Status.LastProbe != nil && c.Status.LastProbe.Job == job.Name
		})
		clk.Step(slo.RetryBackoff(int32(i)) + time.Second)
		touch(t, vmi, fmt.Sprintf("after failure %d", i))
	}
	eventually(t, fmt.Sprintf("at most %d finished probe Jobs", slo.KeepFinished), func() (bool, string) {
		var kept, all []string
		for _, j := range probeJobs(t, c) {
			done, _, _, _ := slo.Finished(&j)
			if done && j.DeletionTimestamp.IsZero() {
				kept = append(kept, j.Name)
			}
			all = append(all, fmt.Sprintf("%s(done %v, deleting %v)", j.Name, done, !j.DeletionTimestamp.IsZero()))
		}
		want := finished[len(finished)-slo.KeepFinished:]
		for _, n := range want {
			if !contains(kept, n) {
				return false, fmt.Sprintf("kept %v of %v, want the newest %v; events %q", kept, all, want, events(t, c))
			}
		}
		return len(kept) == slo.KeepFinished, fmt.Sprintf("kept %v of %v; events %v", kept, all, events(t, c))
	})
}

// The user's cloud-init data is in the guest Secret, which KubeVirt reads only when a VMI
// starts, so the VM's template does not change with it: a change to it restarts the VMI
// once all the same, and the Secret the new VMI starts with holds the new data.
func TestUserDataChangeRestartsTheVMI(t *testing.T) {
	c, vmi := runningCrawler(t, namespace(t), "userdata", "", func(c *isov1.CrawlerVM) { c.Spec.Guest.CloudInitUserData = "#cloud-config\n" })
	updateSpec(t, c, func(c *isov1.CrawlerVM) { c.Spec.Guest.CloudInitUserData = "#cloud-config\nruncmd: [crawler]\n" })
	next := waitForVMI(t, client.ObjectKeyFromObject(vmi), func(v *kubevirtv1.VirtualMachineInstance) bool { return v.UID != vmi.UID })
	if got, want := next.Annotations[isov1.AnnotationUserDataHash], render.UserDataHash(c); got != want {
		t.Errorf("the new VMI's %s = %q, want %q", isov1.AnnotationUserDataHash, got, want)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: render.GuestSecretName(c)}}
	if !get(t, secret) || !strings.Contains(string(secret.Data[render.SecretKeyUserData]), "runcmd: [crawler]") {
		t.Errorf("guest Secret user data %q, want the new data", secret.Data[render.SecretKeyUserData])
	}
	awaitEvents(t, c, isov1.ReasonVMIReplacing+": Restarting VMI userdata")
}
