package slo

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

func TestNextRemedy(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	refuted := func(c *isov1.CrawlerVM) {
		c.Status.LastProbe = &isov1.ProbeResult{Job: "tower-a-probe-2", Verdict: isov1.VerdictRefuted, ObservedGeneration: 2, VMIUID: "vmi-2"}
	}
	replace := func(c *isov1.CrawlerVM) { c.Spec.Placement = &isov1.Placement{OnRefuted: isov1.RefutedReplace} }
	moved := func(job string, ago time.Duration, to string) func(*isov1.CrawlerVM) {
		return func(c *isov1.CrawlerVM) {
			c.Status.LastRemediation = &isov1.Remediation{Job: job, Time: metav1.NewTime(now.Add(-ago)), From: "a", To: to}
		}
	}
	// failed is a failed move that ended ago, tried again in retry.
	failed := func(ago, retry time.Duration) func(*isov1.CrawlerVM) {
		return func(c *isov1.CrawlerVM) {
			c.Status.LastMove = &isov1.MoveRecord{Reason: isov1.MoveRefuted, Result: isov1.MoveFailed, EndTime: metav1.NewTime(now.Add(-ago + time.Second)),
				RetryAfter: &metav1.Time{Time: now.Add(retry)}, Failures: 1}
		}
	}
	for _, tc := range []struct {
		name string
		opts []func(*isov1.CrawlerVM)
		vmi  string
		want Remedy
	}{
		{"Report never moves", []func(*isov1.CrawlerVM){refuted}, "vmi-2", Remedy{}},
		{"Replace moves a refuted crawler", []func(*isov1.CrawlerVM){replace, refuted}, "vmi-2", Remedy{Move: true}},
		{"a confirmed crawler stays", []func(*isov1.CrawlerVM){replace, refuted, func(c *isov1.CrawlerVM) { c.Status.LastProbe.Verdict = isov1.VerdictConfirmed }}, "vmi-2", Remedy{}},
		{"an inconclusive probe does not move it", []func(*isov1.CrawlerVM){replace, refuted, func(c *isov1.CrawlerVM) { c.Status.LastProbe.Verdict = isov1.VerdictInconclusive }}, "vmi-2", Remedy{}},
		{"a timed-out probe does not move it", []func(*isov1.CrawlerVM){replace, refuted, func(c *isov1.CrawlerVM) { c.Status.LastProbe.Verdict = isov1.VerdictTimedOut }}, "vmi-2", Remedy{}},
		{"a probe of an earlier spec does not move it", []func(*isov1.CrawlerVM){replace, refuted, func(c *isov1.CrawlerVM) { c.Generation = 3 }}, "vmi-2", Remedy{}},
		{"a probe of another VMI does not move it", []func(*isov1.CrawlerVM){replace, refuted}, "vmi-3", Remedy{}},
		{"no VMI runs: no move", []func(*isov1.CrawlerVM){replace, refuted}, "", Remedy{}},
		{"never two moves for one probe", []func(*isov1.CrawlerVM){replace, refuted, moved("tower-a-probe-2", 2*time.Hour, "b")}, "vmi-2", Remedy{}},
		{"nor a second try after it stayed", []func(*isov1.CrawlerVM){replace, refuted, moved("tower-a-probe-2", 2*time.Hour, "")}, "vmi-2", Remedy{}},
		{"a new refutation within the interval waits", []func(*isov1.CrawlerVM){replace, refuted, moved("tower-a-probe-1", 20*time.Minute, "b")}, "vmi-2", Remedy{Wait: 40 * time.Minute}},
		{"a new refutation after the interval moves", []func(*isov1.CrawlerVM){replace, refuted, moved("tower-a-probe-1", time.Hour, "b")}, "vmi-2", Remedy{Move: true}},
		{"staying does not start the interval", []func(*isov1.CrawlerVM){replace, refuted, moved("tower-a-probe-1", time.Minute, "")}, "vmi-2", Remedy{Move: true}},
		{"a refutation of another node does not move it", []func(*isov1.CrawlerVM){replace, refuted, func(c *isov1.CrawlerVM) { c.Status.LastProbe.Node = "b" }}, "vmi-2", Remedy{}},
		{"nor while it moves", []func(*isov1.CrawlerVM){replace, refuted, func(c *isov1.CrawlerVM) { c.Status.Move = &isov1.Move{From: "a", To: "b"} }}, "vmi-2", Remedy{}},
		{"a failed move for the probe waits for its backoff", []func(*isov1.CrawlerVM){replace, refuted, moved("tower-a-probe-2", 2*time.Minute, "b"), failed(2*time.Minute, time.Minute)}, "vmi-2", Remedy{Wait: time.Minute}},
		{"and is tried again after it", []func(*isov1.CrawlerVM){replace, refuted, moved("tower-a-probe-2", 2*time.Minute, "b"), failed(2*time.Minute, -time.Second)}, "vmi-2", Remedy{Move: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Name: "tower-a", Generation: 2}}
			c.Status.Placement = &isov1.PlacementStatus{Node: "a"}
			for _, o := range tc.opts {
				o(c)
			}
			if got := NextRemedy(c, tc.vmi, now, DefaultMinMoveInterval); got != tc.want {
				t.Errorf("NextRemedy = %+v, want %+v", got, tc.want)
			}
		})
	}
}
