package placement

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/sizing"
)

const gi = int64(1) << 30

// rtNode is an RT node of a Kubernetes cluster: CPU Manager static, 2 CPUs reserved for
// the host, the host I/O path on them.
func rtNode(name string, cpus int64) Node {
	return Node{
		Name:           name,
		Labels:         map[string]string{kubevirtv1.NodeSchedulable: "true", kubevirtv1.CPUManager: "true", kubevirtv1.RealtimeLabel: "true", corev1.LabelHostname: name},
		CPUMilli:       (cpus - 2) * 1000,
		MemoryBytes:    64 * gi,
		HugepagesBytes: 16 * gi,
		CapacityCPUs:   float64(cpus),
		Params:         model.Params{HostReservedCPUs: 2},
	}
}

type demandOption func(*sizing.Demand)

func demand(rps int32, opts ...demandOption) sizing.Demand {
	d := sizing.Demand{RPS: rps, Tolerance: 10 * time.Millisecond, Objective: 99.999, Dedicated: true, MemoryBytes: 1 << 30}
	for _, o := range opts {
		o(&d)
	}
	return d
}

func shared(d *sizing.Demand) { d.Dedicated = false }

// support sets what the launcher's support containers request.
func support(cpuMilli, memoryBytes int64) demandOption {
	return func(d *sizing.Demand) { d.Support = sizing.Resources{CPUMilli: cpuMilli, MemoryBytes: memoryBytes} }
}

func memory(m string) demandOption {
	return func(d *sizing.Demand) { q := resource.MustParse(m); d.MemoryBytes = q.Value() }
}

func resident(key, node string, sp sizing.Demand) Resident {
	s, err := sizing.Size(sp, model.Params{})
	if err != nil {
		panic(err)
	}
	return Resident{Key: key, Node: node, Sizing: s, Workload: Workload(key, sp, s)}
}

