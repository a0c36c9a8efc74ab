// Package nodebooks keeps, per node, what the pods bound there hold of it: the other side
// of a node's books, beside the crawlers' reservations (package ledger). It is fed by a
// reflector on the pods that hold something (bound, not finished), and keeps each pod
// only as its node and what it holds, reduced as it arrives: a cluster's pods cost the
// manager about a hundred bytes each, and a decision reads a node's sum, whatever the
// number of pods. It is not pure (a mutex, a reflector), which is why it is not in
// package placement.
package nodebooks

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/placement"
)

// Selector is the field selector of the pods the books watch: bound to a node and not
// finished, the only ones that hold anything (inventory.Holds). The API server filters
// them: pending and finished pods never reach the manager; a pod that finishes leaves the
// selection, which the watch reports as its deletion.
var Selector = fields.AndSelectors(
	fields.OneTermNotEqualSelector("spec.nodeName", ""),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
)

// Books is what the pods bound to each node hold. It is the store of its reflector
// (client-go's toolscache.ReflectorStore and TransformingStore), which reduces every pod to a Pod as it arrives (also
// while the initial list streams in, as a watch-list); the decisions read Held and
// HeldOn. Safe for concurrent use.
type Books struct {
	mu    sync.Mutex
	pods  map[string]Pod
	nodes map[string]placement.Held
	gen   uint64
	// synced is closed by the first Replace (the reflector's initial list).
	synced     chan struct{}
	syncedOnce sync.Once
	// released are the nodes where a pod stopped holding something, not yet taken
	// (TakeReleased); signal has a value when there are some.
	released map[string]bool
	signal   chan struct{}
}

// New is empty books, not synced.
func New() *Books {
	return &Books{pods: map[string]Pod{}, nodes: map[string]placement.Held{}, synced: make(chan struct{}),
		released: map[string]bool{}, signal: make(chan struct{}, 1)}
}

// Pod is what the books keep of a pod: its key, its node and what it holds there
// (inventory.PodHeld). Counts is false for a pod that holds nothing (a crawler's
// virt-launcher pod, whose crawler's reservation counts it).
type Pod struct {
	Namespace, Name, Node string
	Held                  placement.Held
	Counts                bool
}

// GetObjectMeta gives a Pod the key of its pod in the reflector's stores
// (toolscache.MetaNamespaceKeyFunc).
func (p *Pod) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}
}

// Reduce is the books' transform: a pod reduced to what they keep of it. It takes a Pod
// as it is (the reflector may hand over an item twice).
func Reduce(obj interface{}) (interface{}, error) {
	switch o := obj.(type) {
	case *Pod:
		return o, nil
	case *corev1.Pod:
		held, counts := inventory.PodHeld(o)
		return &Pod{Namespace: o.Namespace, Name: o.Name, Node: o.Spec.NodeName, Held: held, Counts: counts}, nil
	case toolscache.DeletedFinalStateUnknown:
		inner, err := Reduce(o.Obj)
		return toolscache.DeletedFinalStateUnknown{Key: o.Key, Obj: inner}, err
	}
	return nil, fmt.Errorf("node books: %T is not a pod", obj)
}

// HeldOn is what the pods bound to node hold of it.
func (b *Books) HeldOn(node string) placement.Held {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nodes[node]
}

// Gen changes whenever what a node's pods hold does.
func (b *Books) Gen() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gen
}

// Len is the number of pods the books keep.
func (b *Books) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pods)
}

// Synced says whether the books hold the initial list.
func (b *Books) Synced() bool {
	select {
	case <-b.synced:
		return true
	default:
		return false
	}
}

// WaitForSync waits until the books hold the initial list, or ctx ends.
func (b *Books) WaitForSync(ctx context.Context) error {
	select {
	case <-b.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the pods bound to nodes to be listed: %w", ctx.Err())
	}
}

// Released has a value when a pod stopped holding something on a node since the last
// TakeReleased.
func (b *Books) Released() <-chan struct{} { return b.signal }

// TakeReleased are the nodes where a pod stopped holding something (it finished, or was
// deleted, or holds less) since the last call.
func (b *Books) TakeReleased() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.released))
	for n := range b.released {
		out = append(out, n)
	}
	clear(b.released)
	return out
}

