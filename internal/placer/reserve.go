package placer

import (
	"context"
	"sort"
	"sync"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/ledger"
	"isochron.io/isochron/internal/placement"
)

// Request is one change of a crawler's reservation, built once per reconcile. With Decide
// the model decides where the crawler goes; without it, the crawler keeps its reservation
// on node Keep only, or releases it.
type Request struct {
	// Crawler is the crawler as the reconcile read it: its key, its creation (a batch
	// decides the oldest first) and the reservation its status holds now.
	Crawler *isov1.CrawlerVM
	// Decide, when set, is what the model places: a new spec, a move (its avoided nodes,
	// its size kept) or a re-decision. Decisions are taken in batches, on one reading of the
	// cluster, each counting the ones before it.
	Decide *placement.Request
	// Leaving is the node a VM of the crawler runs on while it moves: when the decision
	// takes the crawler elsewhere, that node stays reserved for it until the move ends.
	Leaving string
	// OrDrop releases the crawler's reservation when no node fits it.
	OrDrop bool
	// Keep, without Decide, is the one node the crawler keeps (a move's end: the node it
	// runs on, the other released); empty, its reservation is released.
	Keep string
}

// after is what the crawler holds once d is assumed: the reservations it then holds, and
// the keys it releases; nil and nil when nothing changes.
func (r Request) after(d placement.Decision) (holds []placement.Resident, drops []string) {
	key := keyOf(r.Crawler)
	switch {
	case r.Decide != nil && d.Placed():
		res := placement.ResidentOf(*r.Decide, d)
		if r.Leaving == "" || r.Leaving == d.Node {
			return []placement.Resident{res}, nil
		}
		leaving := res
		leaving.Key, leaving.Node = inventory.LeavingKey(key), r.Leaving
		leaving.Workload.Key = leaving.Key
		return []placement.Resident{res, leaving}, nil
	case r.Decide != nil && !r.OrDrop:
		return nil, nil // nothing fits: the reservation held stays
	case r.Decide == nil && r.Keep != "":
		held, ok := inventory.Resident(r.Crawler)
		if !ok {
			return nil, nil
		}
		held.Node = r.Keep
		return []placement.Resident{held}, []string{inventory.LeavingKey(key)}
	}
	return nil, []string{key, inventory.LeavingKey(key)}
}

// Reservation is what Reserve did: the decision, and the change assumed into the ledger,
// which Commit or Undo ends.
type Reservation struct {
	// Decision is the model's decision (zero for a request without Decide).
	Decision placement.Decision
	// Taken is false when nothing was decided: this process's last decision for the
	// crawler has not reached the cache yet, and the cache's update brings it back.
	Taken bool

	p      *Placer
	key    string
	change *ledger.Change
}

// Changed says whether the reservation changed: its status must then be written before
// anything is done on it, and Commit or Undo called.
func (r Reservation) Changed() bool { return r.change != nil }

// Commit says the change was persisted: what it released stops counting and wakes the
// crawlers waiting for those nodes, and an overbooking mark of the crawler is cleared.
func (r Reservation) Commit() {
	if r.change == nil {
		return
	}
	r.change.Commit()
	r.p.overbooked.clear(r.key)
	r.p.wake(r.change.Released()...)
}

// Undo says the change failed to persist: the crawler holds again what it held before.
func (r Reservation) Undo() {
	if r.change != nil {
		r.change.Undo()
	}
}