func TestPlace(t *testing.T) {
	cases := map[string]struct {
		req       Request
		nodes     []Node
		residents []Resident
		node      string // "" = not placed
		reason    string // a part of the reason when not placed
		wantNoFit bool
	}{
		"pack takes the fullest node that fits": {
			req:       Request{Key: "bms/new", Demand: demand(400)},
			nodes:     []Node{rtNode("a", 18), rtNode("b", 18)},
			residents: []Resident{resident("bms/old", "b", demand(1000))},
			node:      "b",
		},
		"spread takes the emptiest node": {
			req:       Request{Key: "bms/new", Demand: demand(400), Spread: true},
			nodes:     []Node{rtNode("a", 18), rtNode("b", 18)},
			residents: []Resident{resident("bms/old", "b", demand(1000))},
			node:      "a",
		},
		"ties break by node name": {
			req:   Request{Key: "bms/new", Demand: demand(100)},
			nodes: []Node{rtNode("c", 10), rtNode("a", 10), rtNode("b", 10)},
			node:  "a",
		},
		"a crawler stays on its node while it fits": {
			req:   Request{Key: "bms/new", Demand: demand(100), Current: "b"},
			nodes: []Node{rtNode("a", 10), rtNode("b", 10)},
			node:  "b",
		},
		"the crawler's own reservation does not count against it": {
			req:       Request{Key: "bms/me", Demand: demand(400), Current: "a"},
			nodes:     []Node{rtNode("a", 5)},
			residents: []Resident{resident("bms/me", "a", demand(400))},
			node:      "a",
		},
		"exclusive CPUs are never oversubscribed": {
			req:       Request{Key: "bms/new", Demand: demand(400)},
			nodes:     []Node{rtNode("a", 9)},
			residents: []Resident{resident("bms/old", "a", demand(1000))},
			reason:    "a: needs 3 exclusive CPUs, 2 free",
		},
		"Guaranteed pods' exclusive CPUs count": {
			req: Request{Key: "bms/new", Demand: demand(400)},
			nodes: func() []Node {
				n := rtNode("a", 10)
				n.Held = Held{CPUMilli: 6000, ExclusiveMilli: 6000}
				return []Node{n}
			}(),
			reason: "a: needs 3 exclusive CPUs, 2 free",
		},
		"other pods' shared CPU requests count, as kube-scheduler counts them": {
			req: Request{Key: "bms/new", Demand: demand(400)},
			nodes: func() []Node {
				n := rtNode("a", 10)
				n.Held = Held{CPUMilli: 5500}
				return []Node{n}
			}(),
			reason: "a: needs 3 exclusive CPUs, 2500m free",
		},
		"a launcher's support containers count beside its exclusive CPUs": {
			req:    Request{Key: "bms/new", Demand: demand(400, support(600, 80_000_000))},
			nodes:  []Node{rtNode("a", 5)},
			reason: "a: needs 3 exclusive CPUs and 600m for KubeVirt's support containers, 3 free",
		},
		"a neighbour's support containers count": {
			req:       Request{Key: "bms/new", Demand: demand(400)},
			nodes:     []Node{rtNode("a", 8)},
			residents: []Resident{resident("bms/old", "a", demand(400, support(600, 80_000_000)))},
			reason:    "a: needs 3 exclusive CPUs, 2400m free",
		},
		"support containers' memory counts": {
			req: Request{Key: "bms/new", Demand: demand(400, support(0, 8<<30))},
			nodes: func() []Node {
				n := rtNode("a", 10)
				n.MemoryBytes = 8 << 30
				return []Node{n}
			}(),
			reason: "a: needs 8570Mi of memory, 8192Mi free", // 8Gi and the launcher's 378Mi
		},
		"other pods' hugepages count": {
			req: Request{Key: "bms/new", Demand: demand(400)},
			nodes: func() []Node {
				n := rtNode("a", 10)
				n.Held = Held{HugepagesBytes: n.HugepagesBytes}
				return []Node{n}
			}(),
			reason: "a: needs 1024Mi of 2Mi hugepages, 0Mi free",
		},
		"dedicated needs the CPU Manager label": {
			req:    Request{Key: "bms/new", Demand: demand(100)},
			nodes:  []Node{{Name: "plain", Labels: map[string]string{kubevirtv1.NodeSchedulable: "true"}, CPUMilli: 8000, CapacityCPUs: 8, MemoryBytes: 8 * gi, HugepagesBytes: 8 * gi}},
			reason: "plain: no static CPU Manager",
		},
		"dedicated needs KubeVirt's realtime label": {
			req: Request{Key: "bms/new", Demand: demand(100)},
			nodes: func() []Node {
				n := rtNode("no-rt", 10)
				delete(n.Labels, kubevirtv1.RealtimeLabel)
				return []Node{n}
			}(),
			reason: "no-rt: no realtime support (label kubevirt.io/realtime=true)",
		},
		"shared runs without the CPU Manager label": {
			req:   Request{Key: "bms/new", Demand: demand(50, shared, func(d *sizing.Demand) { d.Tolerance = 100 * time.Millisecond })},
			nodes: []Node{{Name: "plain", Labels: map[string]string{kubevirtv1.NodeSchedulable: "true"}, CPUMilli: 8000, CapacityCPUs: 8, MemoryBytes: 8 * gi}},
			node:  "plain",
		},
		"hugepages are checked": {
			req:       Request{Key: "bms/new", Demand: demand(100, memory("4Gi"))},
			nodes:     []Node{rtNode("a", 18)},
			residents: []Resident{resident("bms/old", "a", demand(100, memory("14Gi")))},
			reason:    "a: needs 4096Mi of 2Mi hugepages, 2048Mi free",
		},
		"a crawler too big for its own vCPUs is refused by the model": {
			req:    Request{Key: "bms/new", Demand: demand(100000)},
			nodes:  []Node{rtNode("a", 1000)},
			reason: "itself predicted",
		},
		"a node whose host I/O path would saturate refuses the crawler that tips it": {
			req:   Request{Key: "bms/new", Demand: demand(3000)},
			nodes: []Node{rtNode("a", 64)},
			residents: []Resident{
				resident("bms/x", "a", demand(2000)), resident("bms/y", "a", demand(2000)),
			},
			reason: "neighbour bms/x predicted",
		},
		"node selector, taints and cordons filter": {
			req: Request{Key: "bms/new", Demand: demand(100),
				NodeSelector: map[string]string{"zone": "x"},
				Tolerations:  []corev1.Toleration{{Key: "rt", Operator: corev1.TolerationOpExists}}},
			nodes: func() []Node {
				a, b, c, d := rtNode("a", 10), rtNode("b", 10), rtNode("c", 10), rtNode("d", 10)
				b.Labels["zone"], c.Labels["zone"], d.Labels["zone"] = "x", "x", "x"
				c.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}
				d.Unschedulable = true
				b.Taints = []corev1.Taint{{Key: "rt", Value: "yes", Effect: corev1.TaintEffectNoSchedule}}
				return []Node{a, b, c, d}
			}(),
			node: "b",
		},
		"nothing fits: every node's reason, grouped": {
			req: Request{Key: "bms/new", Demand: demand(100), NodeSelector: map[string]string{"zone": "x"}},
			nodes: func() []Node {
				a, b, c := rtNode("a", 10), rtNode("b", 10), rtNode("c", 10)
				c.Labels["zone"] = "x"
				c.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}
				return []Node{a, b, c}
			}(),
			reason: "0/3 nodes fit: a, b: spec.placement.nodeSelector does not match; c: taint gpu=:NoSchedule not tolerated by spec.placement.tolerations",
		},
		"a refuted crawler leaves the node it was refuted on": {
			req:       Request{Key: "bms/me", Demand: demand(400), Current: "a", Avoid: []Avoid{{Node: "a", Why: "a probe refuted the crawler's SLO there"}}},
			nodes:     []Node{rtNode("a", 18), rtNode("b", 18)},
			residents: []Resident{resident("bms/me", "a", demand(400))},
			node:      "b",
		},
		"a refuted crawler with nowhere else to go is told why": {
			req:       Request{Key: "bms/me", Demand: demand(400), Current: "a", Avoid: []Avoid{{Node: "a", Why: "a probe refuted the crawler's SLO there"}}},
			nodes:     []Node{rtNode("a", 18)},
			residents: []Resident{resident("bms/me", "a", demand(400))},
			reason:    "a: a probe refuted the crawler's SLO there",
		},
		"a node calibrated at 4x refuses what the model alone would take there": {
			req: Request{Key: "bms/new", Demand: demand(1000)}, // 4 vCPUs: 4.8ms uncorrected
			nodes: func() []Node {
				a, b := rtNode("a", 18), rtNode("b", 18)
				a.Correction = 4
				return []Node{a, b}
			}(),
			node: "b",
		},
		"no nodes at all": {
			req:    Request{Key: "bms/new", Demand: demand(100)},
			reason: "no nodes",
		},
		"every node avoided, each for its reason": {
			req: Request{Key: "bms/me", Demand: demand(400), Current: "a", Avoid: []Avoid{
				{Node: "a", Why: "node is being drained"}, {Node: "b", Why: "probe Job p-1 refuted the crawler's SLO there"}}},
			nodes:     []Node{rtNode("a", 18), rtNode("b", 18)},
			residents: []Resident{resident("bms/me", "a", demand(400))},
			reason:    "a: node is being drained; b: probe Job p-1 refuted the crawler's SLO there",
		},
		"a live move keeps the VM's size, and the model judges that size": {
			// 1000 rps needs 4 vCPUs; moved as the 2-vCPU VM it is, it is over its budget
			// on every node.
			req:       Request{Key: "bms/me", Demand: demand(1000), Size: &sizing.Result{VCPUs: 2, HostCPUs: 3, CPURequestMilli: 2000, MemoryBytes: gi, HugepagesBytes: gi}},
			nodes:     []Node{rtNode("a", 18)},
			reason:    "a: ",
			wantNoFit: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Place(tc.req, tc.nodes, tc.residents)
			if tc.wantNoFit && got.Placed() {
				t.Fatalf("placed on %s with size %+v", got.Node, got.Sizing)
			}
			if got.Node != tc.node || !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("Place() = node %q, reason %q; want node %q, reason containing %q", got.Node, got.Reason, tc.node, tc.reason)
			}
			if got.Placed() && (got.Predicted <= 0 || got.Predicted > tc.req.Demand.Tolerance) {
				t.Errorf("placed with predicted error %v, tolerance %v", got.Predicted, tc.req.Demand.Tolerance)
			}
		})
	}
}

