package controllers

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/ledger"
	"isochron.io/isochron/internal/nodebooks"
	"isochron.io/isochron/internal/placement"
)

// pendingQueue holds the crawlers waiting for a placement decision. Decisions are taken in
// batches, as kube-scheduler takes pods from its queue: a worker that needs a decision
// queues its crawler and takes the decision lock; whoever holds the lock next decides
// every crawler queued by then, in a deterministic order (oldest first, then by key), on
// one reading of the cluster and one planner, each decision counting the ones before
// it. The planner is kept from batch to batch while it holds exactly what the ledger and
// the nodes hold (plannerFor). So N crawlers arriving at once cost one inventory and N searches, not N of each;
// and a worker finds its decision taken when it gets the lock, or takes it.
type pendingQueue struct {
	mu      sync.Mutex
	waiting []*placeRequest
}

// placeRequest is one crawler's turn in a batch, and its outcome (see placer.Decide).
type placeRequest struct {
	cvm *isov1.CrawlerVM
	// req is the crawler's placement request, read before the lock is taken.
	req placement.Request
	// record turns the decision into the crawler's status; it returns whether the
	// reconcile is done.
	record func(placement.Decision) bool
	reply  chan placeReply
}

type placeReply struct {
	done bool
	// change is the decision assumed into the ledger (nil when none was taken), to commit
	// once persisted or undo when that failed.
	change *ledger.Change
	err    error
}

func (q *pendingQueue) add(p *placeRequest) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waiting = append(q.waiting, p)
}

// take empties the queue and returns what it held, oldest crawler first.
func (q *pendingQueue) take() []*placeRequest {
	q.mu.Lock()
	batch := q.waiting
	q.waiting = nil
	q.mu.Unlock()
	sort.SliceStable(batch, func(i, j int) bool { return placeBefore(batch[i].cvm, batch[j].cvm) })
	return batch
}

// placeBefore is the queue's order: by creation, then by namespace/name.
func placeBefore(a, b *isov1.CrawlerVM) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// placer is the operator's scheduler, out of the reconciler (Kueue's Scheduler,
// kube-scheduler's cache in its own type): it owns the reservation ledger, the decision
// lock, the queue of crawlers waiting for a decision, the planner kept between batches and
// the kept node inventory, and every route that changes a reservation goes through it:
// Decide (a placement), Move (a move) and Settle (the end of a move). The reconciler
// turns its decisions into status, Events and metrics, and persists them after the lock
// is released: the decision lock is never held across a call to the API server. What a
// decision releases counts in the ledger until its write lands (ledger.Change).
type placer struct {
	// cache reads Nodes, pods, profiles and calibrations; api reads the crawlers'
	// reservations from the API server when the ledger is built.
	cache, api client.Reader
	clock      clock.PassiveClock
	// request is a crawler's placement request, with what its pod holds beyond its spec
	// (CrawlerVMReconciler.request); it reads the cache, and is called before the lock is
	// taken.
	request func(context.Context, *isov1.CrawlerVM) placement.Request
	// batchSize and decisionTime observe each batch and decision.
	batchSize, decisionTime func(float64)
	// books are what the pods bound to each node hold.
	books *nodebooks.Books

	// ledger holds every crawler's reservation; decisions read it, not the API server,
	// and assume their own into it the moment they are made (ledger.Ledger).
	ledger *ledger.Ledger
	// build serialises building the ledger (a list from the API server), outside the
	// decision lock.
	build sync.Mutex
	// decide serialises decisions: each one reads the ledger, with every decision
	// before it, and assumes its own before the next one starts. It is only ever held
	// over memory: no call to the API server, no wait on anything but the ledger.
	decide timedMutex
	// pending are the crawlers waiting for the next batch of decisions.
	pending pendingQueue
	// kept is the planner kept across batches (plannerFor); guarded by decide.
	kept *plannedLedger
	// nodes keeps gatherNodes' inventory while nothing it reads changes.
	nodes nodesMemo
	// overbooked are the reservations to re-decide on nodes that hold more than they
	// have (checkOverbooking).
	overbooked overbookings
	// released wakes the waiting crawlers a node can help, once a decision's release of
	// something there is persisted.
	released func(node string)
}

// Decide decides where the crawler goes, in a batch with every crawler queued at the same
// time (pendingQueue): record turns the decision into cvm's status (under the lock, so
// that the reservations the status then holds are assumed into the ledger before the next
// decision). It returns whether the reconcile is done, and the change the decision made to
// the ledger, to commit once the status is persisted or undo when that fails; a nil change
// means no decision was taken: this process's last decision for the crawler has not
// reached the cache yet, whose update brings the crawler back.
func (p *placer) Decide(ctx context.Context, cvm *isov1.CrawlerVM, record func(placement.Decision) bool) (done bool, change *ledger.Change, err error) {
	if err := p.ensureLedger(ctx); err != nil {
		return true, nil, err
	}
	req := &placeRequest{cvm: cvm, req: p.request(ctx, cvm), record: record, reply: make(chan placeReply, 1)}
	p.pending.add(req)
	p.decide.Lock(p.clock.Now())
	if batch := p.pending.take(); len(batch) > 0 {
		p.decideBatch(ctx, batch)
	}
	p.decide.Unlock()
	rep := <-req.reply // filled by this batch or an earlier one
	return rep.done, rep.change, rep.err
}

