package controllers

import (
	"hash/fnv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

func TestFNV1aIsHashFNVs(t *testing.T) {
	h := fnv.New64a()
	_, _ = h.Write([]byte("rt-0001\x00123\x00"))
	if got, want := fnv1a(fnv1a(fnvOffset, "rt-0001"), "123"), h.Sum64(); got != want {
		t.Errorf("fnv1a = %x, hash/fnv %x", got, want)
	}
}

// The fingerprint changes with what gatherNodes reads, and only with that.
func TestNodesMemoFingerprint(t *testing.T) {
	node := func(name, rv string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	}
	pod := func(name, rv, nodeName string, phase corev1.PodPhase, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv, Labels: labels},
			Spec: corev1.PodSpec{NodeName: nodeName}, Status: corev1.PodStatus{Phase: phase}}
	}
	launcher := map[string]string{isov1.LabelCrawlerVM: "c", kubevirtv1.AppLabel: "virt-launcher"}
	cases := map[string]struct {
		change  func(nodes, pods toolscache.Store)
		changed bool
	}{
		"nothing":                    {func(_, _ toolscache.Store) {}, false},
		"a node added":               {func(n, _ toolscache.Store) { _ = n.Add(node("n2", "20")) }, true},
		"a node written":             {func(n, _ toolscache.Store) { _ = n.Update(node("n1", "21")) }, true},
		"a node deleted":             {func(n, _ toolscache.Store) { _ = n.Delete(node("n1", "10")) }, true},
		"a pod bound":                {func(_, p toolscache.Store) { _ = p.Add(pod("p2", "22", "n1", corev1.PodPending, nil)) }, true},
		"a bound pod deleted":        {func(_, p toolscache.Store) { _ = p.Delete(pod("p1", "11", "n1", corev1.PodRunning, nil)) }, true},
		"a bound pod finished":       {func(_, p toolscache.Store) { _ = p.Update(pod("p1", "23", "n1", corev1.PodSucceeded, nil)) }, true},
		"an unbound pod":             {func(_, p toolscache.Store) { _ = p.Add(pod("p3", "24", "", corev1.PodPending, nil)) }, false},
		"a crawler's launcher bound": {func(_, p toolscache.Store) { _ = p.Add(pod("l1", "25", "n1", corev1.PodRunning, launcher)) }, false},
		// Without a hash that mixes its bits, these two writes summed to the same fingerprint.
		"two writes at once": {func(n, p toolscache.Store) {
			_ = n.Update(node("n1", "401"))
			_ = p.Update(pod("p1", "403", "n1", corev1.PodRunning, nil))
		}, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			nodes, pods := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
			_ = nodes.Add(node("n1", "10"))
			_ = pods.Add(pod("p1", "11", "n1", corev1.PodRunning, nil))
			if name == "two writes at once" {
				_ = nodes.Update(node("n1", "400"))
				_ = pods.Update(pod("p1", "400", "n1", corev1.PodRunning, nil))
			}
			m := &nodesMemo{stores: []toolscache.Store{nodes, pods, toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)}}
			before, _ := m.fingerprint()
			m.keep(&clusterInventory{}, before)
			tc.change(nodes, pods)
			if _, _, kept := m.get(); kept == tc.changed {
				t.Errorf("kept inventory returned: %v, want %v", kept, !tc.changed)
			}
		})
	}
}
