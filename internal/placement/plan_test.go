package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPlan(t *testing.T) {
	type outcome struct {
		Node  string
		Final bool // a final prediction was made
	}
	cases := map[string]struct {
		nodes []Node
		// residents are crawlers already placed (PlanOn).
		residents []Resident
		reqs      []Request
		want      []outcome
		// crawlers is each node's crawlers after the plan, by node name.
		crawlers map[string][]string
	}{
		"each decision counts the ones before it": {
			// 4 CPUs allocatable: the first dedicated crawler (400 rps: 2 vCPUs, 3 host
			// CPUs) fits, the second no longer does.
			nodes: []Node{rtNode("a", 6)},
			reqs: []Request{
				{Key: "bms/first", Demand: demand(400)},
				{Key: "bms/second", Demand: demand(400)},
			},
			want:     []outcome{{Node: "a", Final: true}, {}},
			crawlers: map[string][]string{"a": {"bms/first"}},
		},
		"the crawlers' current nodes are ignored": {
			nodes: []Node{rtNode("a", 18), rtNode("b", 18)},
			reqs: []Request{
				{Key: "bms/x", Demand: demand(400), Current: "b"},
				{Key: "bms/y", Demand: demand(400)},
			},
			// From scratch, pack breaks the tie by name, then fills the same node.
			want:     []outcome{{Node: "a", Final: true}, {Node: "a", Final: true}},
			crawlers: map[string][]string{"a": {"bms/x", "bms/y"}, "b": {}},
		},
		"residents keep their nodes and count": {
			// 6 CPUs on a: the resident's 3 host CPUs leave no room for another; b takes it.
			nodes:     []Node{rtNode("a", 6), rtNode("b", 6)},
			residents: []Resident{resident("bms/old", "a", demand(400))},
			reqs:      []Request{{Key: "bms/new", Demand: demand(400)}},
			want:      []outcome{{Node: "b", Final: true}},
			crawlers:  map[string][]string{"a": {"bms/old"}, "b": {"bms/new"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			planned, nodes := PlanOn(tc.nodes, tc.residents, tc.reqs)
			got := make([]outcome, len(planned))
			for i, p := range planned {
				got[i] = outcome{Node: p.Node, Final: p.Final.Key == tc.reqs[i].Key}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			crawlers := map[string][]string{}
			for _, n := range nodes {
				crawlers[n.Node] = n.Crawlers
			}
			if diff := cmp.Diff(tc.crawlers, crawlers); diff != "" {
				t.Errorf("crawlers per node (-want +got):\n%s", diff)
			}
		})
	}
}

// The final prediction of a crawler placed first sees the crawlers placed after it on
// its node: it is what the crawler would see with the whole plan applied.
func TestPlanPredictsWithTheWholePlanInPlace(t *testing.T) {
	nodes := []Node{rtNode("a", 18)}
	first := Request{Key: "bms/first", Demand: demand(100, shared)}
	alone, _ := Plan(nodes, []Request{first})
	together, summary := Plan(nodes, []Request{first, {Key: "bms/second", Demand: demand(2000, shared)}})
	if together[0].Predicted != alone[0].Predicted {
		t.Errorf("decision-time prediction %s, want %s (the second crawler came later)", together[0].Predicted, alone[0].Predicted)
	}
	if together[0].Final.Error <= alone[0].Final.Error {
		t.Errorf("final prediction %s with a 2,000 rps neighbour, want more than %s alone", together[0].Final.Error, alone[0].Final.Error)
	}
	if worst := max(together[0].Final.Error, together[1].Final.Error); summary[0].WorstPredicted != worst {
		t.Errorf("node's worst prediction %s, want %s", summary[0].WorstPredicted, worst)
	}
}
