package controllers

import (
	"context"
	"sort"
	"sync"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/ledger"
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
	// record turns the decision into the crawler's status; it returns whether the
	// reconcile is done.
	record func(placement.Decision) bool
	reply  chan placeReply
}

type placeReply struct {
	done bool
	undo func()
	err  error
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
// turns its decisions into status, Events and metrics, and persists them under its lock.
type placer struct {
	// cache reads Nodes, pods, profiles and calibrations; api reads the crawlers'
	// reservations from the API server when the ledger is built.
	cache, api client.Reader
	clock      clock.PassiveClock
	// request is a crawler's placement request, with what its pod holds beyond its spec
	// (CrawlerVMReconciler.request).
	request func(context.Context, *isov1.CrawlerVM) placement.Request
	// batchSize and decisionTime observe each batch and decision.
	batchSize, decisionTime func(float64)

	// ledger holds every crawler's reservation; decisions read it, not the API server,
	// and assume their own into it the moment they are made (ledger.Ledger).
	ledger *ledger.Ledger
	// decide serialises decisions: each one reads the ledger, with every decision
	// before it, and assumes its own before the next one starts.
	decide sync.Mutex
	// pending are the crawlers waiting for the next batch of decisions.
	pending pendingQueue
	// kept is the planner kept across batches (plannerFor); guarded by decide.
	kept *plannedLedger
	// nodes keeps gatherNodes' inventory while nothing it reads changes.
	nodes nodesMemo
}

// Decide decides where the crawler goes, in a batch with every crawler queued at the same
// time (pendingQueue): record turns the decision into cvm's status (under the lock, so
// that the reservations the status then holds are assumed into the ledger before the next
// decision). It returns whether the reconcile is done, and the undo that forgets the
// decision from the ledger, for when it fails to persist; a nil undo means no decision was
// taken: this process's last decision for the crawler has not reached the cache yet,
// whose update brings the crawler back.
func (p *placer) Decide(ctx context.Context, cvm *isov1.CrawlerVM, record func(placement.Decision) bool) (done bool, undo func(), err error) {
	req := &placeRequest{cvm: cvm, record: record, reply: make(chan placeReply, 1)}
	p.pending.add(req)
	p.decide.Lock()
	if batch := p.pending.take(); len(batch) > 0 {
		p.decideBatch(ctx, batch)
	}
	p.decide.Unlock()
	rep := <-req.reply // filled by this batch or an earlier one
	return rep.done, rep.undo, rep.err
}

// decideBatch decides each request of batch in order, on one reading of the cluster.
// Called with p.decide held; it replies to every request.
func (p *placer) decideBatch(ctx context.Context, batch []*placeRequest) {
	fail := func(err error) {
		for _, q := range batch {
			q.reply <- placeReply{done: true, err: err}
		}
	}
	if err := p.buildLedger(ctx); err != nil {
		fail(err)
		return
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
		req := p.request(ctx, cvm)
		d := kept.planner.Place(req)
		kept.planner.Commit(req, d)
		p.decisionTime(p.clock.Since(began).Seconds())
		done := q.record(d)
		if !d.Placed() {
			q.reply <- placeReply{done: done, undo: func() {}} // the reservation is unchanged
			continue
		}
		q.reply <- placeReply{done: done, undo: p.assume(cvm, kept)}
	}
}

// assume takes into the ledger the reservations cvm's status now holds, which the kept
// planner has committed (and, for a crawler that moves, the one it keeps on the node it
// leaves), and returns the undo.
func (p *placer) assume(cvm *isov1.CrawlerVM, kept *plannedLedger) func() {
	res, _ := inventory.Resident(cvm)
	undo, gen, exact := p.ledger.AssumeAt(res, kept.gen)
	if leaving, ok := inventory.Leaving(cvm); ok {
		undoLeaving := p.ledger.AssumeAll([]placement.Resident{leaving}, nil)
		undo, exact = func() { undoLeaving(); undo() }, false
	}
	if exact {
		kept.gen = gen // the kept planner committed the same decision
	} else {
		p.kept = nil // something else changed the ledger meanwhile: build afresh
	}
	return undo
}

// Move decides a move of the crawler: req (its avoided nodes, its size kept) placed on the
// ledger under the decision lock. When a node fits, apply records the move in cvm's status,
// the ledger assumes both of its reservations, and persist writes the status before the
// lock is released (its failure forgets them). A crawler whose last decision has not
// reached the cache is not decided (Reason says so).
func (p *placer) Move(ctx context.Context, cvm *isov1.CrawlerVM, req placement.Request, apply func(placement.Decision), persist func() error) (placement.Decision, error) {
	p.decide.Lock()
	defer p.decide.Unlock()
	if err := p.buildLedger(ctx); err != nil {
		return placement.Decision{}, err
	}
	if p.ledger.Assumed(cvm.Namespace + "/" + cvm.Name) {
		return placement.Decision{Reason: "a decision for it is on its way"}, nil
	}
	inv, err := p.gather(ctx)
	if err != nil {
		return placement.Decision{}, err
	}
	d := placement.NewPlanner(inv.nodes, inv.residents).Place(req)
	if !d.Placed() {
		return d, nil
	}
	apply(d)
	undo := p.ledger.AssumeAll(inventory.Residents(cvm), nil)
	if err := persist(); err != nil {
		undo()
		return placement.Decision{}, err
	}
	return d, nil
}

// Settle ends a move: the ledger assumes the reservation cvm's status now holds and
// releases the one it kept on the node it left (drop), before persist writes the status,
// under the decision lock; predict, when set, refreshes the crawler's prediction on the
// node it holds from the settled ledger first.
func (p *placer) Settle(ctx context.Context, cvm *isov1.CrawlerVM, predict func(*clusterInventory), persist func() error) error {
	p.decide.Lock()
	defer p.decide.Unlock()
	key := cvm.Namespace + "/" + cvm.Name
	undo := p.ledger.AssumeAll(inventory.Residents(cvm), []string{inventory.LeavingKey(key)})
	if node := cvm.Status.Placement.Node; predict != nil {
		if inv, err := p.gatherNode(ctx, node); err == nil && inv.hasNode(node) {
			predict(inv)
		}
	}
	if err := persist(); err != nil {
		undo()
		return err
	}
	return nil
}

// Forget releases the reservations of a crawler that is gone.
func (p *placer) Forget(key string) {
	p.ledger.Remove(key)
	p.ledger.Remove(inventory.LeavingKey(key))
}
