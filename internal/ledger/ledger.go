// Package ledger holds the reservations placement decides on, in memory: the operator's
// counterpart of kube-scheduler's cache with its assumed pods. It is not pure (it is
// shared by the reconcile workers, behind a mutex), which is why it is not in package
// placement.
package ledger

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"

	"isochron.io/isochron/internal/placement"
)

// Ledger is the reservations placement decides on, in memory: kube-scheduler's cache with
// its "assumed" pods, for crawlers (docs/placement.md). The leader builds it once from a
// list of every crawler's reservation, and from then on:
//
//   - a decision is assumed the moment it is made (Assume), before it is persisted, so the
//     next decision counts it without reading anything; what it releases keeps counting
//     until it is persisted (Change.Commit), so no decision uses capacity that a failed
//     write would give back;
//   - a decision that fails to persist is forgotten (Change.Undo), and the crawler is
//     decided again;
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
	// onNode indexes entries by node, for predictions on one node.
	onNode map[string]map[string]*entry
	// gen counts the changes to the reservations (not to whether they are assumed): a
	// planner built at one generation holds the ledger's reservations while it lasts.
	gen uint64
	// seq numbers the holdovers of changes (HoldoverKey).
	seq uint64
}

type entry struct {
	res placement.Resident
	// assumed is set from a decision or the build until the cache shows the same
	// reservation.
	assumed bool
	// gone marks a reservation this process released (Assume's drop) until the cache
	// shows it released: it holds nothing, and a stale copy does not bring it back.
	gone bool
}

// New is a ledger not yet built: it observes nothing until Build.
func New() *Ledger { return &Ledger{} }

// Built says whether Build has run.
func (l *Ledger) Built() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.built
}

// Build replaces the ledger's contents with residents, read from the API server when the
// process becomes leader. Each is assumed until the cache shows it: a cache started
// before this process led may not have seen the last leader's writes yet.
func (l *Ledger) Build(residents []placement.Resident) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = make(map[string]*entry, len(residents))
	l.onNode = map[string]map[string]*entry{}
	l.gen++
	for _, r := range residents {
		l.set(&entry{res: r, assumed: true})
	}
	l.built = true
}

// set puts e in the ledger, in place of the crawler's entry if any. Called with l.mu held.
func (l *Ledger) set(e *entry) {
	if old, ok := l.entries[e.res.Key]; !ok || old.gone != e.gone || !reflect.DeepEqual(old.res, e.res) {
		l.gen++
	}
	l.remove(e.res.Key)
	l.entries[e.res.Key] = e
	if e.gone {
		return
	}
	if l.onNode[e.res.Node] == nil {
		l.onNode[e.res.Node] = map[string]*entry{}
	}
	l.onNode[e.res.Node][e.res.Key] = e
}

// unset removes the crawler key's entry, and says the node whose reservation that
// released ("" for none). Called with l.mu held.
func (l *Ledger) unset(key string) (released string) {
	if e, ok := l.entries[key]; ok && !e.gone {
		l.gen++
		released = e.res.Node
	}
	l.remove(key)
	return released
}

func (l *Ledger) remove(key string) {
	if e, ok := l.entries[key]; ok {
		if e.gone {
			delete(l.entries, key)
			return
		}
		delete(l.onNode[e.res.Node], key)
		if len(l.onNode[e.res.Node]) == 0 {
			delete(l.onNode, e.res.Node)
		}
		delete(l.entries, key)
	}
}

// ResidentsOn are the reservations on node, in key order: what a prediction on that
// node needs, at the cost of what the node holds.
func (l *Ledger) ResidentsOn(node string) []placement.Resident {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]placement.Resident, 0, len(l.onNode[node]))
	for _, e := range l.onNode[node] {
		out = append(out, e.res)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Residents are the reservations in the ledger, in key order.
func (l *Ledger) Residents() []placement.Resident {
	rs, _ := l.Snapshot()
	return rs
}

// Snapshot is Residents with the generation they are of (see Gen).
func (l *Ledger) Snapshot() ([]placement.Resident, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]placement.Resident, 0, len(l.entries))
	for _, e := range l.entries {
		if !e.gone {
			out = append(out, e.res)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, l.gen
}

// Gen is the ledger's generation: it changes whenever a reservation does.
func (l *Ledger) Gen() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

// Change is a decision assumed into the ledger and not yet known to be persisted. What it
// releases (a crawler's previous reservation, where the decision takes it elsewhere or
// makes it smaller, and the keys it drops) keeps counting until Commit: another decision
// taken before the write lands never uses capacity that the write may yet fail to free.
type Change struct {
	l        *Ledger
	before   map[string]was
	holdover []string
	// released are the nodes of the holdovers.
	released []string
	done     bool
}

// Released are the nodes where the change releases something (what it holds over until
// Commit): a crawler that waited for one of them may fit once it is committed.
func (c *Change) Released() []string { return c.released }

// was is what a key held before a change: its entry, or none.
type was struct {
	e   *entry
	had bool
}

// Commit says that the change was persisted: what it released stops counting.
func (c *Change) Commit() { c.end(false) }

// Undo says that the change failed to persist: the keys it touched hold again what they
// held before it.
func (c *Change) Undo() { c.end(true) }

// end ends the change once: what it released stops counting under its holdover keys,
// and, undone, the keys it touched hold what they held before it.
func (c *Change) end(undo bool) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.done {
		return
	}
	c.done = true
	for _, k := range c.holdover {
		c.l.unset(k)
	}
	if !undo {
		return
	}
	for key, w := range c.before {
		if w.had {
			c.l.set(w.e)
		} else {
			c.l.unset(key)
		}
	}
}

