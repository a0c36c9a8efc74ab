package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/ledger"
	"isochron.io/isochron/internal/placement"
)

// A reservation the ledger lets go of outside a decision of this process (a crawler
// deleted, a release another replica wrote) wakes the crawlers waiting for its node: the
// ones the crawler's own event woke may have been decided while the ledger still held it,
// and nothing else would bring them back.
func TestLedgerReleasesWakeTheWaiting(t *testing.T) {
	held := func(name, node string) *isov1.CrawlerVM {
		c := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		c.Status.Sizing = &isov1.Sizing{VCPUs: 2, HostCPUs: 3, CPURequest: resource.MustParse("3"), Memory: resource.MustParse("2Gi")}
		if node != "" {
			c.Status.Placement = &isov1.PlacementStatus{Node: node}
		}
		return c
	}
	for name, tc := range map[string]struct {
		event func(p *placer)
		want  []string
	}{
		"a deleted crawler's reconcile forgets it": {
			event: func(p *placer) { p.Forget("ns/a") },
			want:  []string{"n1"},
		},
		"the cache shows a release another replica wrote": {
			event: func(p *placer) { p.Observe(held("a", "")) },
			want:  []string{"n1"},
		},
		"the cache shows a move another replica wrote": {
			event: func(p *placer) { p.Observe(held("a", "n2")) },
			want:  []string{"n1"},
		},
		"the cache confirms the reservation: nobody": {
			event: func(p *placer) { p.Observe(held("a", "n1")) },
		},
		"forgetting a crawler that held nothing: nobody": {
			event: func(p *placer) { p.Forget("ns/waiting") },
		},
	} {
		t.Run(name, func(t *testing.T) {
			var woken []string
			p := &placer{ledger: ledger.New(), released: func(node string) { woken = append(woken, node) }}
			a, _ := inventory.Resident(held("a", "n1"))
			p.ledger.Build([]placement.Resident{a})
			p.Observe(held("a", "n1")) // the cache confirms what the leader listed
			tc.event(p)
			if diff := cmp.Diff(tc.want, woken); diff != "" {
				t.Errorf("nodes whose waiting crawlers were woken (-want +got):\n%s", diff)
			}
		})
	}
}
