package slo

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/probes/credential"
	"isochron.io/isochron/probes/gateway"
	"isochron.io/isochron/probes/interval"
	"isochron.io/isochron/probes/report"
	"isochron.io/isochron/probes/rtt"
	"isochron.io/isochron/probes/stats"
)

var t0 = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

func crawler(opts ...func(*isov1.CrawlerVM)) *isov1.CrawlerVM {
	c := &isov1.CrawlerVM{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "tower-a", UID: types.UID("uid-1"), Generation: 3},
		Spec: isov1.CrawlerVMSpec{
			RPS:         400,
			ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}, Objective: "99.999"},
			Guest:       isov1.Guest{Image: "crawler:1", Memory: resource.MustParse("1Gi")},
			Probe:       &isov1.Probe{Duration: &metav1.Duration{Duration: 20 * time.Minute}},
		},
		Status: isov1.CrawlerVMStatus{Placement: &isov1.PlacementStatus{Node: "rt-1"}},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func withRTNIC(c *isov1.CrawlerVM) {
	c.Spec.RTNIC = &isov1.RTNIC{NetworkName: "rt-net", Deadline: metav1.Duration{Duration: 5 * time.Millisecond}, MinBandwidth: resource.MustParse("100M")}
}

func withSchedule(s string) func(*isov1.CrawlerVM) {
	return func(c *isov1.CrawlerVM) { c.Spec.Probe.Schedule = s }
}

// nameKey is the test manager's key for probe Job names.
var nameKey = []byte("the manager's name key")

// A run's Job name is the same each time it is computed, so a run is never created
// twice; every run, and every placement of a VMI, gets its own; and no one without the
// manager's key can compute it.
func TestJobName(t *testing.T) {
	c := crawler()
	start := Run{Trigger: isov1.TriggerStart, Generation: 3, VMIUID: "vmi-1", Node: "n1"}
	if JobName(nameKey, c, start) != JobName(nameKey, crawler(), start) {
		t.Error("JobName is not deterministic")
	}
	// A crawler moved twice (refuted, then refuted again): the Moved probe on its third
	// node is a run of its own, whatever else is the same.
	moved := func(node, migration string) Run {
		return Run{Trigger: isov1.TriggerMoved, Generation: 3, VMIUID: "vmi-1", Node: node, Migration: migration}
	}
	runs := map[string]Run{
		"start":                           start,
		"spec change":                     {Trigger: isov1.TriggerSpecChange, Generation: 4, VMIUID: "vmi-1", Node: "n1"},
		"another VMI":                     {Trigger: isov1.TriggerStart, Generation: 3, VMIUID: "vmi-2", Node: "n1"},
		"a slot":                          {Trigger: isov1.TriggerSchedule, Generation: 3, VMIUID: "vmi-1", Node: "n1", Slot: t0},
		"the next slot":                   {Trigger: isov1.TriggerSchedule, Generation: 3, VMIUID: "vmi-1", Node: "n1", Slot: t0.Add(time.Hour)},
		"moved to the second node":        moved("n2", "mig-1"),
		"moved to the third node":         moved("n3", "mig-2"),
		"moved back to the first node":    moved("n1", "mig-3"),
		"moved to the first node earlier": moved("n1", "mig-0"),
	}
	seen := map[string]string{}
	for what, r := range runs {
		n := JobName(nameKey, c, r)
		if prev, dup := seen[n]; dup {
			t.Errorf("runs %q and %q share the name %s", prev, what, n)
		}
		seen[n] = what
		if other := JobName([]byte("another key"), c, r); other == n {
			t.Errorf("run %q: another key gives the same name %s", what, n)
		}
	}
	long := crawler(func(c *isov1.CrawlerVM) { c.Name = strings.Repeat("a", 57) })
	if n := JobName(nameKey, long, start); len(n) > 59 || !strings.HasPrefix(n, strings.Repeat("a", 40)+"-probe-") {
		t.Errorf("JobName of a 57-character crawler = %q (%d characters), want the name cut to 40 and at most 59 in all", n, len(n))
	}
}

// The probe pods pull the probe image with the Secret the manager names, in the
// crawler's namespace, and with none when it names none.
func TestJobPullSecret(t *testing.T) {
	run := Run{Trigger: isov1.TriggerStart, Generation: 1, VMIUID: "vmi-1"}
	opts := Options{Image: "registry.example/isochron/rtprobe:v0.2.0", Grace: time.Minute, TTL: time.Hour}
	if got := Job(crawler(), run, Target{}, opts).Spec.Template.Spec.ImagePullSecrets; got != nil {
		t.Errorf("imagePullSecrets %v without a pull secret, want none", got)
	}
	opts.PullSecret = "registry-creds"
	got := Job(crawler(), run, Target{}, opts).Spec.Template.Spec.ImagePullSecrets
	if len(got) != 1 || got[0].Name != "registry-creds" {
		t.Errorf("imagePullSecrets %v, want registry-creds", got)
	}
}

func TestJobCPU(t *testing.T) {
	run := Run{Trigger: isov1.TriggerStart, Generation: 1, VMIUID: "vmi-1"}
	tests := map[string]struct {
		cpu  string // Options.CPU; "" leaves it zero
		want string
	}{
		"default: one exclusive CPU":       {want: "1"},
		"two CPUs":                         {cpu: "2", want: "2"},
		"a fraction for a small test node": {cpu: "200m", want: "200m"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			opts := Options{Image: "rtprobe", Grace: time.Minute, TTL: time.Hour}
			if tc.cpu != "" {
				opts.CPU = resource.MustParse(tc.cpu)
			}
			c := Job(crawler(), run, Target{}, opts).Spec.Template.Spec.Containers[0]
			req, lim := c.Resources.Requests[corev1.ResourceCPU], c.Resources.Limits[corev1.ResourceCPU]
			if req.Cmp(resource.MustParse(tc.want)) != 0 || lim.Cmp(req) != 0 {
				t.Errorf("CPU request %s limit %s, want both %s", req.String(), lim.String(), tc.want)
			}
		})
	}
}