// Placing crawlers one after another, as the operator does, never oversubscribes a node
// and never leaves any crawler, old or new, predicted over its budget.
func TestSequentialPlacementKeepsEveryCrawlerWithinBudget(t *testing.T) {
	nodes := []Node{rtNode("a", 34), rtNode("b", 18), rtNode("c", 10)}
	p := NewPlanner(nodes, nil)
	var placed []Resident
	for i := 0; i < 80; i++ {
		sp := demand(int32(100+(i*173)%1500), func(s *sizing.Demand) {
			if i%3 == 0 {
				s.Dedicated = false
				s.Tolerance = 100 * time.Millisecond
			}
		})
		req := Request{Key: fmt.Sprintf("bms/c%02d", i), Demand: sp, Spread: i%2 == 1}
		d := p.Place(req)
		if !d.Placed() {
			continue
		}
		p.Commit(req, d)
		placed = append(placed, Resident{Key: req.Key, Node: d.Node, Sizing: d.Sizing, Workload: Workload(req.Key, sp, d.Sizing)})
	}
	if len(placed) < 10 {
		t.Fatalf("only %d placed", len(placed))
	}
	for _, n := range nodes {
		var ws []model.Workload
		var u usage
		for _, r := range placed {
			if r.Node == n.Name {
				ws = append(ws, r.Workload)
				u.add(r.Sizing)
			}
		}
		if u.exclusiveMilli+u.sharedMilli > n.CPUMilli || u.hugepages > n.HugepagesBytes {
			t.Errorf("node %s oversubscribed: %d+%dm of %dm CPU, %d of %d hugepage bytes", n.Name, u.exclusiveMilli, u.sharedMilli, n.CPUMilli, u.hugepages, n.HugepagesBytes)
		}
		for _, pr := range model.Evaluate(model.Node{CPUs: n.CapacityCPUs, Params: n.Params}, ws) {
			if !pr.Within {
				t.Errorf("node %s: %s predicted %v (%s), over its budget", n.Name, pr.Key, pr.Error, pr.Cause)
			}
		}
	}
}

