package controllers

import (
	"context"
	"sort"
	"sync"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
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

// placeRequest is one crawler's turn in a batch, and its outcome (see decidePlacement).
type placeRequest struct {
	cvm   *isov1.CrawlerVM
	reply chan placeReply
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

// decidePlacement decides where the crawler goes and writes the decision into cvm's
// status and the ledger, in a batch with every crawler queued at the same time (see
// pendingQueue). It returns whether the reconcile is done (nothing held), and the undo
// that forgets the decision from the ledger; a nil undo means no decision was taken:
// this process's last decision for the crawler has not reached the cache yet, whose
// update brings the crawler back.
func (r *CrawlerVMReconciler) decidePlacement(ctx context.Context, cvm *isov1.CrawlerVM) (done bool, undo func(), err error) {
	req := &placeRequest{cvm: cvm, reply: make(chan placeReply, 1)}
	r.pending.add(req)
	r.decide.Lock()
	if batch := r.pending.take(); len(batch) > 0 {
		r.decideBatch(ctx, batch)
	}
	r.decide.Unlock()
	rep := <-req.reply // filled by this batch or an earlier one
	return rep.done, rep.undo, rep.err
}

// decideBatch decides each request of batch in order, on one reading of the cluster.
// Called with r.decide held; it replies to every request.
func (r *CrawlerVMReconciler) decideBatch(ctx context.Context, batch []*placeRequest) {
	fail := func(err error) {
		for _, q := range batch {
			q.reply <- placeReply{done: true, err: err}
		}
	}
	if err := r.buildLedger(ctx); err != nil {
		fail(err)
		return
	}
	inv, err := r.gatherNodes(ctx)
	if err != nil {
		fail(err)
		return
	}
	kept := r.plannerFor(inv)
	r.metrics.placementBatch.Observe(float64(len(batch)))
	for _, q := range batch {
		cvm := q.cvm
		if r.ledger.Assumed(cvm.Namespace + "/" + cvm.Name) {
			// The cache's copy predates a decision for it (never place a crawler twice).
			q.reply <- placeReply{done: true}
			continue
		}
		if r.kept != kept {
			// The last decision found the ledger changed by something else: decide the
			// rest of the batch on a planner built afresh.
			kept = r.plannerFor(inv)
		}
		began := r.clock.Now()
		req := inventory.Request(cvm, r.vfio(ctx, cvm))
		d := kept.planner.Place(req)
		kept.planner.Commit(req, d)
		r.metrics.placementDuration.Observe(r.clock.Since(began).Seconds())
		done, undo := r.recordDecision(cvm, d, kept)
		q.reply <- placeReply{done: done, undo: undo}
	}
}
