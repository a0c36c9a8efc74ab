package placement

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"isochron.io/isochron/internal/sizing"
)

func TestOverbooked(t *testing.T) {
	const gi = int64(1) << 30
	node := func(name string, cpus int64, held Held) Node {
		return Node{Name: name, CPUMilli: cpus * 1000, MemoryBytes: 64 * gi, HugepagesBytes: 32 * gi, CapacityCPUs: float64(cpus), Held: held}
	}
	res := func(key, node string, hostCPUs int32) Resident {
		return Resident{Key: key, Node: node, Sizing: sizing.Result{VCPUs: hostCPUs - 1, HostCPUs: hostCPUs, MemoryBytes: gi}}
	}
	for name, tc := range map[string]struct {
		nodes     []Node
		residents []Resident
		young     []string
		want      []Overbooking
	}{
		"nothing over": {
			nodes:     []Node{node("n1", 14, Held{})},
			residents: []Resident{res("a", "n1", 5), res("b", "n1", 5)},
			young:     []string{"b", "a"},
		},
		"the youngest released": {
			nodes:     []Node{node("n1", 14, Held{})},
			residents: []Resident{res("a", "n1", 5), res("b", "n1", 5), res("c", "n1", 5)},
			young:     []string{"b", "c", "a"},
			want:      []Overbooking{{Node: "n1", Release: []string{"b"}, Held: "CPU: 15 held of 14 allocatable"}},
		},
		"as many as it takes, youngest first": {
			nodes:     []Node{node("n1", 14, Held{CPUMilli: 5000})},
			residents: []Resident{res("a", "n1", 5), res("b", "n1", 5), res("c", "n1", 5)},
			young:     []string{"c", "b", "a"},
			want:      []Overbooking{{Node: "n1", Release: []string{"c", "b"}, Held: "CPU: 20 held of 14 allocatable"}},
		},
		"other pods count": {
			nodes:     []Node{node("n1", 14, Held{CPUMilli: 5000})},
			residents: []Resident{res("a", "n1", 5), res("b", "n1", 5)},
			young:     []string{"a", "b"},
			want:      []Overbooking{{Node: "n1", Release: []string{"a"}, Held: "CPU: 15 held of 14 allocatable"}},
		},
		"a reservation not in young (a move's node left) stays": {
			nodes:     []Node{node("n1", 14, Held{})},
			residents: []Resident{res("a (leaving)", "n1", 5), res("b", "n1", 5), res("c", "n1", 5)},
			young:     []string{"b", "c"},
			want:      []Overbooking{{Node: "n1", Release: []string{"b"}, Held: "CPU: 15 held of 14 allocatable"}},
		},
		"memory": {
			nodes: []Node{{Name: "n1", CPUMilli: 64000, MemoryBytes: 2 * gi, CapacityCPUs: 64}},
			residents: []Resident{
				{Key: "a", Node: "n1", Sizing: sizing.Result{VCPUs: 1, HostCPUs: 2, MemoryBytes: gi}},
				{Key: "b", Node: "n1", Sizing: sizing.Result{VCPUs: 1, HostCPUs: 2, MemoryBytes: gi}},
			},
			young: []string{"b", "a"},
			want:  []Overbooking{{Node: "n1", Release: []string{"b"}, Held: "memory: " + mib(2*sizing.Result{VCPUs: 1, HostCPUs: 2, MemoryBytes: gi}.PodMemoryBytes()) + " held of 2048Mi allocatable"}},
		},
		"only the overbooked node": {
			nodes:     []Node{node("n1", 14, Held{}), node("n2", 14, Held{})},
			residents: []Resident{res("a", "n1", 5), res("b", "n1", 5), res("c", "n1", 5), res("d", "n2", 5)},
			young:     []string{"d", "c", "b", "a"},
			want:      []Overbooking{{Node: "n1", Release: []string{"c"}, Held: "CPU: 15 held of 14 allocatable"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Overbooked(tc.nodes, tc.residents, tc.young)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