func TestJob(t *testing.T) {
	opts := Options{Image: "isochron/rtprobe:v0.1.0", Grace: 5 * time.Minute, TTL: time.Hour, NameKey: nameKey}
	run := Run{Trigger: isov1.TriggerMoved, Generation: 3, VMIUID: "vmi-1", Node: "rt-2", Migration: "mig-1"}
	network := &NetworkRef{Namespace: "bms", Name: "rt-net"}
	tests := map[string]struct {
		cvm         *isov1.CrawlerVM
		target      Target
		wantArgs    []string // must appear
		notArgs     []string // must not appear
		networks    string
		extraDevice corev1.ResourceName
	}{
		"gateway only": {
			cvm: crawler(),
			wantArgs: []string{"slo", "--listen=:8080", "--period=1s", "--delay=10ms", "--objective=99.999", "--duration=20m0s", "--report=/dev/termination-log",
				"--crawl-rps=400", "--traffic=agent", "--key-env=ISOCHRON_PROBE_KEY"},
			notArgs: []string{"--rtt-target"},
		},
		"the guest's own crawler measured": {
			cvm: func() *isov1.CrawlerVM {
				c := crawler()
				c.Spec.Probe = &isov1.Probe{Traffic: isov1.ProbeTrafficCrawler}
				return c
			}(),
			wantArgs: []string{"--crawl-rps=400", "--traffic=crawler"},
		},
		"RT-NIC with a known address": {
			cvm:      crawler(withRTNIC),
			target:   Target{Network: network, IP: "10.10.0.7"},
			wantArgs: []string{"--rtt-target=10.10.0.7:7", "--rtt-rate=400", "--rtt-deadline=5ms"},
			networks: "bms/rt-net",
		},
		"RT-NIC over IPv6": {
			cvm:      crawler(withRTNIC),
			target:   Target{Network: network, IP: "fd00::7"},
			wantArgs: []string{"--rtt-target=[fd00::7]:7"},
			networks: "bms/rt-net",
		},
		"RT-NIC whose address is not known yet": {
			cvm:      crawler(withRTNIC),
			target:   Target{Network: network},
			notArgs:  []string{"--rtt-target"},
			networks: "bms/rt-net",
		},
		"SR-IOV RT-NIC asks for its device": {
			cvm:         crawler(withRTNIC),
			target:      Target{Network: &NetworkRef{Namespace: "bms", Name: "rt-vf", ResourceName: "intel.com/sriov_rt"}, IP: "10.10.0.7"},
			networks:    "bms/rt-vf",
			extraDevice: "intel.com/sriov_rt",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			job := Job(tc.cvm, run, tc.target, opts)
			if job.Name != JobName(nameKey, tc.cvm, run) || job.Namespace != "bms" {
				t.Errorf("job %s/%s", job.Namespace, job.Name)
			}
			if len(job.OwnerReferences) != 1 || job.OwnerReferences[0].UID != "uid-1" || !*job.OwnerReferences[0].Controller {
				t.Errorf("owner references %+v, want the crawler as controller", job.OwnerReferences)
			}
			s := job.Spec
			if *s.BackoffLimit != 0 || *s.Parallelism != 1 || *s.Completions != 1 {
				t.Errorf("backoffLimit %d parallelism %d completions %d, want 0, 1, 1", *s.BackoffLimit, *s.Parallelism, *s.Completions)
			}
			if *s.ActiveDeadlineSeconds != 25*60 || *s.TTLSecondsAfterFinished != 3600 {
				t.Errorf("activeDeadlineSeconds %d ttl %d, want 1500 (20m + 5m) and 3600", *s.ActiveDeadlineSeconds, *s.TTLSecondsAfterFinished)
			}
			r, err := RunOf(job)
			if err != nil || r != run {
				t.Errorf("RunOf(job) = %+v, %v; want %+v", r, err, run)
			}
			pod := s.Template.Spec
			if pod.RestartPolicy != corev1.RestartPolicyNever || len(pod.Containers) != 1 {
				t.Fatalf("restartPolicy %s, %d containers", pod.RestartPolicy, len(pod.Containers))
			}
			c := pod.Containers[0]
			// Guaranteed QoS with a whole CPU: requests = limits for CPU and memory.
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, lim := c.Resources.Requests[res], c.Resources.Limits[res]
				if req.IsZero() || req.Cmp(lim) != 0 {
					t.Errorf("%s request %s limit %s, want equal and set", res, req.String(), lim.String())
				}
			}
			if cpu := c.Resources.Requests[corev1.ResourceCPU]; cpu.MilliValue()%1000 != 0 {
				t.Errorf("CPU %s is not a whole CPU", cpu.String())
			}
			if tc.extraDevice != "" {
				if q := c.Resources.Limits[tc.extraDevice]; q.Value() != 1 {
					t.Errorf("device %s limit %s, want 1", tc.extraDevice, q.String())
				}
			}
			args := strings.Join(c.Args, " ")
			for _, a := range tc.wantArgs {
				if !strings.Contains(args, a) {
					t.Errorf("args %q lack %q", args, a)
				}
			}
			for _, a := range tc.notArgs {
				if strings.Contains(args, a) {
					t.Errorf("args %q contain %q", args, a)
				}
			}
			if got := s.Template.Annotations[nadv1.NetworkAttachmentAnnot]; got != tc.networks {
				t.Errorf("networks annotation %q, want %q", got, tc.networks)
			}
			if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError || c.Image != opts.Image {
				t.Errorf("termination message policy %s image %s", c.TerminationMessagePolicy, c.Image)
			}
			// The crawler's probe key, from its guest Secret, never in the Job itself.
			wantEnv := []corev1.EnvVar{{Name: ProbeKeyEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "tower-a-guest"}, Key: "probe-key"}}}}
			if diff := cmp.Diff(wantEnv, c.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
			if !Ours(job, tc.cvm, nameKey) || Ours(job, tc.cvm, []byte("another key")) {
				t.Errorf("Ours(job) with the manager's key %v, with another %v; want true, false", Ours(job, tc.cvm, nameKey), Ours(job, tc.cvm, []byte("another key")))
			}
			for k, v := range Selector(tc.cvm) {
				if s.Template.Labels[k] != v {
					t.Errorf("pod label %s=%q, want %q (the Service selects it)", k, s.Template.Labels[k], v)
				}
			}
			term := pod.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].Preference.MatchFields[0]
			if term.Operator != corev1.NodeSelectorOpNotIn || term.Values[0] != "rt-1" {
				t.Errorf("affinity %+v, want to prefer nodes other than rt-1", term)
			}
		})
	}
}

func TestGatewayURLs(t *testing.T) {
	for ip, want := range map[string][]string{
		"":           {"http://tower-a-probe.bms.svc:8080"},
		"None":       {"http://tower-a-probe.bms.svc:8080"},
		"10.96.0.17": {"http://tower-a-probe.bms.svc:8080", "http://10.96.0.17:8080"},
		"fd00::17":   {"http://tower-a-probe.bms.svc:8080", "http://[fd00::17]:8080"},
	} {
		if diff := cmp.Diff(want, GatewayURLs(crawler(), ip)); diff != "" {
			t.Errorf("GatewayURLs(%q) (-want +got):\n%s", ip, diff)
		}
	}
}

func TestService(t *testing.T) {
	svc := Service(crawler())
	if svc.Name != "tower-a-probe" || svc.Spec.Ports[0].Port != GatewayPort || svc.Spec.Selector[isov1.LabelCrawlerVM] != "tower-a" {
		t.Errorf("service %s port %d selector %v", svc.Name, svc.Spec.Ports[0].Port, svc.Spec.Selector)
	}
	// While a probe runs, only its Job's pods are endpoints: not a pod anyone else made
	// with the probe's labels.
	for name, tc := range map[string]struct {
		active *isov1.ActiveProbe
		want   map[string]string
	}{
		"no probe runs": {want: map[string]string{isov1.LabelCrawlerVM: "tower-a", isov1.LabelComponent: isov1.ComponentProbe}},
		"a probe runs": {active: &isov1.ActiveProbe{Job: "tower-a-probe-1", UID: "job-uid"},
			want: map[string]string{isov1.LabelCrawlerVM: "tower-a", isov1.LabelComponent: isov1.ComponentProbe, batchv1.ControllerUidLabel: "job-uid"}},
	} {
		t.Run(name, func(t *testing.T) {
			c := crawler(func(c *isov1.CrawlerVM) { c.Status.ActiveProbe = tc.active })
			if diff := cmp.Diff(tc.want, Service(c).Spec.Selector); diff != "" {
				t.Errorf("selector (-want +got):\n%s", diff)
			}
		})
	}
}

