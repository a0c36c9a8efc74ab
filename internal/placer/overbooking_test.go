package placer

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

func TestYoungestFirst(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	crawler := func(name string, created, placed time.Duration, held bool) isov1.CrawlerVM {
		c := isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(t0.Add(created))}}
		if held {
			c.Status.Sizing = &isov1.Sizing{VCPUs: 1, HostCPUs: 2, CPURequest: resource.MustParse("2"), Memory: resource.MustParse("1Gi")}
			c.Status.Placement = &isov1.PlacementStatus{Node: "n1"}
			c.Status.Conditions = []metav1.Condition{{Type: isov1.ConditionPlaced, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(placed))}}
		}
		return c
	}
	for name, tc := range map[string]struct {
		cvms []isov1.CrawlerVM
		want []string
	}{
		"by the time each was placed": {
			cvms: []isov1.CrawlerVM{crawler("a", 0, 10*time.Second, true), crawler("b", time.Second, 5*time.Second, true), crawler("c", 2*time.Second, 20*time.Second, true)},
			want: []string{"ns/c", "ns/a", "ns/b"},
		},
		"placed at once: the one created last first": {
			cvms: []isov1.CrawlerVM{crawler("a", 0, time.Minute, true), crawler("b", time.Second, time.Minute, true)},
			want: []string{"ns/b", "ns/a"},
		},
		"the same times: by key": {
			cvms: []isov1.CrawlerVM{crawler("a", 0, time.Minute, true), crawler("b", 0, time.Minute, true)},
			want: []string{"ns/b", "ns/a"},
		},
		"no reservation, not listed": {
			cvms: []isov1.CrawlerVM{crawler("a", 0, time.Minute, true), crawler("waiting", time.Hour, 0, false)},
			want: []string{"ns/a"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, youngestFirst(tc.cvms)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
