package ledger

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/sizing"
)

func res(key, node string, cpus int32, rps int32) placement.Resident {
	return placement.Resident{Key: key, Node: node, Sizing: sizing.Result{VCPUs: cpus, HostCPUs: cpus + 1},
		Workload: model.Workload{Key: key, RPS: rps}}
}

// Each step is one event the ledger sees; after the steps, the reservations it decides on.
func TestLedger(t *testing.T) {
	a1, a2 := res("ns/a", "n1", 2, 100), res("ns/a", "n2", 2, 100)
	b := res("ns/b", "n1", 1, 50)
	aFaster := res("ns/a", "n1", 2, 200) // a's spec changed its rate, same reservation
	type step func(l *Ledger)
	build := func(rs ...placement.Resident) step { return func(l *Ledger) { l.Build(rs) } }
	observe := func(key string, r *placement.Resident) step { return func(l *Ledger) { l.Observe(key, r) } }
	assume := func(r placement.Resident) step {
		return func(l *Ledger) { l.Assume([]placement.Resident{r}, nil).Commit() }
	}
	assumeAndFail := func(r placement.Resident) step {
		return func(l *Ledger) { l.Assume([]placement.Resident{r}, nil).Undo() }
	}
	// A decision not yet persisted: what it releases still counts, under a key of its own.
	assumePending := func(r placement.Resident) step { return func(l *Ledger) { l.Assume([]placement.Resident{r}, nil) } }
	remove := func(key string) step { return func(l *Ledger) { l.Remove(key) } }
	// A move: a at n2, and its reservation on n1, which it leaves, under a key of its own.
	aLeaving := res("ns/a (leaving)", "n1", 2, 100)
	moveA := func(l *Ledger) { l.Assume([]placement.Resident{a2, aLeaving}, nil).Commit() }
	endMove := func(l *Ledger) { l.Assume([]placement.Resident{a2}, []string{aLeaving.Key}).Commit() }
	endMovePending := func(l *Ledger) { l.Assume([]placement.Resident{a2}, []string{aLeaving.Key}) }
	failMoveWrite := func(l *Ledger) { l.Assume([]placement.Resident{a2}, []string{aLeaving.Key}).Undo() }
	held := func(r placement.Resident, seq int) placement.Resident {
		r.Key = HoldoverKey(r.Key, uint64(seq))
		r.Workload.Key = r.Key
		return r
	}
	for _, tc := range []struct {
		name        string
		steps       []step
		want        []placement.Resident
		wantAssumed []string
	}{
		{name: "not built: observing records nothing", steps: []step{observe("ns/a", &a1)}, want: []placement.Resident{}},
		{name: "built: assumed until the cache shows it", steps: []step{build(a1, b)}, want: []placement.Resident{a1, b}, wantAssumed: []string{"ns/a", "ns/b"}},
		{name: "build, the cache catches up", steps: []step{build(a1), observe("ns/a", &a1)}, want: []placement.Resident{a1}},
		{
			name:  "build, a cache behind the last leader's write does not release it",
			steps: []step{build(a1), observe("ns/a", nil)}, want: []placement.Resident{a1}, wantAssumed: []string{"ns/a"},
		},
		{
			name:  "a decision counts at once, before the cache shows it",
			steps: []step{build(), assume(a1), observe("ns/a", nil)}, want: []placement.Resident{a1}, wantAssumed: []string{"ns/a"},
		},
		{
			name:  "a move stays assumed while the cache shows the old node",
			steps: []step{build(a1), observe("ns/a", &a1), assume(a2), observe("ns/a", &a1)}, want: []placement.Resident{a2}, wantAssumed: []string{"ns/a"},
		},
		{name: "a move confirmed", steps: []step{build(a1), assume(a2), observe("ns/a", &a2)}, want: []placement.Resident{a2}},
		{name: "a failed decision is forgotten", steps: []step{build(), assumeAndFail(a1)}, want: []placement.Resident{}},
		{
			name:  "a failed move restores the old reservation",
			steps: []step{build(a1), observe("ns/a", &a1), assumeAndFail(a2)}, want: []placement.Resident{a1},
		},
		{
			name:  "a confirmed reservation follows the cache: a spec change reaches the workload",
			steps: []step{build(a1), observe("ns/a", &a1), observe("ns/a", &aFaster)}, want: []placement.Resident{aFaster},
		},
		{name: "an assumed one is confirmed by the same reservation with a newer spec", steps: []step{build(a1), observe("ns/a", &aFaster)}, want: []placement.Resident{aFaster}},
		{name: "a move holds both nodes", steps: []step{build(a1), observe("ns/a", &a1), moveA}, want: []placement.Resident{a2, aLeaving}, wantAssumed: []string{"ns/a"}},
		{
			name:  "a move's end releases the node left, and a stale cache does not bring it back",
			steps: []step{build(a1), moveA, observe("ns/a", &a2), observe(aLeaving.Key, &aLeaving), endMove, observe(aLeaving.Key, &aLeaving)}, want: []placement.Resident{a2},
			wantAssumed: []string{"ns/a"}, // the end is a decision of its own, assumed until the cache shows it
		},
		{
			name:  "the released node stays released once the cache shows it",
			steps: []step{build(a1), moveA, endMove, observe(aLeaving.Key, nil), observe("ns/a", &a2)}, want: []placement.Resident{a2},
		},
		{
			name:  "an end that fails to persist holds both nodes again",
			steps: []step{build(a1), moveA, observe("ns/a", &a2), observe(aLeaving.Key, &aLeaving), failMoveWrite}, want: []placement.Resident{a2, aLeaving},
		},
		{
			name:  "a move not yet persisted holds the node it leaves",
			steps: []step{build(a1), observe("ns/a", &a1), assumePending(a2)}, want: []placement.Resident{a2, held(a1, 1)}, wantAssumed: []string{"ns/a"},
		},
		{
			name:  "a move's end not yet persisted still holds the node left",
			steps: []step{build(a1), moveA, observe("ns/a", &a2), observe(aLeaving.Key, &aLeaving), endMovePending}, want: []placement.Resident{a2, held(aLeaving, 1)},
			wantAssumed: []string{"ns/a"},
		},
		{
			name:  "a move that keeps the reservation on the node it leaves holds nothing over",
			steps: []step{build(a1), observe("ns/a", &a1), func(l *Ledger) { l.Assume([]placement.Resident{a2, aLeaving}, nil) }},
			want:  []placement.Resident{a2, aLeaving}, wantAssumed: []string{"ns/a"},
		},
		{name: "a deleted crawler releases its reservation", steps: []step{build(a1, b), remove("ns/a")}, want: []placement.Resident{b}, wantAssumed: []string{"ns/b"}},
		{name: "rebuilt: the list replaces everything", steps: []step{build(a1), assume(b), build(a2)}, want: []placement.Resident{a2}, wantAssumed: []string{"ns/a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New()
			for _, s := range tc.steps {
				s(l)
			}
			if diff := cmp.Diff(tc.want, l.Residents()); diff != "" {
				t.Errorf("reservations (-want +got):\n%s", diff)
			}
			// The node index agrees with the list, after every kind of step.
			for _, node := range []string{"n1", "n2"} {
				var want []placement.Resident
				for _, r := range l.Residents() {
					if r.Node == node {
						want = append(want, r)
					}
				}
				if diff := cmp.Diff(want, l.ResidentsOn(node), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("reservations on %s (-want +got):\n%s", node, diff)
				}
			}
			var assumed []string
			for _, k := range []string{"ns/a", "ns/b"} {
				if l.Assumed(k) {
					assumed = append(assumed, k)
				}
			}
			if diff := cmp.Diff(tc.wantAssumed, assumed); diff != "" {
				t.Errorf("assumed (-want +got):\n%s", diff)
			}
		})
	}
}