func last(gen int64, vmi string, start time.Time) *isov1.ProbeResult {
	return &isov1.ProbeResult{Job: "j", ObservedGeneration: gen, VMIUID: vmi, StartTime: metav1.Time{Time: start}, Verdict: isov1.VerdictConfirmed, Reason: isov1.ReasonSLOMet}
}

// failedAt is a last probe of generation 3 on vmi-1 that failed at completion, the n-th
// failure in a row.
func failedAt(completion time.Time, n int32) *isov1.ProbeResult {
	l := last(3, "vmi-1", completion.Add(-10*time.Minute))
	l.Verdict, l.Reason, l.CompletionTime, l.ConsecutiveFailures = isov1.VerdictFailed, isov1.ReasonProbeFailed, &metav1.Time{Time: completion}, n
	return l
}

func TestNext(t *testing.T) {
	now := t0.Add(90 * time.Minute) // 04:30
	tests := map[string]struct {
		cvm  *isov1.CrawlerVM
		st   State
		want Decision
		err  string
	}{
		"VMI not running: nothing": {
			cvm: crawler(), st: State{Now: now},
		},
		"first run after the VMI starts": {
			cvm: crawler(), st: State{Now: now, VMIUID: "vmi-1"},
			want: Decision{Start: &Run{Trigger: isov1.TriggerStart, Generation: 3, VMIUID: "vmi-1"}},
		},
		"spec changed, same VMI": {
			cvm: crawler(), st: State{Now: now, VMIUID: "vmi-1", Last: last(2, "vmi-1", t0)},
			want: Decision{Start: &Run{Trigger: isov1.TriggerSpecChange, Generation: 3, VMIUID: "vmi-1"}},
		},
		"VMI replaced": {
			cvm: crawler(), st: State{Now: now, VMIUID: "vmi-2", Last: last(3, "vmi-1", t0)},
			want: Decision{Start: &Run{Trigger: isov1.TriggerStart, Generation: 3, VMIUID: "vmi-2"}},
		},
		"measured, no schedule: nothing": {
			cvm: crawler(), st: State{Now: now, VMIUID: "vmi-1", Last: last(3, "vmi-1", t0)},
		},
		"measured, next slot ahead: look again then": {
			cvm:  crawler(withSchedule("0 6 * * *")),
			st:   State{Now: now, VMIUID: "vmi-1", Last: last(3, "vmi-1", t0)},
			want: Decision{After: 90 * time.Minute},
		},
		"slot passed: scheduled run for the first missed slot": {
			cvm:  crawler(withSchedule("@hourly")),
			st:   State{Now: now, VMIUID: "vmi-1", Last: last(3, "vmi-1", t0.Add(time.Second))},
			want: Decision{Start: &Run{Trigger: isov1.TriggerSchedule, Generation: 3, VMIUID: "vmi-1", Slot: t0.Add(time.Hour)}},
		},
		"failed, backoff not over: look again when it is": {
			cvm:  crawler(),
			st:   State{Now: now, VMIUID: "vmi-1", Last: failedAt(now.Add(-30*time.Second), 1)},
			want: Decision{After: 30 * time.Second},
		},
		"failed, backoff over: retry": {
			cvm:  crawler(),
			st:   State{Now: now, VMIUID: "vmi-1", Last: failedAt(now.Add(-time.Minute), 1)},
			want: Decision{Start: &Run{Trigger: isov1.TriggerRetry, Generation: 3, VMIUID: "vmi-1", Slot: now}},
		},
		"failed three times: four minutes": {
			cvm:  crawler(),
			st:   State{Now: now, VMIUID: "vmi-1", Last: failedAt(now.Add(-3*time.Minute), 3)},
			want: Decision{After: time.Minute},
		},
		"timed out: retried too": {
			cvm: crawler(),
			st: State{Now: now, VMIUID: "vmi-1", Last: func() *isov1.ProbeResult {
				l := failedAt(now.Add(-2*time.Minute), 1)
				l.Verdict, l.Reason = isov1.VerdictTimedOut, isov1.ReasonProbeTimedOut
				return l
			}()},
			want: Decision{Start: &Run{Trigger: isov1.TriggerRetry, Generation: 3, VMIUID: "vmi-1", Slot: now.Add(-time.Minute)}},
		},
		"failed, the schedule comes before the backoff ends": {
			cvm:  crawler(withSchedule("*/5 * * * *")),
			st:   State{Now: now, VMIUID: "vmi-1", Last: failedAt(now.Add(-10*time.Minute), 6)}, // backoff 32m; started 20m ago
			want: Decision{Start: &Run{Trigger: isov1.TriggerSchedule, Generation: 3, VMIUID: "vmi-1", Slot: now.Add(-15 * time.Minute)}},
		},
		"no traffic (a guest still booting): retried after its backoff": {
			cvm: crawler(),
			st: State{Now: now, VMIUID: "vmi-1", Last: func() *isov1.ProbeResult {
				l := failedAt(now.Add(-time.Minute), 1)
				l.Verdict, l.Reason = isov1.VerdictInconclusive, isov1.ReasonNoTraffic
				return l
			}()},
			want: Decision{Start: &Run{Trigger: isov1.TriggerRetry, Generation: 3, VMIUID: "vmi-1", Slot: now}},
		},
		"inconclusive: no retry before the schedule": {
			cvm: crawler(),
			st: State{Now: now, VMIUID: "vmi-1", Last: func() *isov1.ProbeResult {
				l := last(3, "vmi-1", t0)
				l.Verdict, l.Reason = isov1.VerdictInconclusive, isov1.ReasonInsufficientSamples
				return l
			}()},
		},
		"active probe of the current spec: wait, never a second": {
			cvm: crawler(withSchedule("@hourly")),
			st: State{Now: now, VMIUID: "vmi-1", Last: last(3, "vmi-1", t0),
				Active: &Active{Name: "a", Run: Run{Trigger: isov1.TriggerSchedule, Generation: 3, VMIUID: "vmi-1"}}},
		},
		"active probe of an old spec: cancel": {
			cvm:  crawler(),
			st:   State{Now: now, VMIUID: "vmi-1", Active: &Active{Name: "a", Run: Run{Generation: 2, VMIUID: "vmi-1"}}},
			want: Decision{Cancel: true},
		},
		"active probe of a VMI that stopped: cancel": {
			cvm:  crawler(),
			st:   State{Now: now, Active: &Active{Name: "a", Run: Run{Generation: 3, VMIUID: "vmi-1"}}},
			want: Decision{Cancel: true},
		},
		"cancelled probe still deleting: wait": {
			cvm: crawler(),
			st:  State{Now: now, VMIUID: "vmi-1", Active: &Active{Name: "a", Run: Run{Generation: 2, VMIUID: "vmi-1"}, Deleting: true}},
		},
		"live-migrated: the same VMI is measured again on its new node": {
			cvm: crawler(), st: State{Now: now, VMIUID: "vmi-1", Node: "b", Last: onNode(last(3, "vmi-1", t0), "a")},
			want: Decision{Start: &Run{Trigger: isov1.TriggerMoved, Generation: 3, VMIUID: "vmi-1", Node: "b"}},
		},
		"measured on its node: nothing": {
			cvm: crawler(), st: State{Now: now, VMIUID: "vmi-1", Node: "a", Last: onNode(last(3, "vmi-1", t0), "a")},
		},
		"a probe of a release that did not record the node measured where it runs": {
			cvm: crawler(), st: State{Now: now, VMIUID: "vmi-1", Node: "a", Last: last(3, "vmi-1", t0)},
		},
		"active probe across a migration: cancel": {
			cvm:  crawler(),
			st:   State{Now: now, VMIUID: "vmi-1", Node: "b", Active: &Active{Name: "a", Run: Run{Generation: 3, VMIUID: "vmi-1", Node: "a"}}},
			want: Decision{Cancel: true},
		},
		"requested after the last probe started: a requested run": {
			cvm:  crawler(),
			st:   State{Now: now, VMIUID: "vmi-1", Last: last(3, "vmi-1", t0), Requested: now.Add(-time.Minute)},
			want: Decision{Start: &Run{Trigger: isov1.TriggerRequested, Generation: 3, VMIUID: "vmi-1", Slot: now.Add(-time.Minute)}},
		},
		"requested before the last probe started: nothing": {
			cvm: crawler(),
			st:  State{Now: now, VMIUID: "vmi-1", Last: last(3, "vmi-1", t0), Requested: t0.Add(-time.Second)},
		},
		"requested in the second the last probe started: that probe's": {
			cvm: crawler(),
			st:  State{Now: now, VMIUID: "vmi-1", Last: last(3, "vmi-1", t0), Requested: t0},
		},
		"requested ahead of the manager's clock: look again then": {
			cvm:  crawler(),
			st:   State{Now: now, VMIUID: "vmi-1", Last: last(3, "vmi-1", t0), Requested: now.Add(30 * time.Second)},
			want: Decision{After: 30 * time.Second},
		},
		"requested while a probe runs: wait for it": {
			cvm: crawler(),
			st: State{Now: now, VMIUID: "vmi-1", Last: last(3, "vmi-1", t0), Requested: now.Add(-time.Minute),
				Active: &Active{Name: "a", Run: Run{Trigger: isov1.TriggerSchedule, Generation: 3, VMIUID: "vmi-1"}}},
		},
		"requested before the VMI runs: nothing yet": {
			cvm: crawler(), st: State{Now: now, Requested: now.Add(-time.Minute)},
		},
		"requested on a VMI never measured: its first run serves it": {
			cvm: crawler(), st: State{Now: now, VMIUID: "vmi-1", Requested: now.Add(-time.Minute)},
			want: Decision{Start: &Run{Trigger: isov1.TriggerStart, Generation: 3, VMIUID: "vmi-1"}},
		},
		"requested after a missed slot: the slot's run serves it": {
			cvm:  crawler(withSchedule("@hourly")),
			st:   State{Now: now, VMIUID: "vmi-1", Last: last(3, "vmi-1", t0.Add(time.Second)), Requested: now.Add(-time.Minute)},
			want: Decision{Start: &Run{Trigger: isov1.TriggerSchedule, Generation: 3, VMIUID: "vmi-1", Slot: t0.Add(time.Hour)}},
		},
		"requested before a failed probe's backoff ends: requested now": {
			cvm:  crawler(),
			st:   State{Now: now, VMIUID: "vmi-1", Last: failedAt(now.Add(-30*time.Second), 1), Requested: now.Add(-time.Second)},
			want: Decision{Start: &Run{Trigger: isov1.TriggerRequested, Generation: 3, VMIUID: "vmi-1", Slot: now.Add(-time.Second)}},
		},
		"invalid schedule": {
			cvm: crawler(withSchedule("61 * * * *")), st: State{Now: now, VMIUID: "vmi-1"},
			err: `spec.probe.schedule "61 * * * *" is not a valid cron schedule`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Next(tc.cvm, tc.st)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got.Start == nil) != (tc.want.Start == nil) || (got.Start != nil && *got.Start != *tc.want.Start) ||
				got.Cancel != tc.want.Cancel || got.After != tc.want.After {
				t.Errorf("Next = %+v (start %+v), want %+v (start %+v)", got, got.Start, tc.want, tc.want.Start)
			}
		})
	}
}

