package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(d)) }

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func cond(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

// statusCrawler is a crawler placed on rt-1, running, probed and moved once; opts change it.
func statusCrawler(opts ...func(*isov1.CrawlerVM)) *isov1.CrawlerVM {
	c := &isov1.CrawlerVM{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "tower-a"},
		Spec:       isov1.CrawlerVMSpec{RPS: 400, ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}, Objective: "99.999"}},
		Status: isov1.CrawlerVMStatus{
			Conditions: []metav1.Condition{
				cond(isov1.ConditionPlaced, metav1.ConditionTrue, isov1.ReasonPlaced, "node rt-1 is predicted to hold it within every crawler's budget"),
				cond(isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning, "VMI tower-a runs on rt-1"),
				cond(isov1.ConditionAtRisk, metav1.ConditionFalse, isov1.ReasonPredictedWithinTolerance, "4.2ms within 10ms"),
			},
			Sizing:    &isov1.Sizing{VCPUs: 2, HostCPUs: 3, CPURequest: resource.MustParse("3"), Memory: resource.MustParse("2Gi")},
			Placement: &isov1.PlacementStatus{Node: "rt-1", PredictedError: dur(4200 * time.Microsecond), Headroom: dur(5800 * time.Microsecond), Correction: "1.3"},
			VMI:       &isov1.VMIStatus{Name: "tower-a", Phase: "Running"},
			LastProbe: &isov1.ProbeResult{Job: "tower-a-probe-x", Trigger: isov1.TriggerSchedule, StartTime: at(-time.Hour), Verdict: isov1.VerdictConfirmed,
				IntervalError: &isov1.MeasuredIntervalError{Intervals: 200000, AtObjective: metav1.Duration{Duration: 3100 * time.Microsecond}, Max: metav1.Duration{Duration: 4 * time.Millisecond}}},
			LastMove: &isov1.MoveRecord{Reason: isov1.MoveRequested, Mode: isov1.MoveLive, From: "rt-0", To: "rt-1", Result: isov1.MoveSucceeded, StartTime: at(-2 * time.Hour), EndTime: at(-2*time.Hour + time.Minute)},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func TestWriteStatus(t *testing.T) {
	tests := map[string]struct {
		cvm  *isov1.CrawlerVM
		want []string // lines (or their starts) the text holds
	}{
		"placed, running, measured": {
			cvm: statusCrawler(),
			want: []string{
				"CrawlerVM bms/tower-a: 400 requests/s, tolerance 10ms at 99.999%",
				"Node:           rt-1 (VMI tower-a Running)",
				"Why there:      node rt-1 is predicted to hold it within every crawler's budget",
				"Size:           2 vCPUs on 3 exclusive host CPUs, memory 2Gi",
				"Predicted:      4.2ms interval error at the objective, headroom 5.8ms, probes' correction x1.3",
				"Measured:       3.1ms interval error at the objective (max 4ms, 200000 intervals): Confirmed by probe tower-a-probe-x (Schedule, 2026-11-22T11:00:00Z)",
				"Outages:        none",
				"Last move:      Succeeded Requested from node rt-0 to node rt-1 (Live), 2026-11-22T10:00:00Z to 2026-11-22T10:01:00Z",
				"To do:          nothing: placed, ready and within its budget as predicted",
			},
		},
		"shared CPUs, never probed, never moved": {
			cvm: statusCrawler(func(c *isov1.CrawlerVM) {
				c.Status.Sizing = &isov1.Sizing{VCPUs: 1, CPURequest: resource.MustParse("1500m"), Memory: resource.MustParse("1Gi")}
				c.Status.LastProbe, c.Status.LastMove = nil, nil
				c.Status.ActiveProbe = &isov1.ActiveProbe{Job: "tower-a-probe-y"}
			}),
			want: []string{
				"Size:           1 vCPUs on shared CPUs (request 1500m), memory 1Gi",
				"Measured:       never probed; probe tower-a-probe-y is running",
				"Last move:      never moved",
			},
		},
		"not placed: what to do": {
			cvm: statusCrawler(func(c *isov1.CrawlerVM) {
				c.Status.Placement, c.Status.Sizing, c.Status.VMI, c.Status.LastProbe = nil, nil, nil, nil
				c.Status.Conditions = []metav1.Condition{
					cond(isov1.ConditionPlaced, metav1.ConditionFalse, isov1.ReasonUnschedulable, "no node fits: rt-1 would push bms/b over budget"),
					cond(isov1.ConditionReady, metav1.ConditionFalse, isov1.ReasonNotPlaced, "waits for a node"),
				}
			}),
			want: []string{
				"Node:           none: not placed",
				"Why there:      no node fits: rt-1 would push bms/b over budget",
				"Size:           not sized yet",
				"Predicted:      no prediction (not placed)",
				"To do:          Placed=False (Unschedulable): no node fits: rt-1 would push bms/b over budget",
				"                Ready=False (NotPlaced): waits for a node",
			},
		},
		"at risk": {
			cvm: statusCrawler(func(c *isov1.CrawlerVM) {
				c.Status.Conditions[2] = cond(isov1.ConditionAtRisk, metav1.ConditionTrue, isov1.ReasonPredictedOverTolerance, "12ms over 10ms: add a node")
			}),
			want: []string{"To do:          AtRisk=True (PredictedOverTolerance): 12ms over 10ms: add a node"},
		},
		"outages: the last 30 days summed, the latest ongoing": {
			cvm: statusCrawler(func(c *isov1.CrawlerVM) {
				end := at(-24*time.Hour + 10*time.Second)
				old := at(-40*24*time.Hour + time.Minute)
				c.Status.Outages = []isov1.Outage{
					{Cause: isov1.OutageNodeLoss, Start: at(-30 * time.Second), Message: "node rt-0 stopped reporting"},
					{Cause: isov1.OutageCrash, Start: at(-24 * time.Hour), End: &end, Duration: dur(10 * time.Second)},
					{Cause: isov1.OutageCrash, Start: at(-40 * 24 * time.Hour), End: &old, Duration: dur(time.Minute)},
				}
			}),
			want: []string{"Outages:        2 in the last 30 days, down 40s of the 25.92s its objective allows; latest: NodeLoss at 2026-11-22T11:59:30Z, ongoing for 30s: node rt-0 stopped reporting"},
		},
		"moving": {
			cvm: statusCrawler(func(c *isov1.CrawlerVM) {
				c.Status.Move = &isov1.Move{Reason: isov1.MoveRequested, Mode: isov1.MoveLive, From: "rt-1", To: "rt-2", StartTime: at(-time.Minute), Message: "asked for"}
			}),
			want: []string{"Moving:         from node rt-1 to node rt-2 since 2026-11-22T11:59:00Z (Requested): asked for"},
		},
		"never looked at by the manager": {
			cvm: statusCrawler(func(c *isov1.CrawlerVM) { c.Status = isov1.CrawlerVMStatus{} }),
			want: []string{
				"To do:          Placed is not reported yet: the manager has not looked at the crawler (is it running? kubectl isochron version)",
				"                Ready is not reported yet",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			if err := WriteStatus(&b, tc.cvm, now); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(b.String(), "\n")
			for _, w := range tc.want {
				found := false
				for _, l := range lines {
					found = found || strings.HasPrefix(l, w)
				}
				if !found {
					t.Errorf("no line %q in:\n%s", w, b.String())
				}
			}
		})
	}
}

func TestToDo(t *testing.T) {
	ok := []metav1.Condition{
		cond(isov1.ConditionPlaced, metav1.ConditionTrue, isov1.ReasonPlaced, ""),
		cond(isov1.ConditionReady, metav1.ConditionTrue, isov1.ReasonVMIRunning, ""),
	}
	tests := map[string]struct {
		conds []metav1.Condition
		want  []string
	}{
		"all well, AtRisk absent": {conds: ok},
		"AtRisk False":            {conds: append(ok[:2:2], cond(isov1.ConditionAtRisk, metav1.ConditionFalse, isov1.ReasonPredictedWithinTolerance, ""))},
		"Ready Unknown": {
			conds: []metav1.Condition{ok[0], cond(isov1.ConditionReady, metav1.ConditionUnknown, isov1.ReasonVMIPending, "VMI starting")},
			want:  []string{"Ready=Unknown (VMIPending): VMI starting"},
		},
		"SLOConfirmed False is the probe's, not a to-do": {
			conds: append(ok[:2:2], cond(isov1.ConditionSLOConfirmed, metav1.ConditionFalse, isov1.ReasonSLORefuted, "")),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ToDo(tc.conds)); diff != "" {
				t.Errorf("ToDo (-want +got):\n%s", diff)
			}
		})
	}
}
