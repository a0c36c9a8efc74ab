package placement

import (
	"sort"
	"sync"
)

// Ledger is the reservations placement decides on, in memory: kube-scheduler's cache with
// its "assumed" pods, for crawlers (docs/placement.md). The leader builds it once from a
// list of every crawler's reservation, and from then on:
//
//   - a decision is assumed the moment it is made (Assume), before it is persisted, so the
//     next decision counts it without reading anything;
//   - a decision that fails to persist is forgotten (the undo Assume returns), and the
//     crawler is decided again;
//   - what the informer cache later shows of a crawler is observed (Observe): an assumed
//     reservation stays until the cache shows it (the cache lags the writes), then the
//     cache is followed, which carries spec changes into the crawler's workload;
//   - a deleted crawler's reservation is released (Remove).
//
// Only the leader writes reservations (status.sizing and status.placement), so a
// confirmed entry changes only by this process's decisions or by deletion. The ledger is
// safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	built   bool
	entries map[string]*entry
}

type entry struct {
	res Resident
	// assumed is set from a decision or the build until the cache shows the same
	// reservation.
	assumed bool
}

// NewLedger is a ledger not yet built: it observes nothing until Build.
func NewLedger() *Ledger { return &Ledger{} }

// Built says whether Build has run.
func (l *Ledger) Built() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.built
}

// Build replaces the ledger's contents with residents, read from the API server when the
// process becomes leader. Each is assumed until the cache shows it: a cache started
// before this process led may not have seen the last leader's writes yet.
func (l *Ledger) Build(residents []Resident) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = make(map[string]*entry, len(residents))
	for _, r := range residents {
		l.entries[r.Key] = &entry{res: r, assumed: true}
	}
	l.built = true
}

// Residents are the reservations in the ledger, in key order.
func (l *Ledger) Residents() []Resident {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Resident, 0, len(l.entries))
	for _, e := range l.entries {
		out = append(out, e.res)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Assume records decision res for its crawler and returns the undo that restores what the
// crawler held before, for when the decision fails to persist.
func (l *Ledger) Assume(res Resident) (undo func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, had := l.entries[res.Key]
	l.entries[res.Key] = &entry{res: res, assumed: true}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if had {
			l.entries[res.Key] = prev
		} else {
			delete(l.entries, res.Key)
		}
	}
}

// Assumed says whether the crawler key holds a reservation the cache has not shown yet:
// its cached copy is older than this process's last decision for it.
func (l *Ledger) Assumed(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[key]
	return ok && e.assumed
}

// Observe takes in what the informer cache shows of the crawler key: its reservation, or
// nil when it holds none. An assumed reservation is confirmed when the cache shows the
// same node and size, and kept otherwise (the cache is behind); a confirmed one follows
// the cache.
func (l *Ledger) Observe(key string, res *Resident) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.built {
		return
	}
	e, ok := l.entries[key]
	switch {
	case ok && e.assumed && (res == nil || !sameReservation(e.res, *res)):
		// The cache has not caught up with the decision yet.
	case res == nil:
		delete(l.entries, key)
	default:
		l.entries[key] = &entry{res: *res}
	}
}

// Remove releases the reservation of a crawler that is gone.
func (l *Ledger) Remove(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.entries, key)
}

// sameReservation says whether a and b hold the same resources on the same node.
func sameReservation(a, b Resident) bool {
	return a.Node == b.Node && a.Sizing == b.Sizing
}
