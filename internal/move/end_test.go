package move

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// How a move ends: what lastMove records, where the crawler stays, and what it says.
func TestEnd(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	m := &isov1.Move{Reason: isov1.MoveEvacuation, Mode: isov1.MoveLive, From: "rt-1", To: "rt-2", Migration: "c-move-1", StartTime: metav1.NewTime(t0)}
	cold := *m
	cold.Mode = isov1.MoveCold
	failed := func(n int32) *isov1.MoveRecord { return &isov1.MoveRecord{Result: isov1.MoveFailed, Failures: n} }
	for name, tc := range map[string]struct {
		m         *isov1.Move
		result    isov1.MoveResult
		next      Next
		last      *isov1.MoveRecord
		stays     string
		reason    string
		failures  int32
		retry     time.Duration // from the end, 0 for none
		migration time.Duration
		message   string
	}{
		"live, done": {m: m, result: isov1.MoveSucceeded, next: Next{Step: Done, MigrationTime: 75400 * time.Millisecond},
			stays: "rt-2", reason: isov1.ReasonMoved, migration: 75 * time.Second,
			message: "moved from node rt-1 to node rt-2 in 2m0s (live-migrated; KubeVirt's migration took 1m15s, in whole seconds)"},
		"cold, done": {m: &cold, result: isov1.MoveSucceeded, next: Next{Step: Done}, stays: "rt-2", reason: isov1.ReasonMoved,
			message: "(restarted there)"},
		"failed, the first in a row": {m: m, result: isov1.MoveFailed, next: Next{Step: Fail, Why: "migration c-move-1 failed: target pod"},
			last: &isov1.MoveRecord{Result: isov1.MoveSucceeded, Failures: 0}, stays: "rt-1", reason: isov1.ReasonMoveFailed, failures: 1, retry: time.Minute,
			message: "migration c-move-1 failed: target pod; the crawler runs on node rt-1; the move (Evacuation) is tried again from 2026-11-29T08:03:00Z (failure 1 in a row)"},
		"failed, the third in a row": {m: m, result: isov1.MoveFailed, next: Next{Step: Fail, Why: "aborted"}, last: failed(2),
			stays: "rt-1", reason: isov1.ReasonMoveFailed, failures: 3, retry: 4 * time.Minute, message: "(failure 3 in a row)"},
	} {
		t.Run(name, func(t *testing.T) {
			e := End(tc.m, tc.result, tc.next, tc.last, t0.Add(2*time.Minute+300*time.Millisecond))
			r := e.Record
			if e.Stays != tc.stays || e.Reason != tc.reason || r.Failures != tc.failures || r.Result != tc.result {
				t.Errorf("stays %s, reason %s, failures %d, result %s; want %s, %s, %d, %s", e.Stays, e.Reason, r.Failures, r.Result, tc.stays, tc.reason, tc.failures, tc.result)
			}
			if !strings.Contains(r.Message, tc.message) || e.Message != r.Message || e.Warning != (tc.result == isov1.MoveFailed) {
				t.Errorf("message %q (condition %q, warning %v), want one with %q", r.Message, e.Message, e.Warning, tc.message)
			}
			end := t0.Add(2 * time.Minute)
			if diff := cmp.Diff(metav1.NewTime(end), r.EndTime); diff != "" {
				t.Errorf("end time, in whole seconds (-want +got):\n%s", diff)
			}
			var retry time.Duration
			if r.RetryAfter != nil {
				retry = r.RetryAfter.Sub(end)
			}
			var migration time.Duration
			if r.MigrationTime != nil {
				migration = r.MigrationTime.Duration
			}
			if retry != tc.retry || migration != tc.migration {
				t.Errorf("retry after %s, migration time %s; want %s, %s", retry, migration, tc.retry, tc.migration)
			}
		})
	}
}