func TestPlaceIsDeterministic(t *testing.T) {
	nodes := []Node{rtNode("a", 18), rtNode("b", 18), rtNode("c", 10)}
	residents := []Resident{resident("bms/x", "a", demand(700)), resident("bms/y", "b", demand(300))}
	req := Request{Key: "bms/new", Demand: demand(400)}
	first := Place(req, nodes, residents)
	for i := 0; i < 20; i++ {
		if diff := cmp.Diff(first, Place(req, nodes, residents)); diff != "" {
			t.Fatalf("run %d differs (-first +again):\n%s", i, diff)
		}
	}
}

// The planner's memory of refusals (pushedOver) only saves predictions: a long-lived
// planner decides exactly as a fresh one built from the same crawlers.
func TestLongLivedPlannerDecidesAsAFreshOne(t *testing.T) {
	nodes := []Node{rtNode("a", 64), rtNode("b", 34), rtNode("c", 18), rtNode("d", 64)}
	long := NewPlanner(nodes, nil)
	var residents []Resident
	for i := 0; i < 300; i++ {
		sp := demand(int32(100+(i*389)%2900), func(s *sizing.Demand) {
			if i%5 == 0 {
				s.Dedicated = false
				s.Tolerance = 50 * time.Millisecond
			}
		})
		req := Request{Key: fmt.Sprintf("bms/c%03d", i), Demand: sp}
		got := long.Place(req)
		want := NewPlanner(nodes, residents).Place(req)
		if got.Node != want.Node || got.Reason != want.Reason {
			t.Fatalf("crawler %d: long-lived planner chose %q (%s), a fresh one %q (%s)", i, got.Node, got.Reason, want.Node, want.Reason)
		}
		if got.Placed() {
			long.Commit(req, got)
			residents = append(residents, Resident{Key: req.Key, Node: got.Node, Sizing: got.Sizing, Workload: Workload(req.Key, sp, got.Sizing)})
		}
	}
}

