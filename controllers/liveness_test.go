package controllers

import (
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestWedged(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	for name, tc := range map[string]struct {
		oldest, locked time.Time
		want           string // a part of the error; "" for live
	}{
		"idle":                                  {},
		"deciding":                              {oldest: ago(time.Second), locked: ago(10 * time.Millisecond)},
		"a reconcile at its deadline":           {oldest: ago(time.Minute)},
		"a reconcile past its deadline a while": {oldest: ago(119 * time.Second)},
		"a reconcile past twice its deadline":   {oldest: ago(121 * time.Second), want: "a reconcile has run for 2m1s, past twice its 1m0s deadline"},
		"the lock held for the deadline":        {locked: ago(time.Minute)},
		"the lock held past the deadline":       {oldest: ago(61 * time.Second), locked: ago(61 * time.Second), want: "decision lock has been held for 1m1s"},
	} {
		t.Run(name, func(t *testing.T) {
			err := wedged(now, tc.oldest, tc.locked, time.Minute)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("wedged: %v, want live", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("wedged: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// heldLock is a decision lock as the liveness check reads it (placer.DecidingSince).
type heldLock struct{ since *time.Time }

func (h *heldLock) DecidingSince() (time.Time, bool) {
	if h.since == nil {
		return time.Time{}, false
	}
	return *h.since, true
}

// The liveness check reads the placer's decision lock and the reconciles in flight.
func TestLivenessFailsWhileWedged(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	lock := &heldLock{}
	l := &liveness{clock: clk, deadline: time.Minute, lock: lock}
	if err := l.Healthz(nil); err != nil {
		t.Fatalf("idle: %v", err)
	}

	// A decision lock never released (a decision blocked on something).
	taken := clk.Now()
	lock.since = &taken
	clk.SetTime(clk.Now().Add(30 * time.Second))
	if err := l.Healthz(nil); err != nil {
		t.Fatalf("lock held 30s: %v", err)
	}
	clk.SetTime(clk.Now().Add(31 * time.Second))
	if err := l.Healthz(nil); err == nil || !strings.Contains(err.Error(), "decision lock") {
		t.Fatalf("lock held 61s: %v, want wedged", err)
	}
	lock.since = nil
	if err := l.Healthz(nil); err != nil {
		t.Fatalf("lock released: %v", err)
	}

	// A reconcile that does not return.
	end := l.begin()
	done := l.begin()
	done()
	clk.SetTime(clk.Now().Add(2*time.Minute + time.Second))
	if err := l.Healthz(nil); err == nil || !strings.Contains(err.Error(), "a reconcile has run for") {
		t.Fatalf("a reconcile running for 2m1s: %v, want wedged", err)
	}
	end()
	if err := l.Healthz(nil); err != nil {
		t.Fatalf("the reconcile returned: %v", err)
	}
}