func TestRequested(t *testing.T) {
	tests := map[string]struct {
		annotations map[string]string
		want        time.Time
	}{
		"not asked":        {},
		"asked":            {annotations: map[string]string{isov1.AnnotationProbeRequested: "2026-11-22T03:00:05Z"}, want: t0.Add(5 * time.Second)},
		"to the second":    {annotations: map[string]string{isov1.AnnotationProbeRequested: "2026-11-22T03:00:05.9Z"}, want: t0.Add(5 * time.Second)},
		"another zone":     {annotations: map[string]string{isov1.AnnotationProbeRequested: "2026-11-22T04:00:05+01:00"}, want: t0.Add(5 * time.Second)},
		"not a time":       {annotations: map[string]string{isov1.AnnotationProbeRequested: "now"}},
		"an empty request": {annotations: map[string]string{isov1.AnnotationProbeRequested: ""}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := crawler(func(c *isov1.CrawlerVM) { c.Annotations = tc.annotations })
			if got := Requested(c); !got.Equal(tc.want) {
				t.Errorf("Requested = %v, want %v", got, tc.want)
			}
		})
	}
}

func f(v float64) *float64 { return &v }

// rep is a report over n intervals with the given interval error at the objective
// and, if sent > 0, round trips with the given misses.
func rep(n int64, atUs float64, sent, late, lost int64) report.Report {
	r := report.Report{Version: report.Version, Start: t0, End: t0.Add(20 * time.Minute), Objective: 99.999}
	if n > 0 {
		r.Interval = &gateway.Result{
			Summary:     stats.Summary{Metric: gateway.Metric, Unit: "us", Count: n, P50: 100, P99: 900, P99999: atUs, Max: atUs + 1},
			Requests:    n + 400,
			Counts:      interval.Counts{Intervals: n},
			AtObjective: f(atUs),
		}
	}
	if sent > 0 {
		s := stats.Summary{Metric: rtt.Metric, Unit: "us", Count: sent - lost, P99: 800, Max: 7000}
		r.RTT = &rtt.Result{Summary: s.WithDeadline(5000, late+lost), Sent: sent, Late: late, Lost: lost, AtObjective: f(4000)}
	}
	return r
}

