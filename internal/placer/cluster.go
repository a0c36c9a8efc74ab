package placer

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/calibration"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/placement"
)

// clusterInventory is what a decision or a prediction needs of the nodes.
type clusterInventory struct {
	nodes []placement.Node
	// calibration is, per node, what its correction rests on.
	calibration map[string]nodeCalibration
}

// nodeCalibration is a node's profile (nil: the built-in defaults), its correction and
// where that comes from, and how many samples of its profile its NodeCalibration holds.
type nodeCalibration struct {
	profile    *isov1.ContentionProfile
	correction float64
	source     calibration.Source
	samples    int
}

// addNode adds node n with what its pods hold and its calibration.
func (inv *clusterInventory) addNode(n *corev1.Node, profiles []isov1.ContentionProfile, held placement.Held, cal *isov1.NodeCalibration) {
	inv.nodes = append(inv.nodes, inventory.Node(n, profiles, held, cal))
	nc := nodeCalibration{profile: inventory.ProfileFor(n, profiles)}
	a := inventory.Correction(nc.profile, cal)
	nc.correction, nc.source = a.Correction, a.Source
	name, gen := inventory.ProfileOf(nc.profile)
	nc.samples = len(inventory.Samples(cal, name, gen))
	inv.calibration[n.Name] = nc
}

// gatherNodes reads Nodes, ContentionProfiles and NodeCalibrations from the cache, and
// what the pods bound to each node hold from the books; kept while none of it changes.
func (p *Placer) gatherNodes(ctx context.Context) (*clusterInventory, error) {
	p.nodesOnce.Do(func() {
		if p.opts.Informers == nil {
			return
		}
		if err := p.nodes.setup(ctx, p.opts.Informers, p.opts.Books.Gen); err != nil {
			log.FromContext(ctx).Error(err, "Keeping no node inventory between decisions")
		}
	})
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
		inv.addNode(n, profiles.Items, p.opts.Books.HeldOn(n.Name), calOf[n.Name])
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
// one when neither changed, else a new one. Called with the decision lock held.
func (p *Placer) plannerFor(inv *clusterInventory) *plannedLedger {
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

// Prediction is the model's prediction for a crawler where it is placed, with every
// crawler the ledger holds on its node (Message says why when it is over budget), and the
// node's profile (nil: the built-in defaults) and correction.
type Prediction struct {
	model.Prediction
	Profile    *isov1.ContentionProfile
	Correction float64
}

// Predict is the prediction for the crawler key on node (as the reconcile read it; nil
// for a node that is gone): that node, what its pods hold, its calibration and the
// reservations the ledger holds there. Its cost is what the node holds, not the size of
// the cluster. False when the node is gone or the ledger holds no reservation of the
// crawler there.
func (p *Placer) Predict(ctx context.Context, node *corev1.Node, key string) (Prediction, bool, error) {
	if node == nil {
		return Prediction{}, false, nil
	}
	if err := p.ensureLedger(ctx); err != nil {
		return Prediction{}, false, err
	}
	profiles := &isov1.ContentionProfileList{}
	if err := p.cache.List(ctx, profiles); err != nil {
		return Prediction{}, false, fmt.Errorf("listing contention profiles: %w", err)
	}
	cal := &isov1.NodeCalibration{}
	if err := p.cache.Get(ctx, client.ObjectKey{Name: node.Name}, cal); err != nil {
		if !apierrors.IsNotFound(err) {
			return Prediction{}, false, fmt.Errorf("reading the calibration of node %s: %w", node.Name, err)
		}
		cal = nil
	}
	inv := &clusterInventory{calibration: map[string]nodeCalibration{}}
	inv.addNode(node, profiles.Items, p.opts.Books.HeldOn(node.Name), cal)
	planner := placement.NewPlanner(inv.nodes, p.ledger.ResidentsOn(node.Name))
	pred, ok := planner.Prediction(key)
	if !ok {
		return Prediction{}, false, nil
	}
	if !pred.Within {
		pred.Message = planner.Explain(key)
	}
	nc := inv.calibration[node.Name]
	return Prediction{Prediction: pred, Profile: nc.profile, Correction: nc.correction}, true, nil
}

// Holding is what one node holds, as the metrics report it: its usage and worst
// prediction (placement.Summarize), and what its correction rests on.
type Holding struct {
	placement.NodeSummary
	Correction float64
	Source     calibration.Source
	// Samples is how many samples of the node's current profile its NodeCalibration holds.
	Samples int
}

// Held is what every node holds, by node name, from the ledger and the kept inventory.
func (p *Placer) Held(ctx context.Context) ([]Holding, error) {
	if err := p.ensureLedger(ctx); err != nil {
		return nil, err
	}
	inv, err := p.gatherNodes(ctx)
	if err != nil {
		return nil, err
	}
	sums := placement.Summarize(inv.nodes, p.ledger.Residents())
	out := make([]Holding, len(sums))
	for i, s := range sums {
		nc := inv.calibration[s.Node]
		out[i] = Holding{NodeSummary: s, Correction: nc.correction, Source: nc.source, Samples: nc.samples}
	}
	return out, nil
}

// ensureLedger builds the reservation ledger the first time this process decides, that
// is once it leads: from one list read from the API server, not the cache, which may not
// have seen the last leader's final decisions yet. It is called before the decision lock
// is taken (the list is a call to the API server, under the caller's deadline); callers
// wait for one build.
func (p *Placer) ensureLedger(ctx context.Context) error {
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

func residents(cvms []isov1.CrawlerVM) []placement.Resident {
	out := make([]placement.Resident, 0, len(cvms))
	for i := range cvms {
		out = append(out, inventory.Residents(&cvms[i])...)
	}
	return out
}
