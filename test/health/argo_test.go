package health_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/config/argocd"
	"isochron.io/isochron/test/health"
)

// --- builders -----------------------------------------------------------------

type option func(*isov1.CrawlerVM)

// crawler is a CrawlerVM at spec generation gen whose status observed generation
// observed (0: no status written yet), as the API server would serve it.
func crawler(gen, observed int64, opts ...option) *isov1.CrawlerVM {
	c := &isov1.CrawlerVM{
		TypeMeta:   metav1.TypeMeta{APIVersion: isov1.GroupVersion.String(), Kind: "CrawlerVM"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: "c", Generation: gen},
	}
	c.Status.ObservedGeneration = observed
	for _, o := range opts {
		o(c)
	}
	return c
}

// cond sets a condition observed at generation gen.
func cond(typ string, s metav1.ConditionStatus, reason, message string, gen int64) option {
	return func(c *isov1.CrawlerVM) {
		c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{
			Type: typ, Status: s, Reason: reason, Message: message, ObservedGeneration: gen,
		})
	}
}

func ready(gen int64) option {
	return cond(isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning, "VMI c runs on node rt-1", gen)
}

func slo(s metav1.ConditionStatus, reason, message string, gen int64) option {
	return cond(isov1.ConditionSLOConfirmed, s, reason, message, gen)
}

func deleting() option {
	return func(c *isov1.CrawlerVM) {
		c.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	}
}

// unstructuredOf converts c as the API machinery does: numbers are int64.
func unstructuredOf(t *testing.T, c *isov1.CrawlerVM) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.ObservedGeneration == 0 && len(c.Status.Conditions) == 0 {
		delete(m, "status") // the API server serves no status before the operator writes one
	}
	return &unstructured.Unstructured{Object: m}
}

// --- tests ----------------------------------------------------------------------

