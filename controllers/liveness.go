package controllers

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"isochron.io/isochron/internal/format"
)

// DefaultReconcileTimeout is how long one reconcile of a crawler may take (its context's
// deadline, --reconcile-timeout): a reconcile makes a few calls to the API server, and
// the leader's first decision lists every crawler.
const DefaultReconcileTimeout = time.Minute

// liveness tells whether the manager is wedged, for its liveness probe (Healthz): a
// reconcile that runs well past its deadline (something it waits on ignores its context),
// or a decision lock held longer than any decision takes (decisions only read memory
// under it). Either stops every decision while work waits; the kubelet then restarts the
// manager, and the other replica leads.
type liveness struct {
	clock clock.PassiveClock
	// deadline is a reconcile's deadline; lock is the placer's decision lock.
	deadline time.Duration
	lock     *timedMutex

	mu      sync.Mutex
	running map[uint64]time.Time
	next    uint64
}

// begin records a reconcile starting now, and returns the function that records its end.
func (l *liveness) begin() (end func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running == nil {
		l.running = map[uint64]time.Time{}
	}
	l.next++
	id := l.next
	l.running[id] = l.clock.Now()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.running, id)
	}
}

// Healthz is the liveness check (healthz.Checker): an error says how the manager is
// wedged.
func (l *liveness) Healthz(*http.Request) error {
	l.mu.Lock()
	var oldest time.Time
	for _, t := range l.running {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	l.mu.Unlock()
	lockedSince, locked := l.lock.HeldSince()
	if !locked {
		lockedSince = time.Time{}
	}
	return wedged(l.clock.Now(), oldest, lockedSince, l.deadline)
}

// wedged says how the manager is wedged at now, or nil: the oldest reconcile still
// running began at oldest and the decision lock was taken at locked (zero: none). A
// reconcile may run to twice its deadline (a call it made may take that long to notice),
// and the lock may be held for the deadline: far longer than a batch of decisions takes.
func wedged(now, oldest, locked time.Time, deadline time.Duration) error {
	if !locked.IsZero() && now.Sub(locked) > deadline {
		return fmt.Errorf("the placement decision lock has been held for %s, more than the %s a reconcile may take: decisions are stuck",
			format.Duration(now.Sub(locked).Round(time.Second)), format.Duration(deadline))
	}
	if !oldest.IsZero() && now.Sub(oldest) > 2*deadline {
		return fmt.Errorf("a reconcile has run for %s, past twice its %s deadline (--reconcile-timeout): it waits on something that ignores its deadline",
			format.Duration(now.Sub(oldest).Round(time.Second)), format.Duration(deadline))
	}
	return nil
}
