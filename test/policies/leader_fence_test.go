package policies

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/ptr"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/sizing"
)

// The policy leader-fence (config/admission/leader_fence.yaml) refuses a status write
// that changes a crawler's reservation unless status.decidedBy names the Lease's holder;
// the manager writes its identity there exactly when the reservation it holds changes,
// as inventory.Resident and inventory.Leaving read it (controllers' reservationOf, not
// exported, compares those). Every change of status below, written with a stale
// decidedBy, is refused exactly when the reservation changes as the Go code reads it;
// written with the holder's, it passes.
func TestLeaderFenceIsTheReservation(t *testing.T) {
	p := policyOf(t, "leader_fence.yaml", "leader-fence")
	size := func(vcpus int32, memory string) *isov1.Sizing {
		return &isov1.Sizing{VCPUs: vcpus, HostCPUs: vcpus + 1, CPURequest: resource.MustParse("3"), Memory: resource.MustParse(memory)}
	}
	placed := func(node string) *isov1.PlacementStatus {
		return &isov1.PlacementStatus{Node: node, PredictedError: &metav1.Duration{Duration: 3_000_000}}
	}
	statuses := map[string]isov1.CrawlerVMStatus{
		"nothing held":                   {},
		"sized, not placed":              {Sizing: size(2, "1Gi")},
		"placed, not sized":              {Placement: placed("rt-1")},
		"on rt-1":                        {Sizing: size(2, "1Gi"), Placement: placed("rt-1")},
		"on rt-1, another prediction":    {Sizing: size(2, "1Gi"), Placement: &isov1.PlacementStatus{Node: "rt-1"}, ObservedGeneration: 4},
		"on rt-1, larger":                {Sizing: size(4, "1Gi"), Placement: placed("rt-1")},
		"on rt-1, more memory":           {Sizing: size(2, "2Gi"), Placement: placed("rt-1")},
		"on rt-1, with hugepages":        {Sizing: withHugepages(size(2, "1Gi")), Placement: placed("rt-1")},
		"on rt-2":                        {Sizing: size(2, "1Gi"), Placement: placed("rt-2")},
		"moving from rt-1 to rt-2":       {Sizing: size(2, "1Gi"), Placement: placed("rt-2"), Move: &isov1.Move{From: "rt-1", To: "rt-2"}},
		"moving from rt-3 to rt-2":       {Sizing: size(2, "1Gi"), Placement: placed("rt-2"), Move: &isov1.Move{From: "rt-3", To: "rt-2"}},
		"a move to rt-2 asked, none yet": {Sizing: size(2, "1Gi"), Placement: placed("rt-1"), Move: &isov1.Move{To: "rt-2"}},
		"a move from the node it is on":  {Sizing: size(2, "1Gi"), Placement: placed("rt-1"), Move: &isov1.Move{From: "rt-1", To: "rt-1"}},
	}
	const stale, holder = "replica-a_0", "replica-b_1"
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "isochron-system", Name: isov1.LeaderLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	crawlerWith := func(s isov1.CrawlerVMStatus, decidedBy string) *isov1.CrawlerVM {
		s.DecidedBy = decidedBy
		return &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "tower-a"}, Spec: isov1.CrawlerVMSpec{RPS: 100}, Status: s}
	}
	for before, old := range statuses {
		for after, now := range statuses {
			t.Run(before+" to "+after, func(t *testing.T) {
				changes := reservation(crawlerWith(old, "")) != reservation(crawlerWith(now, ""))
				for _, decidedBy := range []string{stale, holder} {
					admitted, message := p.judge(t, request{op: admission.Update, resource: crawlervms, kind: crawlerKind, subresource: "status",
						object: custom(t, crawlerWith(now, decidedBy)), oldObject: custom(t, crawlerWith(old, stale)), user: manager, params: lease})
					if want := !changes || decidedBy == holder; admitted != want {
						t.Errorf("decidedBy %s: admitted %t (%s), want %t: the reservation as the Go code reads it changes %t (%+v to %+v)",
							decidedBy, admitted, message, want, changes, reservation(crawlerWith(old, "")), reservation(crawlerWith(now, "")))
					}
				}
			})
		}
	}
}

// held is what a crawler holds, as the manager reads it to tell whether a write changes
// a reservation (controllers' reservationOf): its size on its node, and the node it
// leaves while it moves.
type held struct {
	node, leaving string
	sizing        sizing.Result
}

func reservation(c *isov1.CrawlerVM) held {
	res, _ := inventory.Resident(c)
	l, _ := inventory.Leaving(c)
	return held{node: res.Node, leaving: l.Node, sizing: res.Sizing}
}

func withHugepages(s *isov1.Sizing) *isov1.Sizing {
	s.Hugepages = ptr.To(resource.MustParse("1Gi"))
	return s
}
