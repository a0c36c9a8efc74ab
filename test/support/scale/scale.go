// Package scale makes the crawler populations of the scale tests and the placement
// benchmark (hack/bench-placement), creates them in parallel, and checks the invariants a
// placement must keep: no node's CPUs oversubscribed, every crawler on a node predicted
// within its budget.
package scale

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/placement"
)

// Crawler is a CrawlerVM of rps requests per second with a 10 ms tolerance on dedicated
// CPUs, or 100 ms on the shared pool.
func Crawler(ns, name string, rps int32, shared bool) *isov1.CrawlerVM {
	c := &isov1.CrawlerVM{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: isov1.CrawlerVMSpec{
			RPS:         rps,
			ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}},
			Guest:       isov1.Guest{Image: "quay.io/isochron/crawler:0.1", Memory: resource.MustParse("1Gi")},
		},
	}
	if shared {
		c.Spec.CPUPlacement = isov1.CPUPlacementShared
		c.Spec.ErrorBudget.Tolerance.Duration = 100 * time.Millisecond
	}
	return c
}

// Mix is n crawlers of 50 to 1,000 rps (seeded), one in three on the shared pool, all
// selecting the nodes labelled pool=<pool>.
func Mix(ns, pool string, n int, seed int64) []*isov1.CrawlerVM {
	rng := rand.New(rand.NewSource(seed))
	out := make([]*isov1.CrawlerVM, 0, n)
	for i := 0; i < n; i++ {
		c := Crawler(ns, fmt.Sprintf("c%05d", i), int32(50+rng.Intn(950)), i%3 == 0)
		c.Spec.Placement = &isov1.Placement{NodeSelector: map[string]string{"pool": pool}}
		out = append(out, c)
	}
	return out
}

// CreateAll creates objs with parallel requests, as a GitOps tool applying a directory
// would.
func CreateAll[T client.Object](ctx context.Context, c client.Client, objs []T, parallel int) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(objs))
	sem := make(chan struct{}, parallel)
	for _, o := range objs {
		wg.Add(1)
		go func(o client.Object) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := c.Create(ctx, o); err != nil {
				errs <- fmt.Errorf("creating %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
			}
		}(o)
	}
	wg.Wait()
	close(errs)
	return <-errs // the first error, or nil
}

// HeldMilli is the CPU a crawler's reservation holds: its exclusive CPUs, or its request
// in the shared pool.
func HeldMilli(s placement.Resident) int64 {
	if s.Sizing.Dedicated() {
		return int64(s.Sizing.HostCPUs) * 1000
	}
	return s.Sizing.CPURequestMilli
}

// Violations checks what placement promised of the crawlers' reservations on nodes: on
// every node the CPUs held fit allocatable (a moving crawler holds both its nodes), and
// every crawler there is predicted within its budget. It returns one line per broken
// promise.
func Violations(nodes []*corev1.Node, crawlers []isov1.CrawlerVM) []string {
	byNode := map[string][]model.Workload{}
	used := map[string]int64{}
	for i := range crawlers {
		for _, r := range inventory.Residents(&crawlers[i]) {
			byNode[r.Node] = append(byNode[r.Node], r.Workload)
			used[r.Node] += HeldMilli(r)
		}
	}
	var out []string
	for _, n := range nodes {
		pn := inventory.Node(n, nil, placement.Held{}, nil)
		if used[n.Name] > pn.CPUMilli {
			out = append(out, fmt.Sprintf("node %s oversubscribed: %dm of %dm allocatable CPU held", n.Name, used[n.Name], pn.CPUMilli))
		}
		for _, p := range model.Evaluate(model.Node{CPUs: pn.CapacityCPUs, Params: pn.Params}, byNode[n.Name]) {
			if !p.Within {
				out = append(out, fmt.Sprintf("node %s: %s predicted %v (%s), over its budget", n.Name, p.Key, p.Error, p.Cause))
			}
		}
	}
	return out
}