// TestArgoHealth runs health.lua on each status shape isochron writes, and kstatus
// beside it: where the two differ, the comment says why.
func TestArgoHealth(t *testing.T) {
	const unschedulable = "no node can host 2 vCPUs (3 exclusive CPUs) within every crawler's budget: 0 of 1 nodes match spec.placement.nodeSelector"
	for name, tc := range map[string]struct {
		crawler *isov1.CrawlerVM
		want    health.Status
		kstatus status.Status
	}{
		// kstatus reads an object with neither observedGeneration nor conditions as
		// Current: it cannot tell that no controller has looked at it yet.
		"no status yet": {
			crawler: crawler(1, 0),
			want:    health.Status{health.Progressing, "Waiting for isochron to place the crawler"},
			kstatus: status.CurrentStatus,
		},
		"spec changed, not yet observed": {
			crawler: crawler(2, 1, ready(1), slo(metav1.ConditionTrue, isov1.ReasonSLOMet, "met", 1)),
			want:    health.Status{health.Progressing, "Waiting for isochron to observe generation 2 (observed 1)"},
			kstatus: status.InProgressStatus,
		},
		// kstatus skips its generation check without status.observedGeneration; the
		// script counts it as 0.
		"conditions without observedGeneration": {
			crawler: crawler(1, 0, ready(1)),
			want:    health.Status{health.Progressing, "Waiting for isochron to observe generation 1 (observed 0)"},
			kstatus: status.CurrentStatus,
		},
		"stalled: no node fits": {
			crawler: crawler(1, 1,
				cond(isov1.ConditionPlaced, metav1.ConditionFalse, isov1.ReasonUnschedulable, unschedulable, 1),
				cond(isov1.ConditionReady, metav1.ConditionFalse, isov1.ReasonNotPlaced, "waiting for a node", 1),
				cond(isov1.ConditionStalled, metav1.ConditionTrue, isov1.ReasonUnschedulable, unschedulable, 1)),
			want:    health.Status{health.Degraded, "Stalled=True (Unschedulable): " + unschedulable},
			kstatus: status.FailedStatus,
		},
		// A changed spec that fits nowhere stalls the crawler even though the VM of
		// the previous spec still runs.
		"stalled while the previous VMI runs": {
			crawler: crawler(2, 2, ready(2),
				cond(isov1.ConditionPlaced, metav1.ConditionFalse, isov1.ReasonUnschedulable, unschedulable, 2),
				cond(isov1.ConditionStalled, metav1.ConditionTrue, isov1.ReasonUnschedulable, unschedulable, 2)),
			want:    health.Status{health.Degraded, "Stalled=True (Unschedulable): " + unschedulable},
			kstatus: status.FailedStatus,
		},
		"stalled: VMI failed": {
			crawler: crawler(1, 1,
				cond(isov1.ConditionReady, metav1.ConditionFalse, isov1.ReasonVMIFailed, "VMI c failed", 1),
				cond(isov1.ConditionStalled, metav1.ConditionTrue, isov1.ReasonVMIFailed, "VMI c failed", 1)),
			want:    health.Status{health.Degraded, "Stalled=True (VMIFailed): VMI c failed"},
			kstatus: status.FailedStatus,
		},
		// isochron removes Stalled rather than setting it False; False means nothing.
		"Stalled False is not stalled": {
			crawler: crawler(1, 1, ready(1), cond(isov1.ConditionStalled, metav1.ConditionFalse, "Fine", "", 1)),
			want:    health.Status{health.Healthy, "VMI c runs on node rt-1; SLOConfirmed not reported yet"},
			kstatus: status.CurrentStatus,
		},
		"reconciling: placing": {
			crawler: crawler(1, 1, cond(isov1.ConditionReconciling, metav1.ConditionTrue, isov1.ReasonPlacing, "choosing a node", 1)),
			want:    health.Status{health.Progressing, "Reconciling=True (Placing): choosing a node"},
			kstatus: status.InProgressStatus,
		},
		"reconciling: VMI starting": {
			crawler: crawler(1, 1,
				cond(isov1.ConditionReady, metav1.ConditionFalse, isov1.ReasonVMIPending, "VMI c is Scheduling", 1),
				cond(isov1.ConditionReconciling, metav1.ConditionTrue, isov1.ReasonVMIPending, "VMI c is Scheduling", 1)),
			want:    health.Status{health.Progressing, "Reconciling=True (VMIPending): VMI c is Scheduling"},
			kstatus: status.InProgressStatus,
		},
		"no Ready condition": {
			crawler: crawler(1, 1, cond(isov1.ConditionPlaced, metav1.ConditionTrue, isov1.ReasonPlaced, "node rt-1", 1)),
			want:    health.Status{health.Progressing, "Waiting for the Ready condition"},
			kstatus: status.CurrentStatus,
		},
		// Placing a changed spec writes status.observedGeneration before the VMI is
		// checked against it: for that one write, kstatus reads Current from the Ready
		// of the previous generation.
		"Ready of the previous generation": {
			crawler: crawler(2, 2, ready(1), cond(isov1.ConditionPlaced, metav1.ConditionTrue, isov1.ReasonPlaced, "node rt-1", 2)),
			want:    health.Status{health.Progressing, "Waiting for isochron to check the VMI of generation 2; last seen Ready=True (VMIRunning): VMI c runs on node rt-1"},
			kstatus: status.CurrentStatus,
		},
		// isochron always pairs a False Ready with Reconciling or Stalled; without
		// either, Ready alone decides.
		"Ready False alone": {
			crawler: crawler(1, 1, cond(isov1.ConditionReady, metav1.ConditionFalse, isov1.ReasonVMIPending, "", 1)),
			want:    health.Status{health.Progressing, "Ready=False (VMIPending)"},
			kstatus: status.InProgressStatus,
		},
		"ready, SLO not reported": {
			crawler: crawler(1, 1, ready(1)),
			want:    health.Status{health.Healthy, "VMI c runs on node rt-1; SLOConfirmed not reported yet"},
			kstatus: status.CurrentStatus,
		},
		"ready, probe pending": {
			crawler: crawler(1, 1, ready(1), slo(metav1.ConditionUnknown, isov1.ReasonProbePending, "a probe of the current spec will start", 1)),
			want:    health.Status{health.Healthy, "VMI c runs on node rt-1; SLOConfirmed=Unknown (ProbePending): a probe of the current spec will start"},
			kstatus: status.CurrentStatus,
		},
		"ready, probe running": {
			crawler: crawler(1, 1, ready(1), slo(metav1.ConditionUnknown, isov1.ReasonProbeRunning, "probe Job c-1 measures for 10m0s", 1)),
			want:    health.Status{health.Healthy, "VMI c runs on node rt-1; SLOConfirmed=Unknown (ProbeRunning): probe Job c-1 measures for 10m0s"},
			kstatus: status.CurrentStatus,
		},
		"ready, SLO met": {
			crawler: crawler(1, 1, ready(1), slo(metav1.ConditionTrue, isov1.ReasonSLOMet, "p99.999 interval error 2.1ms within the 10ms tolerance", 1)),
			want:    health.Status{health.Healthy, "VMI c runs on node rt-1; SLOConfirmed=True (SLOMet): p99.999 interval error 2.1ms within the 10ms tolerance"},
			kstatus: status.CurrentStatus,
		},
		// kstatus knows nothing of SLOConfirmed: a refuted SLO is Current to Flux.
		"ready, SLO refuted": {
			crawler: crawler(1, 1, ready(1), slo(metav1.ConditionFalse, isov1.ReasonSLORefuted, "p99.999 interval error 14.2ms exceeds the 10ms tolerance", 1)),
			want:    health.Status{health.Degraded, "SLO refuted: p99.999 interval error 14.2ms exceeds the 10ms tolerance"},
			kstatus: status.CurrentStatus,
		},
		"ready, RT-NIC deadline missed": {
			crawler: crawler(1, 1, ready(1), slo(metav1.ConditionFalse, isov1.ReasonDeadlineMissed, "40 of 200000 round trips missed the 5ms deadline", 1)),
			want:    health.Status{health.Degraded, "SLO refuted: 40 of 200000 round trips missed the 5ms deadline"},
			kstatus: status.CurrentStatus,
		},
		"ready, refuted without a message": {
			crawler: crawler(1, 1, ready(1), slo(metav1.ConditionFalse, isov1.ReasonSLORefuted, "", 1)),
			want:    health.Status{health.Degraded, "SLO refuted: SLOConfirmed=False (SLORefuted)"},
			kstatus: status.CurrentStatus,
		},
		// An inconclusive probe says nothing against the crawler: Healthy, and says so.
		"ready, too few samples": {
			crawler: crawler(1, 1, ready(1), slo(metav1.ConditionFalse, isov1.ReasonInsufficientSamples, "50000 intervals, 100000 needed", 1)),
			want:    health.Status{health.Healthy, "VMI c runs on node rt-1; SLOConfirmed=False (InsufficientSamples): 50000 intervals, 100000 needed"},
			kstatus: status.CurrentStatus,
		},
		"ready, probe failed": {
			crawler: crawler(1, 1, ready(1), slo(metav1.ConditionFalse, isov1.ReasonProbeFailed, "address already in use", 1)),
			want:    health.Status{health.Healthy, "VMI c runs on node rt-1; SLOConfirmed=False (ProbeFailed): address already in use"},
			kstatus: status.CurrentStatus,
		},
		// A refutation of the previous spec does not hold against the new one.
		"ready, SLO refuted for the previous generation": {
			crawler: crawler(2, 2, ready(2), slo(metav1.ConditionFalse, isov1.ReasonSLORefuted, "14.2ms", 1)),
			want:    health.Status{health.Healthy, "VMI c runs on node rt-1; SLOConfirmed not yet evaluated for generation 2"},
			kstatus: status.CurrentStatus,
		},
		"ready without a message": {
			crawler: crawler(1, 1, cond(isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning, "", 1)),
			want:    health.Status{health.Healthy, "Ready=True (VMIRunning); SLOConfirmed not reported yet"},
			kstatus: status.CurrentStatus,
		},
		// gitops-engine answers for an object being deleted before the script runs.
		"being deleted": {
			crawler: crawler(1, 1, ready(1), deleting()),
			want:    health.Status{health.Progressing, "Pending deletion"},
			kstatus: status.TerminatingStatus,
		},
	} {
		t.Run(name, func(t *testing.T) {
			u := unstructuredOf(t, tc.crawler)
			got, err := health.Argo(u)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Argo CD health (-want +got):\n%s", diff)
			}
			k, err := status.Compute(u)
			if err != nil {
				t.Fatal(err)
			}
			if k.Status != tc.kstatus {
				t.Errorf("kstatus %s (%s), want %s", k.Status, k.Message, tc.kstatus)
			}
		})
	}
}