// Reserve decides req under the decision lock and assumes the result into the ledger.
// A request with Decide joins the batch of every request queued by then (oldest crawler
// first), decided by whoever takes the lock next; a crawler whose last decision has not
// reached the cache is not decided again (Taken false). The lock is never held across a
// call to the API server: what a change releases keeps counting until it is committed.
func (p *Placer) Reserve(ctx context.Context, req Request) (Reservation, error) {
	if err := p.ensureLedger(ctx); err != nil {
		return Reservation{}, err
	}
	if req.Decide == nil {
		p.decide.Lock(p.opts.Clock.Now())
		defer p.decide.Unlock()
		return p.assume(req, placement.Decision{}, nil), nil
	}
	q := &queued{req: req, reply: make(chan reply, 1)}
	p.pending.add(q)
	p.decide.Lock(p.opts.Clock.Now())
	if batch := p.pending.take(); len(batch) > 0 {
		p.decideBatch(ctx, batch)
	}
	p.decide.Unlock()
	rep := <-q.reply // filled by this batch or an earlier one
	return rep.res, rep.err
}

// decideBatch decides each request of batch in order, on one reading of the nodes and one
// planner. Called with the decision lock held; it replies to every request. It reads the
// informer cache (memory) and the ledger only.
func (p *Placer) decideBatch(ctx context.Context, batch []*queued) {
	inv, err := p.gatherNodes(ctx)
	if err != nil {
		for _, q := range batch {
			q.reply <- reply{err: err}
		}
		return
	}
	kept := p.plannerFor(inv)
	p.opts.BatchSize(float64(len(batch)))
	for _, q := range batch {
		if p.ledger.Assumed(keyOf(q.req.Crawler)) {
			// The cache's copy predates a decision for it: never decide a crawler twice.
			q.reply <- reply{}
			continue
		}
		if p.kept != kept {
			// The last decision changed the ledger in a way the planner does not hold:
			// decide the rest of the batch on a planner built afresh.
			kept = p.plannerFor(inv)
		}
		began := p.opts.Clock.Now()
		d := kept.planner.Place(*q.req.Decide)
		kept.planner.Commit(*q.req.Decide, d)
		p.opts.DecisionTime(p.opts.Clock.Since(began).Seconds())
		q.reply <- reply{res: p.assume(q.req, d, kept)}
	}
}

// assume takes into the ledger what the crawler holds after d (Request.after); kept is
// the planner d was taken on, which keeps its place while it holds exactly the ledger.
// Called with the decision lock held.
func (p *Placer) assume(req Request, d placement.Decision, kept *plannedLedger) Reservation {
	res := Reservation{Decision: d, Taken: true, p: p, key: keyOf(req.Crawler)}
	holds, drops := req.after(d)
	switch {
	case holds == nil && drops == nil:
	case kept == nil:
		res.change = p.ledger.Assume(holds, drops)
	default:
		change, gen, exact := p.ledger.AssumeAt(holds, drops, kept.gen)
		// The planner committed the crawler's reservation only: one that also holds the
		// node its VM leaves is more than the planner holds.
		if exact && len(holds) == 1 {
			kept.gen = gen // the kept planner committed the same decision
		} else {
			p.kept = nil // it does not hold what the ledger holds now: build afresh
		}
		res.change = change
	}
	return res
}

// queue holds the requests waiting for a decision. A worker that needs one queues its
// request and takes the decision lock; whoever holds the lock next decides every request
// queued by then, in a deterministic order, on one reading of the cluster and one planner.
// So N crawlers arriving at once cost one inventory and N searches, not N of each.
type queue struct {
	mu      sync.Mutex
	waiting []*queued
}

// queued is one request's turn in a batch, and where its outcome goes.
type queued struct {
	req   Request
	reply chan reply
}

type reply struct {
	res Reservation
	err error
}

func (q *queue) add(r *queued) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waiting = append(q.waiting, r)
}

// take empties the queue and returns what it held, oldest crawler first.
func (q *queue) take() []*queued {
	q.mu.Lock()
	batch := q.waiting
	q.waiting = nil
	q.mu.Unlock()
	sort.SliceStable(batch, func(i, j int) bool { return before(batch[i].req.Crawler, batch[j].req.Crawler) })
	return batch
}

// before is the queue's order: by creation, then by namespace/name.
func before(a, b *isov1.CrawlerVM) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}
