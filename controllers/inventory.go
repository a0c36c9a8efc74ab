package controllers

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/calibration"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/placement"
)

// clusterInventory is what a placement decision or a prediction needs of the cluster.
type clusterInventory struct {
	nodes     []placement.Node
	residents []placement.Resident
	// calibration is, per node, what its correction rests on.
	calibration map[string]nodeCalibration
}

// nodeCalibration is a node's profile (nil: the built-in defaults), NodeCalibration (nil:
// none) and the correction they give it.
type nodeCalibration struct {
	profile    *isov1.ContentionProfile
	cal        *isov1.NodeCalibration
	correction float64
	source     calibration.Source
	// samples is how many of cal's samples are of the node's profile and generation.
	samples int
}

// gather reads Nodes, ContentionProfiles and NodeCalibrations from the cache, what the
// pods bound to each node hold from the node books, and
// the crawlers' reservations from the ledger once the leader has built it (from the cache
// before: predictions only, no decision).
func (p *placer) gather(ctx context.Context) (*clusterInventory, error) {
	inv, err := p.gatherNodes(ctx)
	if err != nil {
		return nil, err
	}
	if p.ledger.Built() {
		inv.residents = p.ledger.Residents()
		return inv, nil
	}
	cvms := &isov1.CrawlerVMList{}
	if err := p.cache.List(ctx, cvms); err != nil {
		return nil, fmt.Errorf("listing crawlers: %w", err)
	}
	inv.residents = residents(cvms.Items)
	return inv, nil
}

// gatherNodes is gather without the reservations: the nodes, what their pods hold, their
// profiles and calibrations.
func (p *placer) gatherNodes(ctx context.Context) (*clusterInventory, error) {
	kept, at, ok := p.nodes.get()
	if ok {
		return kept, nil
	}
	// Nodes are only read here: the cache's own objects, not copies.
	nodes := &corev1.NodeList{}
	if err := p.cache.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	profiles := &isov1.ContentionProfileList{}
	if err := p.cache.List(ctx, profiles); err != nil {
		return nil, fmt.Errorf("listing contention profiles: %w", err)
	}
	cals := &isov1.NodeCalibrationList{}
	if err := p.cache.List(ctx, cals); err != nil {
		return nil, fmt.Errorf("listing node calibrations: %w", err)
	}
	calOf := make(map[string]*isov1.NodeCalibration, len(cals.Items))
	for i := range cals.Items {
		calOf[cals.Items[i].Name] = &cals.Items[i]
	}
	// The cache lists in no particular order; by name, so that the same nodes read the same
	// (plannerFor keeps its planner while they do).
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	inv := &clusterInventory{nodes: make([]placement.Node, 0, len(nodes.Items)), calibration: make(map[string]nodeCalibration, len(nodes.Items))}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		inv.addNode(n, profiles.Items, p.books.HeldOn(n.Name), calOf[n.Name])
	}
	return p.nodes.keep(inv, at), nil
}

// plannedLedger is a planner kept across batches of decisions while it holds exactly the
// ledger (generation gen) and the nodes (as gatherNodes read them): a batch then costs
// its decisions, not a rebuild from every reservation.
type plannedLedger struct {
	planner *placement.Planner
	nodes   []placement.Node
	gen     uint64
}

// plannerFor is the planner for the nodes of inv and the ledger's reservations: the kept
// one when neither changed, else a new one. Called with p.decide held.
func (p *placer) plannerFor(inv *clusterInventory) *plannedLedger {
	if k := p.kept; k != nil && k.gen == p.ledger.Gen() && (sameNodes(k.nodes, inv.nodes) || placement.NodesEqual(k.nodes, inv.nodes)) {
		return k
	}
	res, gen := p.ledger.Snapshot()
	p.kept = &plannedLedger{planner: placement.NewPlanner(inv.nodes, res), nodes: inv.nodes, gen: gen}
	return p.kept
}

// sameNodes reports whether a and b are the same slice (the kept inventory's, nodesMemo).
func sameNodes(a, b []placement.Node) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// addNode adds node n with what its pods hold and its calibration.
func (inv *clusterInventory) addNode(n *corev1.Node, profiles []isov1.ContentionProfile, held placement.Held, cal *isov1.NodeCalibration) {
	inv.nodes = append(inv.nodes, inventory.Node(n, profiles, held, cal))
	nc := nodeCalibration{profile: inventory.ProfileFor(n, profiles), cal: cal}
	a := inventory.Correction(nc.profile, nc.cal)
	nc.correction, nc.source = a.Correction, a.Source
	name, gen := inventory.ProfileOf(nc.profile)
	nc.samples = len(inventory.Samples(nc.cal, name, gen))
	inv.calibration[n.Name] = nc
}