// reference is Place as a search over every node: each node that passes the constraints
// and has room is predicted with all its crawlers, and the policy's order picks among
// those that fit. The planner's per-node state, ordered walks and lower bound must only
// save work, never change the choice.
func reference(p *Planner, req Request) string {
	best, bestFree := -1, int64(0)
	spread := req.Spread
	d := p.newDecision(req)
	for i := range p.nodes {
		n := &p.nodes[i]
		if constraint(d, n) != fitsNode || (len(req.NodeSelector) > 0 && !labelsMatch(req.NodeSelector, n.Labels)) {
			continue
		}
		s, err := sizing.Size(req.Demand, n.Params)
		if err != nil {
			continue
		}
		var u usage
		var ws []model.Workload
		for _, r := range p.residents[i] {
			if r.Key != req.Key {
				u.add(r.Sizing)
				ws = append(ws, r.Workload)
			}
		}
		if capacity(n, &u, s) != "" {
			continue
		}
		fits := true
		for _, pr := range model.Evaluate(model.Node{CPUs: n.CapacityCPUs, Params: n.Params, Correction: n.Correction}, append(ws, Workload(req.Key, req.Demand, s))) {
			fits = fits && pr.Within
		}
		if !fits {
			continue
		}
		u.add(s)
		free := n.freeCPUMilli(&u)
		switch {
		case req.Current != "" && n.Name == req.Current:
			return n.Name
		case best < 0, spread && free > bestFree, !spread && free < bestFree:
			best, bestFree = i, free
		}
	}
	if best < 0 {
		return ""
	}
	return p.nodes[best].Name
}

func labelsMatch(sel, ls map[string]string) bool {
	for k, v := range sel {
		if ls[k] != v {
			return false
		}
	}
	return true
}

func TestPlaceChoosesWhatASearchOfEveryNodeWould(t *testing.T) {
	var nodes []Node
	for i := range 24 {
		n := rtNode(fmt.Sprintf("n%02d", i), []int64{10, 18, 34}[i%3])
		n.Params.SchedulerGranularity = []time.Duration{3 * time.Millisecond, 0}[i%2]
		n.Labels["zone"] = []string{"a", "b"}[i%4/2]
		switch i % 7 {
		case 3:
			n.Unschedulable = true
		case 5:
			n.Correction = 1.5
		case 6:
			n.Held = Held{CPUMilli: 3000, ExclusiveMilli: 2000, MemoryBytes: 4 * gi}
		}
		nodes = append(nodes, n)
	}
	p := NewPlanner(nodes, nil)
	where := map[string]string{}
	placed := 0
	for i := range 600 {
		key := fmt.Sprintf("bms/c%03d", i%450) // the last 150 are placed again
		sp := demand(int32(50+(i*389)%1900), func(s *sizing.Demand) {
			s.Tolerance = time.Duration([]int{10, 50, 100}[i%3]) * time.Millisecond
			if i%3 == 1 {
				s.Dedicated = false
			}
			if i%10 == 4 {
				s.NIC = &model.NICFlow{Deadline: 5 * time.Millisecond, MinBandwidthBitsPerSecond: 10_000_000}
			}
		})
		req := Request{Key: key, Demand: sp, Spread: i%5 == 4}
		if i%11 == 0 {
			req.NodeSelector = map[string]string{"zone": "b"}
		}
		if i >= 450 {
			req.Current = where[key]
			if i%4 == 0 {
				req.Current, req.Avoid = "", []Avoid{{Node: where[key], Why: "refuted"}}
			}
		}
		want := reference(p, req)
		d := p.Place(req)
		if d.Node != want {
			t.Fatalf("crawler %d (%s): Place chose %q, a search of every node %q (%s)", i, key, d.Node, want, d.Reason)
		}
		if d.Placed() {
			p.Commit(req, d)
			where[key] = d.Node
			placed++
		}
	}
	if placed < 100 || placed > 500 {
		t.Fatalf("%d of 600 decisions placed a crawler: the test should exercise both outcomes", placed)
	}
}
