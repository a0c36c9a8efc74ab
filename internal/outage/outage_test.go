package outage

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func TestCause(t *testing.T) {
	cases := map[string]struct {
		reason string
		move   *isov1.Move
		want   isov1.OutageCause
	}{
		"a failed VMI":               {reason: isov1.ReasonVMIFailed, want: isov1.OutageCrash},
		"a crash loop":               {reason: isov1.ReasonVMCrashLoop, want: isov1.OutageCrash},
		"a restart for a spec":       {reason: isov1.ReasonVMIReplacing, want: isov1.OutageSpecChange},
		"a lost node":                {reason: isov1.ReasonNodeLost, want: isov1.OutageNodeLoss},
		"stopped by a person":        {reason: isov1.ReasonVMStopped, want: isov1.OutageStopped},
		"its pod cannot schedule":    {reason: isov1.ReasonLauncherUnschedulable, want: isov1.OutageUnplaceable},
		"its pod is refused (quota)": {reason: isov1.ReasonLauncherRefused, want: isov1.OutageUnplaceable},
		"a cold move, refuted":       {reason: isov1.ReasonVMIPending, move: &isov1.Move{Reason: isov1.MoveRefuted}, want: isov1.OutageMove},
		"a cold move of a drain":     {reason: isov1.ReasonVMIPending, move: &isov1.Move{Reason: isov1.MoveEvacuation}, want: isov1.OutageDrain},
		"the move off a lost node":   {reason: isov1.ReasonVMIPending, move: &isov1.Move{Reason: isov1.MoveNodeLost}, want: isov1.OutageNodeLoss},
		"a spec change's cold move":  {reason: isov1.ReasonVMIPending, move: &isov1.Move{Reason: isov1.MoveSpecChange}, want: isov1.OutageSpecChange},
	}
	for name, tc := range cases {
		if got := Cause(tc.reason, tc.move); got != tc.want {
			t.Errorf("%s: Cause = %s, want %s", name, got, tc.want)
		}
	}
}

// An outage begins when a crawler that ran stops, ends when it runs again, and is recorded
// once; a crawler's first start is none.
func TestTrack(t *testing.T) {
	var list []isov1.Outage
	list, ch := Track(list, false, false, isov1.OutageCrash, "", t0, t0)
	if ch != Unchanged || len(list) != 0 {
		t.Fatalf("a crawler that never ran: %v %+v", ch, list)
	}
	list, ch = Track(list, true, false, isov1.OutageCrash, "VMI failed", t0.Add(-2*time.Second), t0)
	if ch != Began || len(list) != 1 || Ongoing(list) == nil || !list[0].Start.Time.Equal(t0.Add(-2*time.Second)) {
		t.Fatalf("began: %v %+v", ch, list)
	}
	list, ch = Track(list, false, false, isov1.OutageMove, "", t0, t0)
	if ch != Unchanged || list[0].Cause != isov1.OutageCrash {
		t.Fatalf("a down crawler stays in its outage, of its first cause: %v %+v", ch, list)
	}
	list, ch = Track(list, false, true, "", "", t0, t0.Add(7*time.Second))
	if ch != Ended || list[0].End == nil || list[0].Duration.Duration != 9*time.Second {
		t.Fatalf("ended: %v %+v", ch, list[0])
	}
	_, ch = Track(list, true, true, "", "", t0, t0)
	if ch != Unchanged {
		t.Fatalf("up and up: %v", ch)
	}
	// An end reported before the start (clocks) is the start.
	l2, _ := Track(nil, true, false, isov1.OutageCrash, "", t0, t0)
	l2, _ = Track(l2, false, true, "", "", t0, t0.Add(-time.Second))
	if l2[0].Duration.Duration != 0 {
		t.Errorf("duration %s, want 0", l2[0].Duration.Duration)
	}
	// At most MaxHistory, the newest first.
	var many []isov1.Outage
	for i := range MaxHistory + 4 {
		at := t0.Add(time.Duration(i) * time.Hour)
		many, _ = Track(many, true, false, isov1.OutageCrash, "", at, at)
		many, _ = Track(many, false, true, "", "", at, at.Add(time.Second))
	}
	if len(many) != MaxHistory || !many[0].Start.Time.Equal(t0.Add(time.Duration(MaxHistory+3)*time.Hour)) {
		t.Errorf("kept %d, newest at %s", len(many), many[0].Start.Time)
	}
}

// The downtime of the window counts the outages in it, an ongoing one up to now, and a
// part of one that began before it; the budget at 99.999% is 25.92 s of 30 days.
func TestDowntimeAndBudget(t *testing.T) {
	now := t0
	ended := func(start time.Time, d time.Duration) isov1.Outage {
		e := metav1.NewTime(start.Add(d))
		return isov1.Outage{Cause: isov1.OutageCrash, Start: metav1.NewTime(start), End: &e, Duration: &metav1.Duration{Duration: d}}
	}
	list := []isov1.Outage{
		{Cause: isov1.OutageNodeLoss, Start: metav1.NewTime(now.Add(-5 * time.Second))}, // ongoing
		ended(now.Add(-24*time.Hour), 10*time.Second),
		ended(now.Add(-Window-5*time.Second), 8*time.Second), // 3 s of it in the window
		ended(now.Add(-40*24*time.Hour), time.Hour),          // before the window
	}
	if got, want := Downtime(list, now, Window), 18*time.Second; got != want {
		t.Errorf("Downtime = %s, want %s", got, want)
	}
	if got, want := Budget(99.999, Window), 25920*time.Millisecond; got != want {
		t.Errorf("Budget(99.999) = %s, want %s", got, want)
	}
	ok, reason, msg := Condition(list, 99.999, now)
	if !ok || reason != isov1.ReasonWithinBudget || !strings.Contains(msg, "took 18s, of the 25.92s that the 99.999% objective allows") {
		t.Errorf("Condition = %v %s %q", ok, reason, msg)
	}
	list = append([]isov1.Outage{ended(now.Add(-time.Hour), 30*time.Second)}, list[1:]...)
	if ok, reason, _ := Condition(list, 99.999, now); ok || reason != isov1.ReasonBudgetSpent {
		t.Errorf("43 s down: Condition = %v %s, want the budget spent", ok, reason)
	}
}
