// Package placer is isochron's scheduler, out of the reconciler (Kueue's pkg/scheduler,
// kube-scheduler's cache): the one door through which every reservation changes. It owns
// the reservation ledger, the decision lock, the batch queue, the planner kept between
// batches, the kept node inventory and the overbooking marks.
//
// The protocol, for every change of a reservation (a placement, a move, a release, a drop,
// the end of a move): the reconciler builds a Request once per reconcile and hands it to
// Reserve; the placer decides under its lock, assumes the result into the ledger at once
// (the next decision counts it) and returns it as a Reservation; the reconciler records it
// in the crawler's status and writes it, then commits the reservation, or undoes it when
// the write failed. The placer never writes to the API server, and never calls back into
// the reconciler: what a decision becomes is computed here, from the request.
package placer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/ledger"
	"isochron.io/isochron/internal/nodebooks"
)

// Options are what a Placer is built with; every field may be left zero.
type Options struct {
	// Clock tells when the decision lock was taken (DecidingSince); the real clock when nil.
	Clock clock.PassiveClock
	// Books are what the pods bound to each node hold; empty books when nil.
	Books *nodebooks.Books
	// Informers are the manager's cache's: while the stores of Nodes, ContentionProfiles
	// and NodeCalibrations and the books are unchanged, a batch reuses the node inventory it
	// built last (nodesMemo). Nil keeps nothing.
	Informers cache.Informers
	// BatchSize and DecisionTime observe each batch's size and each decision's time.
	BatchSize, DecisionTime func(float64)
	// Released wakes the crawlers waiting for a node that a committed change released
	// something on, or that the cache shows released.
	Released func(node string)
	// Overbooked asks for a reconcile of a crawler whose reservation overbooks its node
	// (Admission.Overbooked then says why).
	Overbooked func(crawler types.NamespacedName)
}

// Placer decides where crawlers go and holds their reservations: one per manager, used
// by the leader's reconcile workers at once.
type Placer struct {
	// cache reads Nodes, pods, profiles, calibrations and crawlers; api reads the crawlers'
	// reservations from the API server when the ledger is built.
	cache, api client.Reader
	opts       Options

	// ledger holds every crawler's reservation; decisions read it, not the API server, and
	// assume their own into it the moment they are made.
	ledger *ledger.Ledger
	// build serialises building the ledger (a list from the API server), outside the
	// decision lock.
	build sync.Mutex
	// decide serialises decisions and changes: each one reads the ledger, with every one
	// before it, and assumes its own before the next starts. It is only ever held over
	// memory: no call to the API server, no wait on anything but the ledger.
	decide timedMutex
	// pending are the requests waiting for the next batch of decisions.
	pending queue
	// kept is the planner kept across batches (plannerFor); guarded by decide.
	kept *plannedLedger
	// nodes keeps gatherNodes' inventory while nothing it reads changes.
	nodes     nodesMemo
	nodesOnce sync.Once
	// overbooked are the reservations to re-decide on nodes that hold more than they have.
	overbooked overbookings
}

// New is a placer that reads the informer cache and, to build its ledger, the API server.
func New(cache, api client.Reader, opts Options) *Placer {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Books == nil {
		opts.Books = nodebooks.New()
	}
	for _, f := range []*func(float64){&opts.BatchSize, &opts.DecisionTime} {
		if *f == nil {
			*f = func(float64) {}
		}
	}
	p := &Placer{cache: cache, api: api, opts: opts, ledger: ledger.New()}
	p.overbooked.wake = opts.Overbooked
	return p
}

// Admission is what the placer says of the cache's copy of a crawler, before a reconcile
// acts on it.
type Admission struct {
	// Behind is set when the copy predates a change of the crawler's reservation that this
	// process made and the cache has not shown yet: a decision (the ledger assumes it) or a
	// release. Nothing may be done on it (a decision taken again, its VM pinned to the node
	// released, a status written that the API server would refuse as a conflict); the
	// cache's update, which changes the reservation, brings the crawler back.
	Behind bool
	// Overbooked says why the crawler's reservation must leave its node: the node holds more
	// than it has, and this is its youngest reservation ("" otherwise). A committed change
	// of the crawler's reservation clears it.
	Overbooked string
}

