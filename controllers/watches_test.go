package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// What a node frees (a pod that finishes there, a crawler that leaves it) wakes only the
// waiting crawlers that may run there: none where KubeVirt runs no VM.
func TestHelpedBy(t *testing.T) {
	rt := func(labels ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{
			kubevirtv1.NodeSchedulable: "true", kubevirtv1.CPUManager: "true", kubevirtv1.RealtimeLabel: "true"}}}
		for i := 0; i+1 < len(labels); i += 2 {
			n.Labels[labels[i]] = labels[i+1]
		}
		return n
	}
	waiting := func(name string, sel map[string]string, shared bool, tolerate ...string) isov1.CrawlerVM {
		c := isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		c.Spec.RPS = 100
		if shared {
			c.Spec.CPUPlacement = isov1.CPUPlacementShared
		}
		c.Spec.Placement = &isov1.Placement{NodeSelector: sel}
		for _, k := range tolerate {
			c.Spec.Placement.Tolerations = append(c.Spec.Placement.Tolerations, corev1.Toleration{Key: k, Operator: corev1.TolerationOpExists})
		}
		return c
	}
	all := []isov1.CrawlerVM{
		waiting("pool-a", map[string]string{"pool": "a"}, false),
		waiting("pool-b", map[string]string{"pool": "b"}, false),
		waiting("anywhere", nil, false),
		waiting("shared", nil, true),
		waiting("tolerant", nil, false, "rt"),
	}
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gp", Labels: map[string]string{"pool": "a"}}}
	tainted := rt("pool", "a")
	tainted.Spec.Taints = []corev1.Taint{{Key: "rt", Effect: corev1.TaintEffectNoSchedule}}
	cordoned := rt("pool", "a")
	cordoned.Spec.Unschedulable = true
	noRealtime := rt("pool", "a")
	delete(noRealtime.Labels, kubevirtv1.RealtimeLabel)
	for name, tc := range map[string]struct {
		node *corev1.Node
		want []string
	}{
		"an RT node of pool a":                 {node: rt("pool", "a"), want: []string{"pool-a", "anywhere", "shared", "tolerant"}},
		"a node KubeVirt runs no VM on":        {node: plain},
		"gone":                                 {node: nil},
		"tainted: those that tolerate it":      {node: tainted, want: []string{"tolerant"}},
		"cordoned: nobody":                     {node: cordoned},
		"no realtime: the shared crawler only": {node: noRealtime, want: []string{"shared"}},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, sel := range helpedBy(tc.node) {
				if diff := cmp.Diff(onNode("").opts, sel.opts); diff != "" {
					t.Fatalf("lists more than the waiting crawlers (-want +got):\n%s", diff)
				}
				for i := range all {
					if sel.keep(&all[i]) {
						got = append(got, all[i].Name)
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("woken (-want +got):\n%s", diff)
			}
		})
	}
}