func TestRetryBackoff(t *testing.T) {
	for n, want := range map[int32]time.Duration{
		1: time.Minute, 2: 2 * time.Minute, 3: 4 * time.Minute, 6: 32 * time.Minute,
		7: time.Hour, 8: time.Hour, 100: time.Hour,
	} {
		if got := RetryBackoff(n); got != want {
			t.Errorf("RetryBackoff(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestJudge(t *testing.T) {
	tests := map[string]struct {
		cvm     *isov1.CrawlerVM
		rep     report.Report
		verdict isov1.ProbeVerdict
		reason  string
		message []string
	}{
		"met": {
			cvm: crawler(), rep: rep(480_000, 2100, 0, 0, 0),
			verdict: isov1.VerdictConfirmed, reason: isov1.ReasonSLOMet,
			message: []string{"p99.999 interval error 2.1ms within the 10ms tolerance (480000 intervals)"},
		},
		"exactly at the tolerance is met": {
			cvm: crawler(), rep: rep(480_000, 10_000, 0, 0, 0),
			verdict: isov1.VerdictConfirmed, reason: isov1.ReasonSLOMet,
		},
		"over the tolerance": {
			cvm: crawler(), rep: rep(480_000, 14_200, 0, 0, 0),
			verdict: isov1.VerdictRefuted, reason: isov1.ReasonSLORefuted,
			message: []string{"p99.999 interval error 14.2ms exceeds the 10ms tolerance"},
		},
		"over the tolerance with few samples is still refuted": {
			cvm: crawler(), rep: rep(4_000, 14_200, 0, 0, 0),
			verdict: isov1.VerdictRefuted, reason: isov1.ReasonSLORefuted,
		},
		"too few intervals for p99.999": {
			cvm: crawler(), rep: rep(4_000, 2_000, 0, 0, 0),
			verdict: isov1.VerdictInconclusive, reason: isov1.ReasonInsufficientSamples,
			// 4000 in 20m; 100000 need 500m.
			message: []string{"4000 intervals measured, p99.999 needs at least 100000: make spec.probe.duration at least 8h21m0s"},
		},
		"lower objective needs fewer samples": {
			cvm: crawler(func(c *isov1.CrawlerVM) { c.Spec.ErrorBudget.Objective = "99.9" }), rep: rep(4_000, 2_000, 0, 0, 0),
			verdict: isov1.VerdictConfirmed, reason: isov1.ReasonSLOMet,
		},
		"no traffic": {
			cvm: crawler(), rep: rep(0, 0, 0, 0, 0),
			verdict: isov1.VerdictInconclusive, reason: isov1.ReasonNoTraffic,
			message: []string{"isochron's agent in the guest did not send", "systemctl status isochron-agent"},
		},
		"no traffic from the guest's own crawler": {
			cvm: func() *isov1.CrawlerVM {
				c := crawler()
				c.Spec.Probe = &isov1.Probe{Traffic: isov1.ProbeTrafficCrawler}
				return c
			}(),
			rep:     rep(0, 0, 0, 0, 0),
			verdict: isov1.VerdictInconclusive, reason: isov1.ReasonNoTraffic,
			message: []string{"the guest's crawler sent no copy of its requests while /run/isochron/probe-window.json announced the window"},
		},
		"RT-NIC within its deadline": {
			cvm: crawler(withRTNIC), rep: rep(480_000, 2100, 480_000, 3, 1),
			verdict: isov1.VerdictConfirmed, reason: isov1.ReasonSLOMet,
			message: []string{"4 of 480000 RT-NIC round trips missed the 5ms deadline (p99.999 allows 4)"},
		},
		"RT-NIC misses one too many": {
			cvm: crawler(withRTNIC), rep: rep(480_000, 2100, 480_000, 4, 1),
			verdict: isov1.VerdictRefuted, reason: isov1.ReasonDeadlineMissed,
			message: []string{"5 of 480000 RT-NIC round trips missed the 5ms deadline (1 lost); p99.999 allows 4", "within the 10ms tolerance"},
		},
		"RT-NIC not measured": {
			cvm: crawler(withRTNIC), rep: rep(480_000, 2100, 0, 0, 0),
			verdict: isov1.VerdictInconclusive, reason: isov1.ReasonRTNICNotMeasured,
		},
		"refuted wins over inconclusive": {
			cvm: crawler(withRTNIC), rep: rep(480_000, 20_000, 0, 0, 0),
			verdict: isov1.VerdictRefuted, reason: isov1.ReasonSLORefuted,
			message: []string{"exceeds the 10ms tolerance", "RT-NIC round trips not measured"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			verdict, reason, msg, ie, rt := Judge(tc.cvm, tc.rep)
			if verdict != tc.verdict || reason != tc.reason {
				t.Errorf("Judge = %s/%s (%s), want %s/%s", verdict, reason, msg, tc.verdict, tc.reason)
			}
			for _, m := range tc.message {
				if !strings.Contains(msg, m) {
					t.Errorf("message %q lacks %q", msg, m)
				}
			}
			if tc.rep.Interval != nil && (ie == nil || ie.Intervals != tc.rep.Interval.Count || ie.AtObjective.Duration != time.Duration(*tc.rep.Interval.AtObjective)*time.Microsecond) {
				t.Errorf("interval figures %+v do not carry the report's", ie)
			}
			if tc.rep.RTT != nil && tc.cvm.Spec.RTNIC != nil && (rt == nil || rt.Misses != tc.rep.RTT.Late+tc.rep.RTT.Lost || rt.Deadline.Duration != 5*time.Millisecond) {
				t.Errorf("round-trip figures %+v do not carry the report's", rt)
			}
		})
	}
}

func TestMinSamples(t *testing.T) {
	for obj, want := range map[float64]int64{99.999: 100_000, 99.9: 1_000, 99: 100, 90: 10, 99.95: 2_000} {
		if got := MinSamples(obj); got != want {
			t.Errorf("MinSamples(%g) = %d, want %d", obj, got, want)
		}
	}
}

func job(conds ...batchv1.JobCondition) *batchv1.Job {
	opts := DefaultOptions("img")
	opts.NameKey = nameKey
	j := Job(crawler(), Run{Trigger: isov1.TriggerStart, Generation: 3, VMIUID: "vmi-1"}, Target{}, opts)
	j.CreationTimestamp = metav1.Time{Time: t0}
	j.Status.Conditions = conds
	return j
}

func TestOutcome(t *testing.T) {
	good, _ := rep(480_000, 2100, 0, 0, 0).Marshal()
	empty, _ := rep(0, 0, 0, 0, 0).Marshal()
	withErr := rep(0, 0, 0, 0, 0)
	withErr.Error = "listening on --listen :8080: address already in use"
	bad, _ := withErr.Marshal()
	// Requests without the crawler's credential beside a good measure, and alone.
	withForeign := rep(480_000, 2100, 0, 0, 0)
	withForeign.Interval.Foreign = 1_000_000
	goodAndForeign, _ := withForeign.Marshal()
	onlyForeign := rep(0, 0, 0, 0, 0)
	onlyForeign.Interval = &gateway.Result{Foreign: 2}
	foreignAlone, _ := onlyForeign.Marshal()
	complete := batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}
	failed := func(reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, Message: "Job has reached the specified backoff limit"}
	}
	tests := map[string]struct {
		job         *batchv1.Job
		termination string
		ignored     []string
		verdict     isov1.ProbeVerdict
		reason      string
		message     string
		foreign     int64
	}{
		"foreign requests change no verdict, and are told": {
			job: job(complete), termination: string(goodAndForeign),
			verdict: isov1.VerdictConfirmed, reason: isov1.ReasonSLOMet, foreign: 1_000_000,
			message: "within the 10ms tolerance (480000 intervals); 1000000 requests without the crawler's probe credential reached the gateway and were not counted",
		},
		"foreign requests alone are no traffic": {
			job: job(complete), termination: string(foreignAlone),
			verdict: isov1.VerdictInconclusive, reason: isov1.ReasonNoTraffic, foreign: 2,
			message: "no intervals with the crawler's probe credential in 20m0s, and 2 requests without it, which it did not count: a guest started by a release of isochron before probe credentials has no key (stop and start it",
		},
		"only pods not believed": {
			job: job(complete), ignored: []string{"pod forged is not controlled by probe Job x"},
			verdict: isov1.VerdictFailed, reason: isov1.ReasonProbeFailed, message: "without a readable report: empty termination message (not believed: pod forged is not controlled by probe Job x)",
		},
		"complete with a report is judged": {
			job: job(complete), termination: string(good),
			verdict: isov1.VerdictConfirmed, reason: isov1.ReasonSLOMet, message: "within the 10ms tolerance",
		},
		"complete with no traffic: inconclusive, and counted for the retry": {
			job: job(complete), termination: string(empty),
			verdict: isov1.VerdictInconclusive, reason: isov1.ReasonNoTraffic, message: "received no intervals",
		},
		"complete without a report": {
			job: job(complete), termination: "",
			verdict: isov1.VerdictFailed, reason: isov1.ReasonProbeFailed, message: "without a readable report",
		},
		"timed out, even with a report": {
			job: job(failed(batchv1.JobReasonDeadlineExceeded)), termination: string(good),
			verdict: isov1.VerdictTimedOut, reason: isov1.ReasonProbeTimedOut, message: "ran past its active deadline of 1500s",
		},
		"failed with the probe's own error": {
			job: job(failed(batchv1.JobReasonBackoffLimitExceeded)), termination: string(bad),
			verdict: isov1.VerdictFailed, reason: isov1.ReasonProbeFailed, message: "failed: listening on --listen :8080: address already in use",
		},
		"failed with a log tail": {
			job: job(failed(batchv1.JobReasonBackoffLimitExceeded)), termination: "starting\nexec format error\n",
			verdict: isov1.VerdictFailed, reason: isov1.ReasonProbeFailed, message: "failed: exec format error;",
		},
		"failed without a message": {
			job:     job(failed(batchv1.JobReasonBackoffLimitExceeded)),
			verdict: isov1.VerdictFailed, reason: isov1.ReasonProbeFailed, message: "failed: BackoffLimitExceeded: Job has reached the specified backoff limit",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res := Outcome(crawler(), tc.job, tc.termination, tc.ignored, t0.Add(time.Hour))
			if res.ForeignRequests != tc.foreign {
				t.Errorf("foreignRequests = %d, want %d", res.ForeignRequests, tc.foreign)
			}
			failed := tc.verdict == isov1.VerdictFailed || tc.verdict == isov1.VerdictTimedOut || tc.reason == isov1.ReasonNoTraffic
			if (res.ConsecutiveFailures == 1) != failed {
				t.Errorf("consecutiveFailures = %d for a %s probe", res.ConsecutiveFailures, tc.verdict)
			}
			if res.Verdict != tc.verdict || res.Reason != tc.reason || !strings.Contains(res.Message, tc.message) {
				t.Errorf("Outcome = %s/%s %q, want %s/%s containing %q", res.Verdict, res.Reason, res.Message, tc.verdict, tc.reason, tc.message)
			}
			if res.Job != tc.job.Name || res.ObservedGeneration != 3 || res.VMIUID != "vmi-1" || res.Trigger != isov1.TriggerStart || !res.StartTime.Equal(&metav1.Time{Time: t0}) {
				t.Errorf("Outcome identity %+v", res)
			}
		})
	}
}