// The generation moves with the reservations, not with confirmations: a planner kept
// across decisions knows when it no longer holds the ledger.
func TestLedgerGeneration(t *testing.T) {
	a1, a2, b := res("ns/a", "n1", 2, 100), res("ns/a", "n2", 2, 100), res("ns/b", "n1", 1, 50)
	l := New()
	l.Build([]placement.Resident{a1})
	_, g := l.Snapshot()
	l.Observe("ns/a", &a1) // confirmed: same reservation
	if l.Gen() != g {
		t.Fatalf("a confirmation moved the generation from %d to %d", g, l.Gen())
	}
	c, _, exact := l.AssumeAt([]placement.Resident{a2}, nil, g)
	if exact {
		t.Fatalf("AssumeAt of a move reports exact: the planner does not hold the reservation it releases until persisted")
	}
	c.Commit()
	next := l.Gen()
	if _, again, exact := l.AssumeAt([]placement.Resident{a2}, nil, next); !exact || again != next {
		t.Errorf("assuming the same reservation again: %d %v, want %d true", again, exact, next)
	}
	if diff := cmp.Diff([]string{"n1"}, c.Released()); diff != "" {
		t.Errorf("released nodes (-want +got):\n%s", diff)
	}
	fresh := res("ns/c", "n2", 1, 50)
	if _, again, exact := l.AssumeAt([]placement.Resident{fresh}, nil, next); !exact || again != next+1 {
		t.Errorf("assuming a new crawler's first reservation: %d %v, want %d true", again, exact, next+1)
	}
	next = l.Gen()
	l.Remove("ns/b") // nothing to remove
	if l.Gen() != next {
		t.Errorf("removing nothing moved the generation")
	}
	l.Observe("ns/b", &b) // another crawler's reservation arrives from the cache
	if _, _, exact := l.AssumeAt([]placement.Resident{a1}, nil, next); exact {
		t.Error("AssumeAt reports exact after another change")
	}
}

