package nodebooks

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/placement"
)

// pod is a pod of name bound to node, requesting cpu (and as much memory in Gi) in a
// Guaranteed container.
func pod(name, node, cpu string, mut ...func(*corev1.Pod)) *corev1.Pod {
	q := resource.MustParse(cpu)
	mem := resource.MustParse(cpu + "Gi")
	rl := corev1.ResourceList{corev1.ResourceCPU: q, corev1.ResourceMemory: mem}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: rl, Limits: rl}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, m := range mut {
		m(p)
	}
	return p
}

func finished(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }

func launcher(p *corev1.Pod) {
	p.Labels = map[string]string{kubevirtv1.AppLabel: "virt-launcher", isov1.LabelCrawlerVM: "c"}
}

func cpus(n int64) placement.Held {
	return placement.Held{CPUMilli: n * 1000, ExclusiveMilli: n * 1000, MemoryBytes: n << 30}
}

// Each step is one call of the reflector; after them, what each node holds and which
// nodes were released.
func TestBooks(t *testing.T) {
	type step func(b *Books) error
	add := func(p *corev1.Pod) step { return func(b *Books) error { return b.Add(p) } }
	update := func(p *corev1.Pod) step { return func(b *Books) error { return b.Update(p) } }
	del := func(p *corev1.Pod) step { return func(b *Books) error { return b.Delete(p) } }
	tombstone := func(p *corev1.Pod) step {
		return func(b *Books) error {
			return b.Delete(toolscache.DeletedFinalStateUnknown{Key: p.Namespace + "/" + p.Name, Obj: p})
		}
	}
	replace := func(ps ...*corev1.Pod) step {
		return func(b *Books) error {
			items := make([]interface{}, 0, len(ps))
			for _, p := range ps {
				items = append(items, p)
			}
			return b.Replace(items, "1")
		}
	}
	// A watch-list's initial stream arrives reduced by the reflector's own store.
	replaceReduced := func(ps ...*corev1.Pod) step {
		return func(b *Books) error {
			items := make([]interface{}, 0, len(ps))
			for _, p := range ps {
				r, err := Reduce(p)
				if err != nil {
					return err
				}
				items = append(items, r)
			}
			return b.Replace(items, "1")
		}
	}
	for name, tc := range map[string]struct {
		steps    []step
		want     map[string]placement.Held
		released []string
	}{
		"the initial list": {
			steps: []step{replace(pod("a", "n1", "2"), pod("b", "n1", "1"), pod("c", "n2", "4"))},
			want:  map[string]placement.Held{"n1": cpus(3), "n2": cpus(4)},
		},
		"the initial list streamed in, reduced": {
			steps: []step{replaceReduced(pod("a", "n1", "2"), pod("c", "n2", "4"))},
			want:  map[string]placement.Held{"n1": cpus(2), "n2": cpus(4)},
		},
		"a crawler's launcher holds nothing here (its reservation counts it)": {
			steps: []step{replace(pod("a", "n1", "2"), pod("l", "n1", "8", launcher))},
			want:  map[string]placement.Held{"n1": cpus(2)},
		},
		"a pod that finishes releases its node": {
			steps:    []step{replace(pod("a", "n1", "2"), pod("b", "n2", "1")), update(pod("a", "n1", "2", finished))},
			want:     map[string]placement.Held{"n2": cpus(1)},
			released: []string{"n1"},
		},
		"a deleted pod releases its node": {
			steps:    []step{replace(pod("a", "n1", "2")), del(pod("a", "n1", "2"))},
			want:     map[string]placement.Held{},
			released: []string{"n1"},
		},
		"a deletion missed by a broken watch (a tombstone) releases its node": {
			steps:    []step{replace(pod("a", "n1", "2")), tombstone(pod("a", "n1", "2"))},
			want:     map[string]placement.Held{},
			released: []string{"n1"},
		},
		"a relist without a pod releases its node": {
			steps:    []step{replace(pod("a", "n1", "2"), pod("b", "n2", "1")), replace(pod("b", "n2", "1"))},
			want:     map[string]placement.Held{"n2": cpus(1)},
			released: []string{"n1"},
		},
		"a pod that holds more releases nothing": {
			steps: []step{replace(pod("a", "n1", "2")), update(pod("a", "n1", "3"))},
			want:  map[string]placement.Held{"n1": cpus(3)},
		},
		"a pod resized down releases its node": {
			steps:    []step{replace(pod("a", "n1", "2")), update(pod("a", "n1", "1"))},
			want:     map[string]placement.Held{"n1": cpus(1)},
			released: []string{"n1"},
		},
		"a new pod releases nothing": {
			steps: []step{replace(), add(pod("a", "n1", "2"))},
			want:  map[string]placement.Held{"n1": cpus(2)},
		},
		"a launcher deleted releases nothing": {
			steps: []step{replace(pod("l", "n1", "8", launcher)), del(pod("l", "n1", "8", launcher))},
			want:  map[string]placement.Held{},
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := New()
			for _, s := range tc.steps {
				if err := s(b); err != nil {
					t.Fatal(err)
				}
			}
			got := map[string]placement.Held{}
			for _, n := range []string{"n1", "n2"} {
				if h := b.HeldOn(n); h != (placement.Held{}) {
					got[n] = h
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("held (-want +got):\n%s", diff)
			}
			rel := b.TakeReleased()
			slices.Sort(rel)
			if diff := cmp.Diff(tc.released, rel, cmpEmpty); diff != "" {
				t.Errorf("released (-want +got):\n%s", diff)
			}
			if !b.Synced() {
				t.Error("not synced after a Replace")
			}
		})
	}
}

var cmpEmpty = cmp.Comparer(func(a, b []string) bool { return len(a) == 0 && len(b) == 0 || slices.Equal(a, b) })

// The generation moves with what the nodes hold, and only then: the decisions' kept
// node inventory is rebuilt when, and only when, it changed.
func TestBooksGeneration(t *testing.T) {
	b := New()
	if err := b.Replace([]interface{}{pod("a", "n1", "2")}, "1"); err != nil {
		t.Fatal(err)
	}
	g := b.Gen()
	if err := b.Update(pod("a", "n1", "2", func(p *corev1.Pod) { p.Labels = map[string]string{"x": "y"} })); err != nil {
		t.Fatal(err)
	}
	if b.Gen() != g {
		t.Errorf("an update that changes nothing held moved the generation")
	}
	if err := b.Update(pod("a", "n1", "3")); err != nil {
		t.Fatal(err)
	}
	if b.Gen() == g {
		t.Errorf("a pod holding more left the generation as it was")
	}
}

// What the books keep of a pod is its key, node and sum: about a hundred bytes, however
// large the pod.
func TestReduceKeepsTheSum(t *testing.T) {
	p := pod("a", "n1", "2", func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}
		p.Spec.Overhead = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
	})
	r, err := Reduce(p)
	if err != nil {
		t.Fatal(err)
	}
	want := &Pod{Namespace: "ns", Name: "a", Node: "n1", Counts: true,
		Held: placement.Held{CPUMilli: 3000, ExclusiveMilli: 2000, MemoryBytes: 3 << 30}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if again, _ := Reduce(r); again != r {
		t.Error("reducing a reduced pod changed it")
	}
}