// Failures in a row of one spec and VMI are counted; a judged probe, or a failure of
// another spec or VMI, starts the count again.
func TestOutcomeCountsFailuresInARow(t *testing.T) {
	failedJob := job(batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded})
	good, _ := rep(480_000, 2100, 0, 0, 0).Marshal()
	completeJob := job(batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue})
	cases := map[string]struct {
		prev *isov1.ProbeResult
		job  *batchv1.Job
		want int32
	}{
		"after a failure of the same spec and VMI": {prev: failedAt(t0, 2), job: failedJob, want: 3},
		"after a judged probe":                     {prev: last(3, "vmi-1", t0), job: failedJob, want: 1},
		"after a failure of an older spec":         {prev: func() *isov1.ProbeResult { l := failedAt(t0, 4); l.ObservedGeneration = 2; return l }(), job: failedJob, want: 1},
		"a judged probe ends the count":            {prev: failedAt(t0, 4), job: completeJob, want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := crawler()
			c.Status.LastProbe = tc.prev
			if got := Outcome(c, tc.job, string(good), nil, t0.Add(time.Hour)).ConsecutiveFailures; got != tc.want {
				t.Errorf("consecutiveFailures = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestTerminationMessageTakesTheNewest(t *testing.T) {
	pod := func(msg string, at time.Time) corev1.Pod {
		return corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name: "rtprobe", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: msg, FinishedAt: metav1.Time{Time: at}}},
		}}}}
	}
	running := corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "rtprobe"}}}}
	got := TerminationMessage([]corev1.Pod{pod("old", t0), running, pod("new", t0.Add(time.Minute))})
	if got != "new" {
		t.Errorf("TerminationMessage = %q, want new", got)
	}
	if TerminationMessage([]corev1.Pod{running}) != "" {
		t.Error("a running pod has no termination message")
	}
}

// onNode is last, measured on node.
func onNode(last *isov1.ProbeResult, node string) *isov1.ProbeResult {
	l := *last
	l.Node = node
	return &l
}

