package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/ledger"
	"isochron.io/isochron/internal/placement"
)

// overbookings are the crawlers whose reservations this replica found on a node that
// holds more than it has (placer.checkOverbooking), each with why, until they are
// re-decided (undoOverbooking). No decision of a leader overbooks a node; a decision
// written by a replica that had lost its lease can (the leader fence refuses it, but
// only from the moment the API server sees the new holder), and so can a person editing
// status by hand.
type overbookings struct {
	mu  sync.Mutex
	why map[string]string
	// wake queues the crawler key for a reconcile.
	wake func(key client.ObjectKey)
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
		o.wake(client.ObjectKey{Namespace: ns, Name: name})
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
		h := held{key: c.Namespace + "/" + c.Name, created: c.CreationTimestamp.Time}
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
// (placement.Overbooked), cvms being every crawler. Called when the ledger is built
// (a new leader inherits what the last one wrote) and when it takes in a reservation it
// did not decide.
func (p *placer) checkOverbooking(ctx context.Context, cvms []isov1.CrawlerVM) error {
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
func (p *placer) recheck(ctx context.Context) {
	cvms := &isov1.CrawlerVMList{}
	if err := p.cache.List(ctx, cvms, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Listing crawlers to check for overbooked nodes")
		return
	}
	if err := p.checkOverbooking(ctx, cvms.Items); err != nil {
		log.FromContext(ctx).Error(err, "Checking for overbooked nodes")
	}
}

// Release re-decides a crawler whose reservation must leave its node (req avoids it):
// another node, or none. apply records the decision in cvm's status under the decision
// lock, the ledger assumes what the status then holds (the old reservation keeps counting
// until the write lands), and persist writes it after the lock is released.
func (p *placer) Release(ctx context.Context, cvm *isov1.CrawlerVM, req placement.Request, apply func(placement.Decision), persist func() error) (placement.Decision, error) {
	if err := p.ensureLedger(ctx); err != nil {
		return placement.Decision{}, err
	}
	d, change, err := p.decideRelease(ctx, cvm, req, apply)
	if err != nil {
		return d, err
	}
	return d, p.persist(change, persist)
}

func (p *placer) decideRelease(ctx context.Context, cvm *isov1.CrawlerVM, req placement.Request, apply func(placement.Decision)) (placement.Decision, *ledger.Change, error) {
	p.decide.Lock(p.clock.Now())
	defer p.decide.Unlock()
	inv, err := p.gather(ctx)
	if err != nil {
		return placement.Decision{}, nil, err
	}
	d := placement.NewPlanner(inv.nodes, inv.residents).Place(req)
	apply(d)
	if d.Placed() {
		return d, p.ledger.Assume(inventory.Residents(cvm), nil), nil
	}
	return d, p.ledger.Assume(nil, []string{cvm.Namespace + "/" + cvm.Name}), nil
}

// undoOverbooking re-decides a crawler whose reservation the leader found, the youngest,
// on a node that holds more than it has (why says which and how much). Its VM, when it
// has one, moves to a node the model chose, by the route every move takes (the node it
// leaves holds it until it has left); with nowhere to go it stays and says so. Without a
// VM, its reservation is released and decided again: another node, or none (Placed=False,
// Overbooked) until capacity frees. It reports whether it handled the reconcile.
func (r *CrawlerVMReconciler) undoOverbooking(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, why string) (ctrl.Result, bool, error) {
	key := cvm.Namespace + "/" + cvm.Name
	if _, held := inventory.Resident(cvm); !held || cvm.Status.Move != nil {
		// Released already, or moving: the move's end settles it.
		r.placer.overbooked.clear(key)
		return ctrl.Result{}, false, nil
	}
	node := cvm.Status.Placement.Node
	avoid := []placement.Avoid{{Node: node, Why: why}}
	if cvm.Status.VMI != nil {
		d, err := r.startMove(ctx, cvm, st, isov1.MoveOverbooked, avoid, why+": the youngest reservation there moves", nil)
		switch {
		case err != nil:
			return ctrl.Result{}, true, err
		case d.Placed():
			r.placer.overbooked.clear(key)
			st.event(cvm, corev1.EventTypeWarning, isov1.ReasonOverbooked, fmt.Sprintf("%s: the crawler, the youngest reservation there, moves to node %s", capitalise(why), d.Node))
			return ctrl.Result{}, true, nil
		case d.Reason == "":
			return ctrl.Result{}, false, nil
		}
		msg := fmt.Sprintf("%s, and no other node can hold the crawler within every crawler's budget: %s", why, d.Reason)
		if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionMoving); c == nil || c.Message != msg {
			st.event(cvm, corev1.EventTypeWarning, isov1.ReasonOverbooked, msg)
		}
		setCondition(cvm, isov1.ConditionMoving, false, isov1.ReasonMoveBlocked, msg)
		return ctrl.Result{RequeueAfter: blockedRetry}, true, nil
	}
	req := r.request(ctx, cvm)
	req.Avoid = avoid
	var event string
	apply := func(d placement.Decision) {
		if d.Placed() {
			hold(cvm, d)
			event = fmt.Sprintf("%s: the crawler, the youngest reservation there, is placed on node %s instead", capitalise(why), d.Node)
			return
		}
		cvm.Status.Placement = nil
		msg := fmt.Sprintf("%s: the crawler's reservation there, the youngest, was released, and no other node can host it: %s", why, d.Reason)
		setCondition(cvm, isov1.ConditionPlaced, false, isov1.ReasonOverbooked, msg)
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonNotPlaced, "waiting for a node: "+d.Reason)
		apimeta.RemoveStatusCondition(&cvm.Status.Conditions, isov1.ConditionAtRisk)
		event = msg
	}
	if _, err := r.placer.Release(ctx, cvm, req, apply, func() error { return st.persist(ctx, cvm) }); err != nil {
		return ctrl.Result{}, true, err
	}
	r.placer.overbooked.clear(key)
	r.Recorder.Event(cvm, corev1.EventTypeWarning, isov1.ReasonOverbooked, event)
	return ctrl.Result{}, true, nil
}

// capitalise makes a message that starts a sentence start with a capital.
func capitalise(s string) string {
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		return string(s[0]-'a'+'A') + s[1:]
	}
	return s
}
