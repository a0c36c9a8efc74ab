package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/sizing"
)

func res(key, node string, cpus int32, rps int32) Resident {
	return Resident{Key: key, Node: node, Sizing: sizing.Result{VCPUs: cpus, HostCPUs: cpus + 1},
		Workload: model.Workload{Key: key, RPS: rps}}
}

// Each step is one event the ledger sees; after the steps, the reservations it decides on.
func TestLedger(t *testing.T) {
	a1, a2 := res("ns/a", "n1", 2, 100), res("ns/a", "n2", 2, 100)
	b := res("ns/b", "n1", 1, 50)
	aFaster := res("ns/a", "n1", 2, 200) // a's spec changed its rate, same reservation
	type step func(l *Ledger)
	build := func(rs ...Resident) step { return func(l *Ledger) { l.Build(rs) } }
	observe := func(key string, r *Resident) step { return func(l *Ledger) { l.Observe(key, r) } }
	assume := func(r Resident) step { return func(l *Ledger) { l.Assume(r) } }
	assumeAndFail := func(r Resident) step { return func(l *Ledger) { l.Assume(r)() } }
	remove := func(key string) step { return func(l *Ledger) { l.Remove(key) } }
	for _, tc := range []struct {
		name        string
		steps       []step
		want        []Resident
		wantAssumed []string
	}{
		{name: "not built: observing records nothing", steps: []step{observe("ns/a", &a1)}, want: []Resident{}},
		{name: "built: assumed until the cache shows it", steps: []step{build(a1, b)}, want: []Resident{a1, b}, wantAssumed: []string{"ns/a", "ns/b"}},
		{name: "build, the cache catches up", steps: []step{build(a1), observe("ns/a", &a1)}, want: []Resident{a1}},
		{
			name:  "build, a cache behind the last leader's write does not release it",
			steps: []step{build(a1), observe("ns/a", nil)}, want: []Resident{a1}, wantAssumed: []string{"ns/a"},
		},
		{
			name:  "a decision counts at once, before the cache shows it",
			steps: []step{build(), assume(a1), observe("ns/a", nil)}, want: []Resident{a1}, wantAssumed: []string{"ns/a"},
		},
		{
			name:  "a move stays assumed while the cache shows the old node",
			steps: []step{build(a1), observe("ns/a", &a1), assume(a2), observe("ns/a", &a1)}, want: []Resident{a2}, wantAssumed: []string{"ns/a"},
		},
		{name: "a move confirmed", steps: []step{build(a1), assume(a2), observe("ns/a", &a2)}, want: []Resident{a2}},
		{name: "a failed decision is forgotten", steps: []step{build(), assumeAndFail(a1)}, want: []Resident{}},
		{
			name:  "a failed move restores the old reservation",
			steps: []step{build(a1), observe("ns/a", &a1), assumeAndFail(a2)}, want: []Resident{a1},
		},
		{
			name:  "a confirmed reservation follows the cache: a spec change reaches the workload",
			steps: []step{build(a1), observe("ns/a", &a1), observe("ns/a", &aFaster)}, want: []Resident{aFaster},
		},
		{name: "an assumed one is confirmed by the same reservation with a newer spec", steps: []step{build(a1), observe("ns/a", &aFaster)}, want: []Resident{aFaster}},
		{name: "a deleted crawler releases its reservation", steps: []step{build(a1, b), remove("ns/a")}, want: []Resident{b}, wantAssumed: []string{"ns/b"}},
		{name: "rebuilt: the list replaces everything", steps: []step{build(a1), assume(b), build(a2)}, want: []Resident{a2}, wantAssumed: []string{"ns/a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger()
			for _, s := range tc.steps {
				s(l)
			}
			if diff := cmp.Diff(tc.want, l.Residents()); diff != "" {
				t.Errorf("reservations (-want +got):\n%s", diff)
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
