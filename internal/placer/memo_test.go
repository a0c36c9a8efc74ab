package placer

import (
	"hash/fnv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

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
	cal := func(name, rv string) *isov1.NodeCalibration {
		return &isov1.NodeCalibration{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	}
	cases := map[string]struct {
		change  func(nodes, cals toolscache.Store, books *uint64)
		changed bool
	}{
		"nothing":              {func(_, _ toolscache.Store, _ *uint64) {}, false},
		"a node added":         {func(n, _ toolscache.Store, _ *uint64) { _ = n.Add(node("n2", "20")) }, true},
		"a node written":       {func(n, _ toolscache.Store, _ *uint64) { _ = n.Update(node("n1", "21")) }, true},
		"a node deleted":       {func(n, _ toolscache.Store, _ *uint64) { _ = n.Delete(node("n1", "10")) }, true},
		"a pod bound, or gone": {func(_, _ toolscache.Store, b *uint64) { *b++ }, true},
		"a node's calibration": {func(_, c toolscache.Store, _ *uint64) { _ = c.Add(cal("n1", "22")) }, true},
		// Without a hash that mixes its bits, these two writes summed to the same fingerprint.
		"two writes at once": {func(n, c toolscache.Store, _ *uint64) {
			_ = n.Update(node("n1", "401"))
			_ = c.Update(cal("n1", "403"))
		}, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			nodes, cals := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
			_ = nodes.Add(node("n1", "10"))
			if name == "two writes at once" {
				_ = nodes.Update(node("n1", "400"))
				_ = cals.Add(cal("n1", "400"))
			}
			books := uint64(7)
			m := &nodesMemo{stores: []toolscache.Store{nodes, toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), cals}, books: func() uint64 { return books }}
			before, _ := m.fingerprint()
			m.keep(&clusterInventory{}, before)
			tc.change(nodes, cals, &books)
			if _, _, kept := m.get(); kept == tc.changed {
				t.Errorf("kept inventory returned: %v, want %v", kept, !tc.changed)
			}
		})
	}
}