// gatherNode is gather for a prediction on one node: that node, what the pods bound to it
// hold (the node books), its calibration and the reservations on it, each read from an
// index. Its cost is what the node holds, not the size of the cluster. A node that is gone gives an inventory
// without it.
func (p *placer) gatherNode(ctx context.Context, name string) (*clusterInventory, error) {
	inv := &clusterInventory{calibration: map[string]nodeCalibration{}}
	n := &corev1.Node{}
	if err := p.cache.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return inv, nil
		}
		return nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	profiles := &isov1.ContentionProfileList{}
	if err := p.cache.List(ctx, profiles); err != nil {
		return nil, fmt.Errorf("listing contention profiles: %w", err)
	}
	cal := &isov1.NodeCalibration{}
	if err := p.cache.Get(ctx, client.ObjectKey{Name: name}, cal); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading the calibration of node %s: %w", name, err)
		}
		cal = nil
	}
	inv.addNode(n, profiles.Items, p.books.HeldOn(name), cal)
	if p.ledger.Built() {
		inv.residents = p.ledger.ResidentsOn(name)
		return inv, nil
	}
	cvms := &isov1.CrawlerVMList{}
	if err := p.cache.List(ctx, cvms, client.MatchingFields{indexNode: name}); err != nil {
		return nil, fmt.Errorf("listing the crawlers on node %s: %w", name, err)
	}
	inv.residents = residents(cvms.Items)
	return inv, nil
}

func residents(cvms []isov1.CrawlerVM) []placement.Resident {
	out := make([]placement.Resident, 0, len(cvms))
	for i := range cvms {
		out = append(out, inventory.Residents(&cvms[i])...)
	}
	return out
}

// ensureLedger builds the reservation ledger the first time this process decides, that
// is once it leads: from one list read from the API server, not the cache, which may
// not have seen the last leader's final decisions yet. It is called before the decision
// lock is taken (the list is a call to the API server, under the reconcile's deadline);
// callers wait for one build.
func (p *placer) ensureLedger(ctx context.Context) error {
	if p.ledger.Built() {
		return nil
	}
	p.build.Lock()
	defer p.build.Unlock()
	if p.ledger.Built() {
		return nil
	}
	cvms := &isov1.CrawlerVMList{}
	if err := p.api.List(ctx, cvms); err != nil {
		return fmt.Errorf("listing crawlers to build the reservation ledger: %w", err)
	}
	p.ledger.Build(residents(cvms.Items))
	// What the last leader wrote may overbook a node (a decision it wrote after it had
	// lost its lease): undo it, youngest reservation first.
	return p.checkOverbooking(ctx, cvms.Items)
}

// Observe takes in the cache's copy of a crawler: its reservation, or none, and the one
// it keeps on the node it leaves while it moves. It reports whether it took in a
// reservation this process did not decide (ledger.Observe). What the copy released (a
// release another replica wrote) wakes the waiting crawlers its node can help: those the
// crawler's update woke may have been decided before the ledger knew.
func (p *placer) Observe(cvm *isov1.CrawlerVM) (foreign bool) {
	key := cvm.Namespace + "/" + cvm.Name
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
	p.wakeReleased(released[:]...)
	return foreign
}

// wakeReleased wakes the waiting crawlers the nodes named can help ("" names none).
func (p *placer) wakeReleased(nodes ...string) {
	if p.released == nil {
		return
	}
	for _, n := range nodes {
		if n != "" {
			p.released(n)
		}
	}
}

func (inv *clusterInventory) hasNode(name string) bool {
	for i := range inv.nodes {
		if inv.nodes[i].Name == name {
			return true
		}
	}
	return false
}

// predict is the model's prediction for the crawler key where it is placed, with every
// crawler on its node, and, when it is not within the crawler's budget, the model's
// message saying why.
func (inv *clusterInventory) predict(key string) (model.Prediction, bool) {
	p := placement.NewPlanner(inv.nodes, inv.residents)
	pred, ok := p.Prediction(key)
	if ok && !pred.Within {
		pred.Message = p.Explain(key)
	}
	return pred, ok
}