// Unchanged is the change of a decision that changed no reservation: committing or
// undoing it does nothing.
func (l *Ledger) Unchanged() *Change { return &Change{l: l, done: true} }

// HoldoverKey is the key under which a change keeps counting a reservation it releases
// until it is persisted (Change); seq tells the changes of one key apart.
func HoldoverKey(key string, seq uint64) string {
	return fmt.Sprintf("%s (releasing %d)", key, seq)
}

// AssumeAt is Assume for a planner that holds the ledger at generation gen and has just
// committed rs: it returns the new generation, and whether rs was the only change since
// gen (the planner still holds the ledger exactly: nothing else changed it, the change
// holds nothing over and drops nothing).
func (l *Ledger) AssumeAt(rs []placement.Resident, drop []string, gen uint64) (c *Change, next uint64, exact bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	exact = l.gen == gen
	c = l.assume(rs, drop)
	// An unchanged reservation leaves the generation as it was.
	return c, l.gen, exact && len(c.holdover) == 0 && len(drop) == 0
}

// Assume records decision rs, each for its key, and releases the keys of drop (a
// crawler's decision that holds two nodes while it moves, or releases one when the move
// ends). It returns the change, to Commit once persisted or Undo when that failed.
func (l *Ledger) Assume(rs []placement.Resident, drop []string) *Change {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.assume(rs, drop)
}

// assume is Assume, called with l.mu held.
func (l *Ledger) assume(rs []placement.Resident, drop []string) *Change {
	c := &Change{l: l, before: map[string]was{}}
	keep := func(key string) {
		if _, ok := c.before[key]; ok {
			return
		}
		e, had := l.entries[key]
		c.before[key] = was{e, had}
		if !had || e.gone || covered(e.res, rs) {
			return
		}
		// Released by this change: it counts under a key of its own until the change
		// is persisted.
		l.seq++
		h := e.res
		h.Key = HoldoverKey(key, l.seq)
		h.Workload.Key = h.Key
		l.set(&entry{res: h, assumed: true})
		c.holdover = append(c.holdover, h.Key)
		if !slices.Contains(c.released, h.Node) {
			c.released = append(c.released, h.Node)
		}
	}
	for _, r := range rs {
		keep(r.Key)
	}
	for _, key := range drop {
		keep(key)
	}
	for _, r := range rs {
		l.set(&entry{res: r, assumed: true})
	}
	for _, key := range drop {
		if e, ok := l.entries[key]; ok && !e.gone {
			l.set(&entry{res: placement.Resident{Key: key}, assumed: true, gone: true})
		}
	}
	return c
}

// covered says whether one of rs holds the same resources on the same node as r.
func covered(r placement.Resident, rs []placement.Resident) bool {
	for _, o := range rs {
		if sameReservation(r, o) {
			return true
		}
	}
	return false
}

// Assumed says whether the crawler key holds a reservation the cache has not shown yet:
// its cached copy is older than this process's last decision for it.
func (l *Ledger) Assumed(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[key]
	return ok && e.assumed && !e.gone
}

// Releasing says whether this process released the crawler key's reservation and the
// cache has not shown the release yet: a copy from the cache that still holds it is
// behind, and nothing may be done on it (its VM pinned to the node again, say).
func (l *Ledger) Releasing(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[key]
	return ok && e.gone
}

// Observe takes in what the informer cache shows of the crawler key: its reservation, or
// nil when it holds none. An assumed reservation is confirmed when the cache shows the
// same node and size, and kept otherwise (the cache is behind); a confirmed one follows
// the cache. It reports whether it took in a reservation this process did not decide (a
// new one, or another node or size): one written by another replica, or by hand, which no
// decision of this process has counted; and the node whose reservation the cache's copy
// released ("" for none).
func (l *Ledger) Observe(key string, res *placement.Resident) (foreign bool, released string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.built {
		return false, ""
	}
	e, ok := l.entries[key]
	switch {
	case ok && e.gone:
		if res == nil {
			l.remove(key) // the cache shows it released
		}
		// Otherwise the cache has not caught up with the release yet.
	case ok && e.assumed && (res == nil || !sameReservation(e.res, *res)):
		// The cache has not caught up with the decision yet.
	case res == nil:
		released = l.unset(key)
	default:
		foreign = !ok || !sameReservation(e.res, *res)
		if ok && !e.gone && e.res.Node != res.Node {
			released = e.res.Node
		}
		l.set(&entry{res: *res})
	}
	return foreign, released
}

// Remove releases the reservation of a crawler that is gone, and says the node it was
// on ("" for none).
func (l *Ledger) Remove(key string) (released string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unset(key)
}

// sameReservation says whether a and b hold the same resources on the same node.
func sameReservation(a, b placement.Resident) bool {
	return a.Node == b.Node && a.Sizing == b.Sizing
}
