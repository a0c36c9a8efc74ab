package placer

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// nodesMemo keeps the last inventory gatherNodes built, with a fingerprint of what it was
// built from: the resourceVersion of every Node, ContentionProfile and NodeCalibration in
// the cache, and the generation of the node books (what the pods bound to each node hold,
// nodebooks.Books). While the fingerprint is unchanged, gatherNodes returns the kept
// inventory: a batch of decisions no longer copies, sorts and converts every Node of the
// cluster, which was a third of the manager's CPU during a bulk apply (docs/placement.md).
// The fingerprint reads the informers' stores directly, without copying an object, and
// costs the number of nodes, whatever the number of pods.
//
// It is taken before the objects are listed, so a kept inventory is never older than its
// fingerprint: a change stored between the two only costs one more build.
type nodesMemo struct {
	// stores are the informers' stores of Nodes, ContentionProfiles and NodeCalibrations;
	// nil keeps nothing.
	stores []toolscache.Store
	// books is the generation of what the pods bound to each node hold.
	books func() uint64
	mu    sync.Mutex
	inv   *clusterInventory
	at    fingerprint
}

// fingerprint sums a hash of each object's identity and resourceVersion, so that the
// stores' order does not matter.
type fingerprint struct {
	objects int
	sum     uint64
}

// setup finds the informers' stores in c (the manager's cache); books is the node books'
// generation.
func (m *nodesMemo) setup(ctx context.Context, c cache.Informers, books func() uint64) error {
	var stores []toolscache.Store
	for _, obj := range []client.Object{&corev1.Node{}, &isov1.ContentionProfile{}, &isov1.NodeCalibration{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("the cache's informer of %T: %w", obj, err)
		}
		s, ok := inf.(interface{ GetStore() toolscache.Store })
		if !ok {
			return nil // an informer without a store (not client-go's): keep nothing
		}
		stores = append(stores, s.GetStore())
	}
	m.books, m.stores = books, stores
	return nil
}

// fingerprint is the current fingerprint; ok is false when there are no stores.
func (m *nodesMemo) fingerprint() (fingerprint, bool) {
	if m.stores == nil {
		return fingerprint{}, false
	}
	f := fingerprint{sum: mix(m.books())}
	for i, s := range m.stores {
		kind := fnv1a(fnvOffset, storeNames[i])
		for _, item := range s.List() {
			o, ok := item.(client.Object)
			if !ok {
				continue
			}
			// A resourceVersion is the etcd revision of the object's last write, which no
			// other write shares; with the kind and name, a replaced object differs too.
			f.sum += mix(fnv1a(fnv1a(kind, o.GetName()), o.GetResourceVersion()))
			f.objects++
		}
	}
	return f, true
}

// storeNames tell the stores apart in the fingerprint (a Node and its NodeCalibration
// share a name).
var storeNames = []string{"Node", "ContentionProfile", "NodeCalibration"}

// mix is SplitMix64's finaliser. The fingerprint sums one hash per object, so each must
// look random: FNV-1a alone changes almost linearly with the last digits of a
// resourceVersion, and two objects written at once cancelled out in the sum (a
// NodeCalibration 406 -> 415 and a ContentionProfile 407 -> 418 summed the same), which
// kept an inventory without the new calibration.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// FNV-1a (hash/fnv's 64-bit variant) over strings, without hash/fnv's allocations.
const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

func fnv1a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	h ^= 0 // a separator, so that ("ab", "c") and ("a", "bc") differ
	return h * fnvPrime
}

// get returns the kept inventory when its fingerprint is current, and the fingerprint to
// keep a new one under. A kept inventory is never changed: it is shared.
func (m *nodesMemo) get() (*clusterInventory, fingerprint, bool) {
	f, ok := m.fingerprint()
	if !ok {
		return nil, f, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inv == nil || m.at != f {
		return nil, f, false
	}
	return m.inv, f, true
}

// keep keeps inv, built after fingerprint f was taken, and returns it.
func (m *nodesMemo) keep(inv *clusterInventory, f fingerprint) *clusterInventory {
	if m.stores == nil {
		return inv
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inv, m.at = inv, f
	return inv
}
