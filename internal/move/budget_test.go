package move

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// crawlerMoved is a crawler of namespace ns whose last move, or move under way, was for
// reason and decided ago before t0.
func crawlerMoved(name string, reason isov1.MoveReason, ago time.Duration, underWay bool) isov1.CrawlerVM {
	c := isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name}}
	if reason == "" {
		return c
	}
	at := metav1.NewTime(t0.Add(-ago))
	if underWay {
		c.Status.Move = &isov1.Move{Reason: reason, StartTime: at}
	} else {
		c.Status.LastMove = &isov1.MoveRecord{Reason: reason, StartTime: at, EndTime: at}
	}
	return c
}

func TestBudgetWait(t *testing.T) {
	b := Budget{Interval: 10 * time.Minute, PerNamespace: 2}
	for _, tc := range []struct {
		name      string
		crawler   isov1.CrawlerVM
		namespace []isov1.CrawlerVM
		wait      time.Duration
		why       string
	}{
		{name: "never moved, nobody else did", crawler: crawlerMoved("a", "", 0, false)},
		{name: "its own request 4 min ago", crawler: crawlerMoved("a", isov1.MoveRequested, 4*time.Minute, false),
			wait: 6 * time.Minute, why: "--requested-move-interval"},
		{name: "its own request under way", crawler: crawlerMoved("a", isov1.MoveRequested, time.Minute, true),
			wait: 9 * time.Minute, why: "moved on a request 1m0s ago"},
		{name: "its own request 10 min ago", crawler: crawlerMoved("a", isov1.MoveRequested, 10*time.Minute, false)},
		{name: "a drain 1 min ago is not counted", crawler: crawlerMoved("a", isov1.MoveEvacuation, time.Minute, false)},
		{name: "a drain under way hides an older request", crawler: withLast(crawlerMoved("a", isov1.MoveEvacuation, time.Minute, true), isov1.MoveRequested, 2*time.Minute)},
		{name: "one other in the namespace", crawler: crawlerMoved("a", "", 0, false),
			namespace: []isov1.CrawlerVM{crawlerMoved("b", isov1.MoveRequested, time.Minute, false)}},
		{name: "two others: spent until the older leaves the window", crawler: crawlerMoved("a", "", 0, false),
			namespace: []isov1.CrawlerVM{
				crawlerMoved("b", isov1.MoveRequested, time.Minute, false),
				crawlerMoved("c", isov1.MoveRequested, 7*time.Minute, true),
				crawlerMoved("d", isov1.MoveRefuted, time.Minute, false),
				crawlerMoved("e", isov1.MoveRequested, 11*time.Minute, false),
			},
			wait: 3 * time.Minute, why: "namespace tenant moved on request 2 times in the last 10m0s"},
		{name: "three others under a lowered limit: the second oldest frees it", crawler: crawlerMoved("a", "", 0, false),
			namespace: []isov1.CrawlerVM{
				crawlerMoved("b", isov1.MoveRequested, time.Minute, false),
				crawlerMoved("c", isov1.MoveRequested, 8*time.Minute, false),
				crawlerMoved("d", isov1.MoveRequested, 5*time.Minute, false),
			},
			wait: 5 * time.Minute, why: "3 times"},
		{name: "itself in the list is not counted twice", crawler: crawlerMoved("a", isov1.MoveRequested, 11*time.Minute, false),
			namespace: []isov1.CrawlerVM{
				crawlerMoved("a", isov1.MoveRequested, 11*time.Minute, false),
				crawlerMoved("b", isov1.MoveRequested, time.Minute, false),
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wait, why := b.Wait(t0, &tc.crawler, tc.namespace)
			if wait != tc.wait || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
				t.Errorf("Wait = %s, %q; want %s, containing %q", wait, why, tc.wait, tc.why)
			}
		})
	}
}

func withLast(c isov1.CrawlerVM, reason isov1.MoveReason, ago time.Duration) isov1.CrawlerVM {
	at := metav1.NewTime(t0.Add(-ago))
	c.Status.LastMove = &isov1.MoveRecord{Reason: reason, StartTime: at, EndTime: at}
	return c
}

func TestBudgetValidate(t *testing.T) {
	for _, tc := range []struct {
		b    Budget
		flag string
	}{
		{b: DefaultBudget},
		{b: Budget{Interval: 0, PerNamespace: 1}, flag: "--requested-move-interval"},
		{b: Budget{Interval: time.Minute, PerNamespace: 0}, flag: "--requested-moves-per-namespace"},
	} {
		err := tc.b.Validate()
		if (err == nil) != (tc.flag == "") || (err != nil && !strings.Contains(err.Error(), tc.flag)) {
			t.Errorf("%+v: %v, want an error naming %q", tc.b, err, tc.flag)
		}
	}
}

func TestEvacuationOf(t *testing.T) {
	for _, tc := range []struct {
		marked, cordoned, external bool
		want                       Evacuation
	}{
		{marked: true, cordoned: true, external: true, want: Drain},
		{marked: true, cordoned: false, external: true, want: Evicted},
		{marked: false, cordoned: true, external: true, want: Stay}, // the drain's eviction has not come yet
		{marked: false, cordoned: true, external: false, want: DrainAdopted},
		{marked: false, cordoned: false, external: false, want: Stay},
		{marked: false, cordoned: false, external: true, want: Stay},
	} {
		if got := EvacuationOf(tc.marked, tc.cordoned, tc.external); got != tc.want {
			t.Errorf("EvacuationOf(marked %v, cordoned %v, external %v) = %d, want %d", tc.marked, tc.cordoned, tc.external, got, tc.want)
		}
	}
}
