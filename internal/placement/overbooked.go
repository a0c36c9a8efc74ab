package placement

import (
	"fmt"
	"sort"

	"isochron.io/isochron/internal/format"
)

// Overbooking is a node whose crawlers' reservations and other pods hold more of it than
// it has, and the reservations to release so that it holds no more.
type Overbooking struct {
	Node string
	// Release are the keys of the reservations to release, youngest first.
	Release []string
	// Held says what the node held beyond what it has, before the release.
	Held string
}

// Overbooked finds the nodes whose reservations and other pods hold more CPU, memory or
// hugepages than the node has (what no decision makes, but a decision written by a
// manager that had lost its lease, or by hand, can), and for each the reservations to
// release so that it fits again: the youngest first. young lists the keys that may be
// released, youngest first; a reservation not in it (a move's reservation on the node it
// leaves, whose VM runs there) is never released. A node that cannot fit even without all
// of young keeps what is left.
func Overbooked(nodes []Node, residents []Resident, young []string) []Overbooking {
	rank := make(map[string]int, len(young))
	for i, k := range young {
		rank[k] = i
	}
	on := map[string][]Resident{}
	for _, r := range residents {
		on[r.Node] = append(on[r.Node], r)
	}
	sorted := append([]Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var out []Overbooking
	for i := range sorted {
		n := &sorted[i]
		var u usage
		for _, r := range on[n.Name] {
			u.add(r.Sizing)
		}
		held := over(n, &u)
		if held == "" {
			continue
		}
		candidates := make([]Resident, 0, len(on[n.Name]))
		for _, r := range on[n.Name] {
			if _, ok := rank[r.Key]; ok {
				candidates = append(candidates, r)
			}
		}
		sort.Slice(candidates, func(a, b int) bool { return rank[candidates[a].Key] < rank[candidates[b].Key] })
		ob := Overbooking{Node: n.Name, Held: held}
		for _, r := range candidates {
			if over(n, &u) == "" {
				break
			}
			u.remove(r.Sizing)
			ob.Release = append(ob.Release, r.Key)
		}
		out = append(out, ob)
	}
	return out
}

// over says what node n holds beyond what it has with u on it, "" when it fits.
func over(n *Node, u *usage) string {
	if free := n.freeCPUMilli(u); free < 0 {
		return fmt.Sprintf("CPU: %s held of %s allocatable", format.CPU(n.CPUMilli-free), format.CPU(n.CPUMilli))
	}
	if held := n.Held.HugepagesBytes + u.hugepages; held > n.HugepagesBytes {
		return fmt.Sprintf("hugepages: %s held of %s", mib(held), mib(n.HugepagesBytes))
	}
	if held := n.Held.MemoryBytes + u.memory; held > n.MemoryBytes {
		return fmt.Sprintf("memory: %s held of %s allocatable", mib(held), mib(n.MemoryBytes))
	}
	return ""
}