// decideBatch decides each request of batch in order, on one reading of the cluster.
// Called with p.decide held; it replies to every request. It reads the informer cache
// (memory: its informers are synced before any reconcile runs) and the ledger only.
func (p *placer) decideBatch(ctx context.Context, batch []*placeRequest) {
	fail := func(err error) {
		for _, q := range batch {
			q.reply <- placeReply{done: true, err: err}
		}
	}
	inv, err := p.gatherNodes(ctx)
	if err != nil {
		fail(err)
		return
	}
	kept := p.plannerFor(inv)
	p.batchSize(float64(len(batch)))
	for _, q := range batch {
		cvm := q.cvm
		if p.ledger.Assumed(cvm.Namespace + "/" + cvm.Name) {
			// The cache's copy predates a decision for it (never place a crawler twice).
			q.reply <- placeReply{done: true}
			continue
		}
		if p.kept != kept {
			// The last decision found the ledger changed by something else: decide the
			// rest of the batch on a planner built afresh.
			kept = p.plannerFor(inv)
		}
		began := p.clock.Now()
		d := kept.planner.Place(q.req)
		kept.planner.Commit(q.req, d)
		p.decisionTime(p.clock.Since(began).Seconds())
		done := q.record(d)
		if !d.Placed() {
			q.reply <- placeReply{done: done, change: p.ledger.Unchanged()} // the reservation is unchanged
			continue
		}
		q.reply <- placeReply{done: done, change: p.assume(cvm, kept)}
	}
}

// assume takes into the ledger the reservations cvm's status now holds, which the kept
// planner has committed (and, for a crawler that moves, the one it keeps on the node it
// leaves), and returns the change.
func (p *placer) assume(cvm *isov1.CrawlerVM, kept *plannedLedger) *ledger.Change {
	change, gen, exact := p.ledger.AssumeAt(inventory.Residents(cvm), kept.gen)
	if exact {
		kept.gen = gen // the kept planner committed the same decision
	} else {
		p.kept = nil // something else changed the ledger meanwhile: build afresh
	}
	return change
}

// Move decides a move of the crawler: req (its avoided nodes, its size kept) placed on the
// ledger under the decision lock. When a node fits, apply records the move in cvm's status
// and the ledger assumes both of its reservations; persist then writes the status, after
// the lock is released (its failure forgets them). A crawler whose last decision has not
// reached the cache is not decided: the decision has an empty Reason, as callers take it.
func (p *placer) Move(ctx context.Context, cvm *isov1.CrawlerVM, req placement.Request, apply func(placement.Decision), persist func() error) (placement.Decision, error) {
	if err := p.ensureLedger(ctx); err != nil {
		return placement.Decision{}, err
	}
	d, change, err := p.decideMove(ctx, cvm, req, apply)
	if err != nil || change == nil {
		return d, err
	}
	return d, p.persist(change, persist)
}

// decideMove is Move's decision, under the decision lock; a nil change when it decided
// nothing.
func (p *placer) decideMove(ctx context.Context, cvm *isov1.CrawlerVM, req placement.Request, apply func(placement.Decision)) (placement.Decision, *ledger.Change, error) {
	p.decide.Lock(p.clock.Now())
	defer p.decide.Unlock()
	if p.ledger.Assumed(cvm.Namespace + "/" + cvm.Name) {
		return placement.Decision{}, nil, nil // no decision (an empty Reason says so): one for it is on its way
	}
	inv, err := p.gather(ctx)
	if err != nil {
		return placement.Decision{}, nil, err
	}
	d := placement.NewPlanner(inv.nodes, inv.residents).Place(req)
	if !d.Placed() {
		return d, nil, nil
	}
	apply(d)
	return d, p.ledger.Assume(inventory.Residents(cvm), nil), nil
}

// Settle ends a move: the ledger assumes the reservation cvm's status now holds and
// releases the one it kept on the node it left (drop) under the decision lock, and
// persist writes the status after it is released; the node left keeps counting until the
// write lands. predict, when set, refreshes the crawler's prediction on the node it holds
// from the settled ledger first.
func (p *placer) Settle(ctx context.Context, cvm *isov1.CrawlerVM, predict func(*clusterInventory), persist func() error) error {
	key := cvm.Namespace + "/" + cvm.Name
	p.decide.Lock(p.clock.Now())
	change := p.ledger.Assume(inventory.Residents(cvm), []string{inventory.LeavingKey(key)})
	if node := cvm.Status.Placement.Node; predict != nil {
		if inv, err := p.gatherNode(ctx, node); err == nil && inv.hasNode(node) {
			predict(inv)
		}
	}
	p.decide.Unlock()
	return p.persist(change, persist)
}

// persist writes a change assumed into the ledger (outside the decision lock), then
// commits it, or undoes it when the write failed. What a committed change released
// (the node a move left, a crawler's previous node) wakes the waiting crawlers those
// nodes can help: one decided while it still counted would wait for nothing else.
func (p *placer) persist(change *ledger.Change, write func() error) error {
	if err := write(); err != nil {
		change.Undo()
		return err
	}
	change.Commit()
	p.wakeReleased(change.Released()...)
	return nil
}

// Forget releases the reservations of a crawler that is gone, and wakes the waiting
// crawlers their nodes can help: the ones its deletion woke may have been decided before
// this released it (seen: a crawler that waited for a deleted one's node waited on).
func (p *placer) Forget(key string) {
	p.wakeReleased(p.ledger.Remove(key), p.ledger.Remove(inventory.LeavingKey(key)))
}

// timedMutex is a mutex that tells how long it has been held (the liveness check).
type timedMutex struct {
	mu sync.Mutex
	// since is when the holder took it, zero when free; read without mu.
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