// Observe tells a reservation this process did not decide: the new leader checks its
// node (placement.Overbooked).
func TestObserveTellsForeignReservations(t *testing.T) {
	a1, a2, b := res("ns/a", "n1", 2, 100), res("ns/a", "n2", 2, 100), res("ns/b", "n1", 1, 50)
	aFaster := res("ns/a", "n1", 2, 200)
	l := New()
	if foreign, _ := l.Observe("ns/a", &a1); foreign {
		t.Error("not built: nothing is taken in")
	}
	l.Build([]placement.Resident{a1})
	for _, tc := range []struct {
		name     string
		key      string
		res      *placement.Resident
		foreign  bool
		released string
	}{
		{"the cache confirms the list", "ns/a", &a1, false, ""},
		{"the same reservation with a newer spec", "ns/a", &aFaster, false, ""},
		{"another crawler's, not in the list", "ns/b", &b, true, ""},
		{"another node", "ns/a", &a2, true, "n1"},
		{"a release", "ns/a", nil, false, "n2"},
		{"nothing to release", "ns/a", nil, false, ""},
	} {
		foreign, released := l.Observe(tc.key, tc.res)
		if foreign != tc.foreign || released != tc.released {
			t.Errorf("%s: foreign %v, released %q; want %v, %q", tc.name, foreign, released, tc.foreign, tc.released)
		}
	}
	if got := l.Remove("ns/b"); got != "n1" {
		t.Errorf("Remove of a crawler on n1 released %q", got)
	}
	if got := l.Remove("ns/b"); got != "" {
		t.Errorf("Remove of a crawler gone released %q", got)
	}
	l.Assume([]placement.Resident{a1}, nil).Commit()
	if foreign, _ := l.Observe("ns/a", &a1); foreign {
		t.Error("this process's own decision, confirmed, reported foreign")
	}
}

// Releasing tells a release this process made that the cache has not shown yet: a copy
// that still holds the reservation is behind it.
func TestReleasing(t *testing.T) {
	a := res("ns/a", "n1", 2, 100)
	l := New()
	l.Build([]placement.Resident{a})
	l.Observe("ns/a", &a)
	if l.Releasing("ns/a") {
		t.Fatal("held: reported releasing")
	}
	failed := l.Assume(nil, []string{"ns/a"})
	if !l.Releasing("ns/a") {
		t.Error("released, not persisted yet: not reported releasing")
	}
	failed.Undo()
	if l.Releasing("ns/a") {
		t.Error("the release's write failed: still reported releasing")
	}
	l.Assume(nil, []string{"ns/a"}).Commit()
	l.Observe("ns/a", &a) // a copy from before the release
	if !l.Releasing("ns/a") {
		t.Error("a copy from before the release ended it")
	}
	l.Observe("ns/a", nil) // the cache shows the release
	if l.Releasing("ns/a") || l.Releasing("ns/b") {
		t.Error("the cache shows the release: still releasing")
	}
}
