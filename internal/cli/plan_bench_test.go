package cli

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
)

// The plan benchmarks run Plan, the code path of `isochronctl plan`, on generated
// clusters. Figures and the commands to repeat them are in docs/contention-model.md,
// "Performance". With the same mix of crawlers, 1k/100 against 10k/1k shows the cost of
// more nodes per decision, and 10k/100 that of a cluster ten times too small (most
// decisions find no node and explain why). The light mix packs about ten times more
// crawlers on each node: 1k/100 against light 10k/100 shows the cost of neighbours.

func BenchmarkPlan1kOn100(b *testing.B)       { benchmarkPlan(b, 1_000, 100, false) }
func BenchmarkPlan10kOn100(b *testing.B)      { benchmarkPlan(b, 10_000, 100, false) }
func BenchmarkPlan10kOn1k(b *testing.B)       { benchmarkPlan(b, 10_000, 1_000, false) }
func BenchmarkPlan10kLightOn100(b *testing.B) { benchmarkPlan(b, 10_000, 100, true) }

// BenchmarkPlanNodes is how the cost grows with nodes: the same 10,000 crawlers on 250
// to 2,000 nodes (on 250 and 500 most find no node; on 2,000 the cluster is half empty).
func BenchmarkPlanNodes(b *testing.B) {
	for _, nodes := range []int{250, 500, 1_000, 2_000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchmarkPlan(b, 10_000, nodes, false) })
	}
}

// BenchmarkPlanNeighbours is how the cost grows with neighbours per node: 1,000 to
// 10,000 light crawlers on the same 100 nodes, about 10 to 92 per node.
func BenchmarkPlanNeighbours(b *testing.B) {
	for _, crawlers := range []int{1_000, 2_500, 5_000, 10_000} {
		b.Run(fmt.Sprintf("crawlers=%d", crawlers), func(b *testing.B) { benchmarkPlan(b, crawlers, 100, true) })
	}
}

func benchmarkPlan(b *testing.B, crawlers, nodes int, light bool) {
	inv := benchInventory(crawlers, nodes, light)
	b.ReportAllocs()
	b.ResetTimer()
	var r Result
	for b.Loop() {
		r = Plan(inv)
	}
	placed := len(inv.CrawlerVMs) - len(r.Unplaced())
	busiest := 0
	for _, n := range r.Nodes {
		busiest = max(busiest, len(n.Crawlers))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*crawlers), "ns/decision")
	b.ReportMetric(float64(placed)/float64(crawlers)*100, "%placed")
	b.ReportMetric(float64(placed)/float64(nodes), "crawlers/node")
	b.ReportMetric(float64(busiest), "max-crawlers/node")
}

// benchInventory is a cluster of nodes in three classes (16, 32 and 64 CPUs, 2 of them
// reserved for the host, 2Mi hugepages, the static CPU Manager; each class with its
// ContentionProfile) and a realistic mix of crawlers: 50 to 2,000 rps, 10/50/100 ms
// budgets, two thirds on dedicated CPUs, one in ten with an RT-NIC, one in five spread.
// At 1k/100 and 10k/1k the mix asks for about as many CPUs as the nodes have, so the
// last ones placed find the cluster nearly full and some do not fit. The light mix is
// small crawlers (20 to 200 rps, 50 or 100 ms, shared CPUs). Same arguments, same
// inventory.
func benchInventory(crawlers, nodes int, light bool) *Inventory {
	r := rand.New(rand.NewPCG(uint64(crawlers), uint64(nodes)))
	inv := &Inventory{}
	classes := []struct {
		name string
		cpus int64
	}{{"c16", 16}, {"c32", 32}, {"c64", 64}}
	for _, c := range classes {
		p := isov1.ContentionProfile{ObjectMeta: metav1.ObjectMeta{Name: c.name}}
		p.Spec.NodeSelector = metav1.LabelSelector{MatchLabels: map[string]string{"isochron.io/node-class": c.name}}
		p.Spec.Host = &isov1.HostProfile{ // KVM: CFS slices, vhost-net
			SchedulerGranularity: &metav1.Duration{Duration: 3 * time.Millisecond},
			IOCostPerRequest:     &metav1.Duration{Duration: 100 * time.Microsecond},
		}
		if c.cpus == 64 { // a newer CPU
			p.Spec.Crawler = &isov1.CrawlerProfile{CPUPerRequest: &metav1.Duration{Duration: time.Millisecond}}
		}
		inv.Profiles = append(inv.Profiles, p)
	}
	for i := range nodes {
		c := classes[i%len(classes)]
		gi := func(n int64) resource.Quantity { return *resource.NewQuantity(n<<30, resource.BinarySI) }
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("node-%04d", i),
			Labels: map[string]string{
				corev1.LabelHostname:       fmt.Sprintf("node-%04d", i),
				"isochron.io/node-class":   c.name,
				kubevirtv1.NodeSchedulable: "true",
				kubevirtv1.CPUManager:      "true",
				kubevirtv1.RealtimeLabel:   "true",
			},
		}}
		n.Status.Capacity = corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(c.cpus, resource.DecimalSI),
			corev1.ResourceMemory: gi(4 * c.cpus),
			"hugepages-2Mi":       gi(2 * c.cpus),
		}
		n.Status.Allocatable = corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(c.cpus-2, resource.DecimalSI),
			corev1.ResourceMemory: gi(4*c.cpus - 4),
			"hugepages-2Mi":       gi(2 * c.cpus),
		}
		inv.Nodes = append(inv.Nodes, n)
	}
	tolerances := []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}
	memories := []string{"1Gi", "2Gi", "4Gi"}
	for i := range crawlers {
		c := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("site-%02d", i%50), Name: fmt.Sprintf("crawler-%05d", i)}}
		c.Spec = isov1.CrawlerVMSpec{
			RPS:          int32(50 + r.IntN(1951)),
			ErrorBudget:  isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: tolerances[r.IntN(3)]}, Objective: "99.999"},
			Guest:        isov1.Guest{Image: "quay.io/isochron/crawler:0.1", Memory: resource.MustParse(memories[r.IntN(3)])},
			CPUPlacement: isov1.CPUPlacementDedicated,
			Placement:    &isov1.Placement{Policy: isov1.PlacementPolicyPack},
		}
		if i%3 == 2 {
			c.Spec.CPUPlacement = isov1.CPUPlacementShared
		}
		if light {
			c.Spec.RPS = int32(20 + r.IntN(181))
			c.Spec.ErrorBudget.Tolerance.Duration = tolerances[1+r.IntN(2)]
			c.Spec.Guest.Memory = resource.MustParse("512Mi")
			c.Spec.CPUPlacement = isov1.CPUPlacementShared
		}
		if r.IntN(5) == 0 {
			c.Spec.Placement.Policy = isov1.PlacementPolicySpread
		}
		if r.IntN(10) == 0 {
			c.Spec.RTNIC = &isov1.RTNIC{NetworkName: "rt-net", Deadline: metav1.Duration{Duration: 5 * time.Millisecond}, MinBandwidth: resource.MustParse("10M")}
		}
		inv.CrawlerVMs = append(inv.CrawlerVMs, c)
	}
	inventory.SortCrawlers(inv.CrawlerVMs)
	return inv
}