// put records p in place of what its key held, and says which node it released
// something on, if any. Called with b.mu held.
func (b *Books) put(key string, p *Pod) {
	old, had := b.pods[key]
	if had && p != nil && old == *p {
		return
	}
	if had {
		b.sub(old)
	}
	if p == nil || !p.Counts {
		delete(b.pods, key)
	} else {
		b.pods[key] = *p
		b.add(*p)
	}
	if had && old.Counts && (p == nil || !p.Counts || p.Node != old.Node || !covers(p.Held, old.Held)) {
		b.released[old.Node] = true
		select {
		case b.signal <- struct{}{}:
		default:
		}
	}
}

func (b *Books) add(p Pod) {
	if !p.Counts {
		return
	}
	b.nodes[p.Node] = b.nodes[p.Node].Plus(p.Held)
	b.gen++
}

func (b *Books) sub(p Pod) {
	if !p.Counts {
		return
	}
	h := b.nodes[p.Node].Minus(p.Held)
	if h == (placement.Held{}) {
		delete(b.nodes, p.Node)
	} else {
		b.nodes[p.Node] = h
	}
	b.gen++
}

// covers says whether a holds at least all of b.
func covers(a, b placement.Held) bool {
	return a.CPUMilli >= b.CPUMilli && a.ExclusiveMilli >= b.ExclusiveMilli && a.MemoryBytes >= b.MemoryBytes && a.HugepagesBytes >= b.HugepagesBytes
}

func keyOf(p *Pod) string { return p.Namespace + "/" + p.Name }

func reduced(obj interface{}) (*Pod, error) {
	r, err := Reduce(obj)
	if err != nil {
		return nil, err
	}
	if d, ok := r.(toolscache.DeletedFinalStateUnknown); ok {
		r = d.Obj
	}
	p, ok := r.(*Pod)
	if !ok {
		return nil, fmt.Errorf("node books: %T is not a pod", obj)
	}
	return p, nil
}

// Add is toolscache.ReflectorStore's.
func (b *Books) Add(obj interface{}) error { return b.Update(obj) }

// Update is toolscache.ReflectorStore's.
func (b *Books) Update(obj interface{}) error {
	p, err := reduced(obj)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.put(keyOf(p), p)
	return nil
}

// Delete is toolscache.ReflectorStore's.
func (b *Books) Delete(obj interface{}) error {
	p, err := reduced(obj)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.put(keyOf(p), nil)
	return nil
}

// Replace is toolscache.ReflectorStore's: the reflector's list (the first, or one after its watch
// broke). A pod that is gone from it, or holds less, releases what it held.
func (b *Books) Replace(items []interface{}, _ string) error {
	next := make(map[string]*Pod, len(items))
	for _, it := range items {
		p, err := reduced(it)
		if err != nil {
			return err
		}
		next[keyOf(p)] = p
	}
	b.mu.Lock()
	for key := range b.pods {
		if _, ok := next[key]; !ok {
			b.put(key, nil)
		}
	}
	for key, p := range next {
		b.put(key, p)
	}
	b.mu.Unlock()
	b.syncedOnce.Do(func() { close(b.synced) })
	return nil
}

// Resync is toolscache.ReflectorStore's: nothing to do.
func (b *Books) Resync() error { return nil }

// Transformer makes the reflector's own store reduce pods as they arrive
// (toolscache.TransformingStore): a watch-list's initial stream is held reduced, not as
// whole pods.
func (b *Books) Transformer() toolscache.TransformFunc { return Reduce }

// Run keeps the books from the API server of cfg until ctx ends: a reflector on the pods
// of Selector, in protobuf (the cheapest to decode). With client-go's WatchListClient
// feature (the manager enables it) the initial list streams in, one pod at a time.
func (b *Books) Run(ctx context.Context, cfg *rest.Config) error {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("node books: %w", err)
	}
	lw := toolscache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "pods", metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.FieldSelector = Selector.String() })
	r := toolscache.NewReflectorWithOptions(lw, &corev1.Pod{}, b, toolscache.ReflectorOptions{Name: "node-books", ResyncPeriod: 0, MinWatchTimeout: 5 * time.Minute})
	r.RunWithContext(ctx)
	return nil
}