func TestCondition(t *testing.T) {
	refuted := last(3, "vmi-1", t0)
	refuted.Verdict, refuted.Reason, refuted.Message = isov1.VerdictRefuted, isov1.ReasonSLORefuted, "p99.999 interval error 14ms exceeds"
	tests := map[string]struct {
		st     State
		status metav1.ConditionStatus
		reason string
	}{
		"confirmed":                             {State{VMIUID: "vmi-1", Last: last(3, "vmi-1", t0)}, metav1.ConditionTrue, isov1.ReasonSLOMet},
		"refuted":                               {State{VMIUID: "vmi-1", Last: refuted}, metav1.ConditionFalse, isov1.ReasonSLORefuted},
		"a scheduled re-probe keeps the result": {State{VMIUID: "vmi-1", Last: last(3, "vmi-1", t0), Active: &Active{Name: "a", Run: Run{Generation: 3, VMIUID: "vmi-1"}}}, metav1.ConditionTrue, isov1.ReasonSLOMet},
		"old spec's result, probe running":      {State{VMIUID: "vmi-1", Last: last(2, "vmi-1", t0), Active: &Active{Name: "a", Run: Run{Generation: 3, VMIUID: "vmi-1"}}}, metav1.ConditionUnknown, isov1.ReasonProbeRunning},
		"VMI not running":                       {State{Last: last(3, "vmi-1", t0)}, metav1.ConditionUnknown, isov1.ReasonProbePending},
		"not probed yet":                        {State{VMIUID: "vmi-1"}, metav1.ConditionUnknown, isov1.ReasonProbePending},
		"failed, retried later":                 {State{VMIUID: "vmi-1", Last: failedAt(t0, 2)}, metav1.ConditionFalse, isov1.ReasonProbeFailed},
		// A refutation stays visible until a probe judges the crawler where it runs now.
		"refuted, then moved":                   {State{VMIUID: "vmi-1", Node: "b", Last: onNode(refuted, "a")}, metav1.ConditionFalse, isov1.ReasonSLORefuted},
		"refuted, moving":                       {State{Last: onNode(refuted, "a")}, metav1.ConditionFalse, isov1.ReasonSLORefuted},
		"refuted, restarted":                    {State{VMIUID: "vmi-2", Last: refuted}, metav1.ConditionFalse, isov1.ReasonSLORefuted},
		"refuted before the spec changed":       {State{VMIUID: "vmi-1", Last: func() *isov1.ProbeResult { r := *refuted; r.ObservedGeneration = 2; return &r }()}, metav1.ConditionUnknown, isov1.ReasonProbePending},
		"refuted, then moved, probed there now": {State{VMIUID: "vmi-1", Node: "b", Last: onNode(refuted, "a"), Active: &Active{Name: "p2", Run: Run{Generation: 3, VMIUID: "vmi-1", Node: "b"}}}, metav1.ConditionFalse, isov1.ReasonSLORefuted},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			status, reason, _ := Condition(crawler(), tc.st)
			if status != tc.status || reason != tc.reason {
				t.Errorf("Condition = %s/%s, want %s/%s", status, reason, tc.status, tc.reason)
			}
		})
	}
	if _, _, msg := Condition(crawler(), State{VMIUID: "vmi-1", Node: "b", Last: onNode(refuted, "a"), Active: &Active{Name: "p2", Run: Run{Generation: 3, VMIUID: "vmi-1", Node: "b"}}}); !strings.Contains(msg, "refuted the SLO on node a") || !strings.Contains(msg, "probe Job p2 measures it now") {
		t.Errorf("the refutation after a move does not say where and what comes next: %q", msg)
	}
	if _, _, msg := Condition(crawler(), State{VMIUID: "vmi-1", Last: failedAt(t0, 2)}); !strings.Contains(msg, "tried again at "+t0.Add(2*time.Minute).UTC().Format(time.RFC3339)+" (failure 2 in a row, backoff 2m0s)") {
		t.Errorf("the condition of a failed probe does not say when it is retried: %q", msg)
	}
}

// The probe image the operator runs by default is the release's, the one config/manager
// passes; config/manager and config/nic-agent tag their images with the same release and
// label the Deployment and the DaemonSet with it: the Makefile's RELEASE_VERSION is the
// one pin; these places, which cannot read it, are held to it here.
func TestDefaultImageMatchesTheRelease(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RELEASE_VERSION \?= (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no RELEASE_VERSION ?= in the Makefile")
	}
	release := string(m[1])
	if want := "isochron/rtprobe:" + release; DefaultImage != want {
		t.Errorf("DefaultImage = %q, want %q (Makefile RELEASE_VERSION)", DefaultImage, want)
	}
	for file, want := range map[string][]string{
		"config/manager/manager.yaml":         {"--probe-image=" + DefaultImage, "app.kubernetes.io/version: " + release + "\n"},
		"config/manager/kustomization.yaml":   {"newTag: " + release + "\n"},
		"config/nic-agent/daemonset.yaml":     {"app.kubernetes.io/version: " + release + "\n"},
		"config/nic-agent/kustomization.yaml": {"newTag: " + release + "\n"},
	} {
		data, err := os.ReadFile("../../" + file)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(string(data), w) {
				t.Errorf("%s does not hold %q (Makefile RELEASE_VERSION)", file, strings.TrimSpace(w))
			}
		}
		for _, m := range versionField.FindAllStringSubmatch(string(data), -1) {
			if m[2] != release {
				t.Errorf("%s: %s %s, want %s (Makefile RELEASE_VERSION)", file, m[1], m[2], release)
			}
		}
	}
}

// versionField is a line of config/ that names a release: an image's tag or the version label.
var versionField = regexp.MustCompile(`(?m)^\s*(newTag:|app\.kubernetes\.io/version:) (\S+)$`)

// The probe is the Job whose UID isochron recorded, and no other: not one with the same
// labels and owner, not one with the same name.
func TestRecorded(t *testing.T) {
	withUID := func(name, uid string) batchv1.Job {
		j := job()
		j.Name, j.UID = name, types.UID(uid)
		return *j
	}
	jobs := []batchv1.Job{withUID("forged", "uid-forged"), withUID("tower-a-probe-1", "uid-real"), withUID("tower-a-probe-2", "uid-other")}
	for name, tc := range map[string]struct {
		active *isov1.ActiveProbe
		want   string
	}{
		"none recorded":                        {},
		"the recorded one":                     {active: &isov1.ActiveProbe{Job: "tower-a-probe-1", UID: "uid-real"}, want: "tower-a-probe-1"},
		"a Job of the name, another UID":       {active: &isov1.ActiveProbe{Job: "tower-a-probe-2", UID: "uid-gone"}},
		"the recorded one is not listed (yet)": {active: &isov1.ActiveProbe{Job: "tower-a-probe-9", UID: "uid-9"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := ""
			if j := Recorded(jobs, tc.active); j != nil {
				got = j.Name
			}
			if got != tc.want {
				t.Errorf("Recorded = %q, want %q", got, tc.want)
			}
		})
	}
}

// Finished probe Jobs isochron made are kept KeepFinished deep, the newest; a Job it did
// not make (its name does not verify), the recorded one, one running and one being
// deleted are never pruned.
func TestPrune(t *testing.T) {
	complete := batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}
	opts := DefaultOptions("img")
	opts.NameKey = nameKey
	c := crawler()
	ours := func(minute int, conds ...batchv1.JobCondition) batchv1.Job {
		run := Run{Trigger: isov1.TriggerSchedule, Generation: 3, VMIUID: "vmi-1", Node: "rt-1", Slot: t0.Add(time.Duration(minute) * time.Minute)}
		j := Job(c, run, Target{}, opts)
		j.UID = types.UID(fmt.Sprintf("uid-%d", minute))
		j.CreationTimestamp = metav1.Time{Time: run.Slot}
		j.Status.Conditions = conds
		return *j
	}
	forged := ours(-10, complete)
	forged.Name = "tower-a-probe-000000000000" // labels, owner and annotations copied: not the name
	deleting := ours(-20, complete)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	jobs := []batchv1.Job{ours(50, complete), ours(10, complete), forged, ours(40, complete), ours(30), deleting, ours(20, complete), ours(0, complete), ours(60, complete)}
	got := names(Prune(jobs, c, nameKey, &isov1.ActiveProbe{Job: jobs[8].Name, UID: "uid-60"}))
	// Finished and ours: 0, 10, 20, 40, 50 (60 is recorded): the three newest stay.
	want := []string{ours(0).Name, ours(10).Name}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pruned (-want +got):\n%s", diff)
	}
	if got := Prune(jobs[:4], c, nameKey, nil); len(got) != 0 {
		t.Errorf("pruned %v of three finished Jobs of isochron's, want none", names(got))
	}
	// Someone else's copy is never ours, whatever it carries.
	if Ours(&forged, c, nameKey) {
		t.Errorf("Ours(%s) = true for a Job whose name does not verify", forged.Name)
	}
}

