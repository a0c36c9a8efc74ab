package move

import (
	"fmt"
	"slices"
	"time"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
)

// Budget bounds the moves asked for outside isochron (MoveRequested: a migration someone
// created, an eviction of a launcher on a node nobody cordoned). Anyone who can edit a
// namespace can ask for them, and each live migration loads the nodes and the network the
// crawlers of other namespaces share: a crawler moves on request at most once per
// Interval, and a namespace's crawlers at most PerNamespace times per Interval. A drain
// (the node cordoned) and isochron's own moves are not counted.
type Budget struct {
	Interval     time.Duration
	PerNamespace int
}

// DefaultBudget is the manager's default (--requested-move-interval,
// --requested-moves-per-namespace): KubeVirt's workload updater, which migrates every VMI
// after a KubeVirt upgrade and asks again for those refused, still gets through a
// namespace of 50 crawlers in under two hours.
var DefaultBudget = Budget{Interval: 10 * time.Minute, PerNamespace: 5}

// Validate says what is wrong with b, naming the manager's flags.
func (b Budget) Validate() error {
	if b.Interval <= 0 {
		return fmt.Errorf("--requested-move-interval %s: give a positive duration, such as %s", b.Interval, DefaultBudget.Interval)
	}
	if b.PerNamespace < 1 {
		return fmt.Errorf("--requested-moves-per-namespace %d: give at least 1, such as %d", b.PerNamespace, DefaultBudget.PerNamespace)
	}
	return nil
}

// Wait is how long the requested move of crawler must wait for the budget, and why; 0 and
// "" when it may start now. namespace is every crawler of its namespace (the crawler
// itself among them or not): their moves under way or last ended, asked for within the
// last Interval, are what the namespace has spent.
func (b Budget) Wait(now time.Time, crawler *isov1.CrawlerVM, namespace []isov1.CrawlerVM) (time.Duration, string) {
	if at, ok := requestedAt(crawler); ok && now.Sub(at) < b.Interval {
		return at.Add(b.Interval).Sub(now), fmt.Sprintf("the crawler moved on a request %s ago, and moves on request at most once per %s (the manager's --requested-move-interval)",
			format.Duration(now.Sub(at)), format.Duration(b.Interval))
	}
	var spent []time.Time
	for i := range namespace {
		c := &namespace[i]
		if c.Name == crawler.Name {
			continue
		}
		if at, ok := requestedAt(c); ok && now.Sub(at) < b.Interval {
			spent = append(spent, at)
		}
	}
	if len(spent) < b.PerNamespace {
		return 0, ""
	}
	// The budget frees as the oldest of the spent moves leaves the window; with more than
	// PerNamespace spent (the limit was lowered), as enough of them leave it.
	slices.SortFunc(spent, time.Time.Compare)
	free := spent[len(spent)-b.PerNamespace].Add(b.Interval)
	return free.Sub(now), fmt.Sprintf("the crawlers of namespace %s moved on request %d times in the last %s, the most the manager allows (--requested-moves-per-namespace)",
		crawler.Namespace, len(spent), format.Duration(b.Interval))
}

// requestedAt is when the crawler's move under way, or else its last move, was decided,
// if it was one asked for outside isochron.
func requestedAt(c *isov1.CrawlerVM) (time.Time, bool) {
	if m := c.Status.Move; m != nil {
		if m.Reason == isov1.MoveRequested {
			return m.StartTime.Time, true
		}
		return time.Time{}, false
	}
	if l := c.Status.LastMove; l != nil && l.Reason == isov1.MoveRequested {
		return l.StartTime.Time, true
	}
	return time.Time{}, false
}

// Evacuation is what an evacuation mark or a cordon asks of a crawler's running VMI.
type Evacuation int

const (
	// Stay: no mark on the VMI's node, or one for another node (KubeVirt clears it).
	Stay Evacuation = iota
	// Drain: the VMI is marked on a cordoned node, which only an administrator or the
	// cluster's own controllers can cordon: the crawler leaves (MoveEvacuation).
	Drain
	// Evicted: the VMI is marked on a node nobody cordoned, which anyone who may evict
	// the namespace's pods can cause: a request to move this crawler alone
	// (MoveRequested, within the Budget).
	Evicted
	// DrainAdopted: a VMI adopted from an earlier release (no evictionStrategy External,
	// so never marked) on a cordoned node leaves as for a drain.
	DrainAdopted
)

// EvacuationOf says what the crawler's VMI running on its node is asked: marked is
// whether status.evacuationNodeName names that node, cordoned whether the node is
// cordoned, external whether the VMI has evictionStrategy External.
func EvacuationOf(marked, cordoned, external bool) Evacuation {
	switch {
	case marked && cordoned:
		return Drain
	case marked:
		return Evicted
	case cordoned && !external:
		return DrainAdopted
	}
	return Stay
}