// TestArgoHealthOfJSON runs the script on objects decoded from JSON, whose numbers are
// float64 rather than the API machinery's int64: Argo CD may hand it either.
func TestArgoHealthOfJSON(t *testing.T) {
	for name, tc := range map[string]struct {
		object string
		want   health.Status
	}{
		"generation not observed": {
			object: `{"apiVersion": "isochron.io/v1alpha1", "kind": "CrawlerVM",
				"metadata": {"name": "c", "namespace": "crawl", "generation": 3},
				"status": {"observedGeneration": 2, "conditions": [
					{"type": "Ready", "status": "True", "reason": "VMIRunning", "message": "up", "observedGeneration": 2}]}}`,
			want: health.Status{health.Progressing, "Waiting for isochron to observe generation 3 (observed 2)"},
		},
		// The API server always sets metadata.generation; without it there is nothing
		// to compare.
		"no generation": {
			object: `{"apiVersion": "isochron.io/v1alpha1", "kind": "CrawlerVM",
				"metadata": {"name": "c", "namespace": "crawl"},
				"status": {"conditions": [
					{"type": "Ready", "status": "True", "reason": "VMIRunning", "message": "up", "observedGeneration": 2}]}}`,
			want: health.Status{health.Healthy, "up; SLOConfirmed not reported yet"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			if err := json.Unmarshal([]byte(tc.object), &u.Object); err != nil {
				t.Fatal(err)
			}
			got, err := health.Argo(u)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Argo CD health (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConfigMapPatchInstallsHealthLua pins the argocd-cm patch to health.lua, byte for
// byte: the patch is what users apply, health.lua what the tests run.
func TestConfigMapPatchInstallsHealthLua(t *testing.T) {
	script, err := health.ConfigMapScript(argocd.ConfigMapPatch)
	if err != nil {
		t.Fatal(err)
	}
	if script != argocd.HealthLua {
		t.Errorf("config/argocd/argocd-cm-patch.yaml embeds a script that differs from config/argocd/health.lua (-health.lua +patch):\n%s",
			cmp.Diff(argocd.HealthLua, script))
	}
}

// TestHarness checks that the harness answers for a broken script as Argo CD does.
func TestHarness(t *testing.T) {
	u := unstructuredOf(t, crawler(1, 1, ready(1)))
	for name, tc := range map[string]struct {
		script  string
		want    health.Status
		wantErr bool
	}{
		"invalid status": {script: `return {status = "Fine"}`, want: health.Status{health.Unknown, "Lua returned an invalid health status"}},
		"not a table":    {script: `return "Healthy"`, want: health.Status{health.Unknown, "expect table output from Lua script, not string"}, wantErr: true},
		// Argo CD opens no string library for scripts from argocd-cm.
		"no string library": {script: `return {status = string.upper("healthy")}`, wantErr: true},
		"obj is the object": {script: `return {status = "Healthy", message = obj.metadata.name .. " " .. obj.status.conditions[1].type}`, want: health.Status{health.Healthy, "c Ready"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := health.Run(tc.script, u)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if tc.want.Status == "" {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("health (-want +got):\n%s", diff)
			}
		})
	}
}