// Only a pod the recorded Job controls, running its template, is believed: a pod with
// the Job's labels, or one that names the Job as controller but runs another program,
// is not.
func TestProbePods(t *testing.T) {
	j := job()
	j.UID = "job-uid"
	made := func(name string) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: j.Spec.Template.Labels, OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(j, batchv1.SchemeGroupVersion.WithKind("Job"))}},
			Spec:       *j.Spec.Template.Spec.DeepCopy(),
		}
	}
	theJobs := made("real")
	theJobs.Spec.NodeName = "rt-2" // what the scheduler and admission add does not matter
	theJobs.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists}}
	labelled := made("labelled")
	labelled.OwnerReferences = nil
	otherJob := made("other-job")
	otherJob.OwnerReferences[0].UID = "another-uid"
	otherImage := made("other-image")
	otherImage.Spec.Containers[0].Image = "tenant/liar"
	otherArgs := made("other-args")
	otherArgs.Spec.Containers[0].Args = []string{"slo", "--report=/dev/null"}
	sidecar := made("sidecar")
	sidecar.Spec.Containers = append(sidecar.Spec.Containers, corev1.Container{Name: "writer", Image: "busybox"})
	shared := made("shared")
	shared.Spec.ShareProcessNamespace = ptrTo(true)
	debug := made("debug")
	debug.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
	volume := made("volume")
	volume.Spec.Volumes = []corev1.Volume{{Name: "log", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}

	trusted, ignored := ProbePods([]corev1.Pod{labelled, otherJob, theJobs, otherImage, otherArgs, sidecar, shared, debug, volume}, j)
	var got []string
	for _, p := range trusted {
		got = append(got, p.Name)
	}
	if diff := cmp.Diff([]string{"real"}, got); diff != "" {
		t.Errorf("believed pods (-want +got):\n%s", diff)
	}
	if len(ignored) != 8 || !strings.Contains(ignored[0], "pod labelled is not controlled by probe Job") || !strings.Contains(ignored[3], "pod other-args does not run the probe Job's template") {
		t.Errorf("ignored: %q", ignored)
	}
}

func ptrTo[T any](v T) *T { return &v }

// A cancelled probe holds the next one back for CancelWait, no longer.
func TestCancelWaitOver(t *testing.T) {
	cancelled := &isov1.ActiveProbe{Job: "j", UID: "u", CancelTime: &metav1.Time{Time: t0}}
	for name, tc := range map[string]struct {
		a        *isov1.ActiveProbe
		now      time.Time
		over     bool
		wantWait time.Duration
	}{
		"none recorded":            {now: t0},
		"running, not cancelled":   {a: &isov1.ActiveProbe{Job: "j", UID: "u"}, now: t0},
		"just cancelled":           {a: cancelled, now: t0, wantWait: CancelWait},
		"a minute later":           {a: cancelled, now: t0.Add(time.Minute), wantWait: CancelWait - time.Minute},
		"at the end of the wait":   {a: cancelled, now: t0.Add(CancelWait), over: true},
		"long after, node is gone": {a: cancelled, now: t0.Add(time.Hour), over: true},
	} {
		t.Run(name, func(t *testing.T) {
			over, wait := CancelWaitOver(tc.a, tc.now)
			if over != tc.over || wait != tc.wantWait {
				t.Errorf("CancelWaitOver = %v, %s; want %v, %s", over, wait, tc.over, tc.wantWait)
			}
		})
	}
}

func names(jobs []*batchv1.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.Name)
	}
	return out
}

// Requests without the crawler's token do not move the verdict, on a gateway whose clock
// the test steps: the agent requests each of 100 points once a second, on time, for a
// minute, with the token; another pod requests every point twice a second, 0.4 s apart,
// without it. Judged on what the keyed gateway reports, the crawler is confirmed, and the
// other pod's requests are told as foreign; a gateway that counted them would have
// refuted it (the same traffic on a gateway without a key, below).
func TestForeignRequestsDoNotMoveTheVerdict(t *testing.T) {
	key := credential.Key([]byte("master"), "uid-1")
	judge := func(keyed bool) (isov1.ProbeVerdict, report.Report) {
		now := t0
		cfg := gateway.Config{Period: time.Second, Objective: 99.9, Tolerance: 10 * time.Millisecond, MaxPoints: gateway.MaxPoints(100, time.Second),
			Window: &gateway.Window{Traffic: gateway.TrafficAgent, RPS: 100, PeriodSeconds: 1, Until: t0.Add(time.Hour)}, Now: func() time.Time { return now }}
		if keyed {
			cfg.Key = key
		}
		g, err := gateway.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		h := g.Handler()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/window", nil))
		var win gateway.Window
		if err := json.NewDecoder(rec.Body).Decode(&win); err != nil {
			t.Fatal(err)
		}
		token := credential.Token(key, win.Nonce)
		send := func(at time.Duration, point int, withToken bool) {
			now = t0.Add(at)
			r := httptest.NewRequest(http.MethodGet, fmt.Sprintf("/?point=%d", point), nil)
			if withToken {
				r.Header.Set(credential.Header, token)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
		for s := range 60 {
			for p := range 100 {
				at := time.Duration(s)*time.Second + time.Duration(p)*time.Second/100
				send(at, p, true)                       // the agent, on time
				send(at+100*time.Millisecond, p, false) // another pod
				send(at+500*time.Millisecond, p, false) // and again, 0.4 s later
			}
		}
		res, err := g.Result()
		if err != nil {
			t.Fatal(err)
		}
		rep := report.Report{Version: report.Version, Start: t0, End: t0.Add(time.Minute), Objective: 99.9, Interval: &res}
		c := crawler(func(c *isov1.CrawlerVM) { c.Spec.ErrorBudget.Objective = "99.9" })
		verdict, _, _, _, _ := Judge(c, rep)
		return verdict, rep
	}
	verdict, rep := judge(true)
	if verdict != isov1.VerdictConfirmed || rep.Interval.Foreign != 2*100*60 || rep.Interval.Count != 100*59 {
		t.Errorf("keyed gateway: verdict %s, %d intervals, %d foreign; want Confirmed on the agent's %d intervals, %d foreign",
			verdict, rep.Interval.Count, rep.Interval.Foreign, 100*59, 2*100*60)
	}
	if verdict, _ := judge(false); verdict != isov1.VerdictRefuted {
		t.Errorf("a gateway without a key, which counts every request: verdict %s, want Refuted (the attack works there)", verdict)
	}
}