// Admit takes in the cache's copy of a crawler at the start of a reconcile. The first
// call builds the ledger from the API server (the leader's first reconcile: before the
// cache's copy is taken in, since the ledger assumes every reservation it is built with
// until the cache shows it); every call observes the copy's reservations, and checks the
// nodes for overbooking when the copy holds one this process did not decide.
func (p *Placer) Admit(ctx context.Context, cvm *isov1.CrawlerVM) (Admission, error) {
	if err := p.ensureLedger(ctx); err != nil {
		return Admission{}, err
	}
	if p.observe(cvm) {
		p.recheck(ctx)
	}
	key := keyOf(cvm)
	a := Admission{Behind: p.ledger.Assumed(key) || (cvm.Status.Placement != nil && p.ledger.Releasing(key))}
	if why, ok := p.overbooked.get(key); ok {
		if _, held := inventory.Resident(cvm); !held || cvm.Status.Move != nil {
			p.overbooked.clear(key) // released already, or moving: the move's end settles it
		} else {
			a.Overbooked = why
		}
	}
	return a, nil
}

// Forget releases the reservations of a crawler that is gone, and wakes the crawlers
// waiting for their nodes: those its deletion woke may have been decided before this
// released it.
func (p *Placer) Forget(key string) {
	p.wake(p.ledger.Remove(key), p.ledger.Remove(inventory.LeavingKey(key)))
	p.overbooked.clear(key)
}

// DecidingSince is when the decision lock was taken, false when it is free: the liveness
// check fails while it is held far longer than any decision takes.
func (p *Placer) DecidingSince() (time.Time, bool) { return p.decide.HeldSince() }

// observe takes in the cache's copy of a crawler: its reservation, or none, and the one it
// keeps on the node it leaves while it moves. It reports whether it took in a reservation
// this process did not decide (ledger.Observe). What the copy released wakes the crawlers
// waiting for its node: those the crawler's update woke may have been decided before the
// ledger knew.
func (p *Placer) observe(cvm *isov1.CrawlerVM) (foreign bool) {
	key := keyOf(cvm)
	var released [2]string
	if res, ok := inventory.Resident(cvm); ok {
		foreign, released[0] = p.ledger.Observe(key, &res)
	} else {
		_, released[0] = p.ledger.Observe(key, nil)
	}
	if res, ok := inventory.Leaving(cvm); ok {
		var f bool
		f, released[1] = p.ledger.Observe(res.Key, &res)
		foreign = f || foreign
	} else {
		_, released[1] = p.ledger.Observe(inventory.LeavingKey(key), nil)
	}
	p.wake(released[:]...)
	return foreign
}

// wake wakes the crawlers waiting for the nodes named ("" names none).
func (p *Placer) wake(nodes ...string) {
	if p.opts.Released == nil {
		return
	}
	for _, n := range nodes {
		if n != "" {
			p.opts.Released(n)
		}
	}
}

func keyOf(cvm *isov1.CrawlerVM) string { return cvm.Namespace + "/" + cvm.Name }

// timedMutex is a mutex that tells how long it has been held (the liveness check).
type timedMutex struct {
	mu sync.Mutex
	// since is when the holder took it, nil when free; read without mu.
	since atomic.Pointer[time.Time]
}

// Lock takes the mutex at now.
func (m *timedMutex) Lock(now time.Time) {
	m.mu.Lock()
	m.since.Store(&now)
}

// Unlock releases it.
func (m *timedMutex) Unlock() {
	m.since.Store(nil)
	m.mu.Unlock()
}

// HeldSince is when the current holder took the mutex; false when it is free.
func (m *timedMutex) HeldSince() (time.Time, bool) {
	if t := m.since.Load(); t != nil {
		return *t, true
	}
	return time.Time{}, false
}
