package placer

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/placement"
)

// overbookings are the crawlers whose reservations this replica found on a node that
// holds more than it has (checkOverbooking), each with why, until a change of their
// reservation is committed (Reservation.Commit). No decision of a leader overbooks a
// node; a decision written by a replica that had lost its lease can (the leader fence
// refuses it, but only from the moment the API server sees the new holder), and so can a
// person editing status by hand.
type overbookings struct {
	mu  sync.Mutex
	why map[string]string
	// wake queues the crawler for a reconcile.
	wake func(types.NamespacedName)
}

func (o *overbookings) mark(key, why string) {
	o.mu.Lock()
	if o.why == nil {
		o.why = map[string]string{}
	}
	_, had := o.why[key]
	o.why[key] = why
	o.mu.Unlock()
	if !had && o.wake != nil {
		ns, name, _ := strings.Cut(key, "/")
		o.wake(types.NamespacedName{Namespace: ns, Name: name})
	}
}

func (o *overbookings) get(key string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	why, ok := o.why[key]
	return why, ok
}

func (o *overbookings) clear(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.why, key)
}

// youngestFirst are the keys of the crawlers that hold a reservation, the youngest
// reservation first: the one whose Placed condition turned True last, then the one
// created last, then by key. An overbooked node releases them in this order.
func youngestFirst(cvms []isov1.CrawlerVM) []string {
	type held struct {
		key             string
		placed, created time.Time
	}
	var hs []held
	for i := range cvms {
		c := &cvms[i]
		if _, ok := inventory.Resident(c); !ok {
			continue
		}
		h := held{key: keyOf(c), created: c.CreationTimestamp.Time}
		if p := apimeta.FindStatusCondition(c.Status.Conditions, isov1.ConditionPlaced); p != nil {
			h.placed = p.LastTransitionTime.Time
		}
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool {
		a, b := hs[i], hs[j]
		switch {
		case !a.placed.Equal(b.placed):
			return a.placed.After(b.placed)
		case !a.created.Equal(b.created):
			return a.created.After(b.created)
		}
		return a.key > b.key
	})
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.key
	}
	return out
}

// checkOverbooking looks for nodes that hold more than they have in the ledger (with
// what their pods hold), and marks the youngest reservations there to be re-decided
// (placement.Overbooked), cvms being every crawler. Called when the ledger is built (a
// new leader inherits what the last one wrote) and when it takes in a reservation it did
// not decide.
func (p *Placer) checkOverbooking(ctx context.Context, cvms []isov1.CrawlerVM) error {
	inv, err := p.gatherNodes(ctx)
	if err != nil {
		return err
	}
	for _, ob := range placement.Overbooked(inv.nodes, p.ledger.Residents(), youngestFirst(cvms)) {
		for _, key := range ob.Release {
			why := fmt.Sprintf("node %s holds more than it has (%s: reservations written by a manager replica that had lost its lease, or by hand)", ob.Node, ob.Held)
			log.FromContext(ctx).Info("Overbooked node: re-deciding its youngest reservation", "node", ob.Node, "held", ob.Held, "crawler", key)
			p.overbooked.mark(key, why)
		}
	}
	return nil
}

// recheck is checkOverbooking with every crawler from the cache.
func (p *Placer) recheck(ctx context.Context) {
	cvms := &isov1.CrawlerVMList{}
	if err := p.cache.List(ctx, cvms, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Listing crawlers to check for overbooked nodes")
		return
	}
	if err := p.checkOverbooking(ctx, cvms.Items); err != nil {
		log.FromContext(ctx).Error(err, "Checking for overbooked nodes")
	}
}
