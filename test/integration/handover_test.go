package integration

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/test/support/scale"
)

// A spec changed while no replica led (an upgrade's or an uninstall's gap) is decided by
// the next leader with nothing else happening to the crawler. That leader's first
// reconcile of it must take in the cache's copy after it has read every reservation from
// the API server: taken in before, the reservation it inherits stays "assumed", as if it
// were the leader's own decision on its way to the cache, and the crawler waits for a
// cache update that never comes (seen on the local cluster: a crawler's spec change
// unjudged for minutes after an upgrade, until its next event).
func TestNewLeaderDecidesASpecChangedBetweenLeaders(t *testing.T) {
	ns := namespace(t, "between")
	registerNodes(t, "bl", 1, 16)
	cvm := scale.Crawler(ns, "changed", 100, false)
	cvm.Spec.Placement = &isov1.Placement{NodeSelector: map[string]string{"pool": "bl"}}
	createAll(t, []*isov1.CrawlerVM{cvm})

	stopA := replica(t, "a", 2)
	waitDecided(t, ns, 1, time.Minute)
	stopA()

	ctx := context.Background()
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cvm), cvm); err != nil {
		t.Fatal(err)
	}
	changed := cvm.DeepCopy()
	changed.Spec.Probe = &isov1.Probe{Duration: &metav1.Duration{Duration: 20 * time.Second}}
	if err := env.Client.Patch(ctx, changed, client.MergeFrom(cvm)); err != nil {
		t.Fatal(err)
	}

	stopB := replica(t, "b", 2)
	defer stopB()
	waitDecided(t, ns, 1, time.Minute)
}
