package placement

import (
	"testing"
)

func TestSummarize(t *testing.T) {
	busy := rtNode("b-busy", 18)                           // 16 allocatable
	busy.Held = Held{CPUMilli: 1500, ExclusiveMilli: 1000} // a pinned CPU and 500m shared
	res := []Resident{
		resident("bms/dedicated", "b-busy", demand(1000)),
		resident("bms/shared", "b-busy", demand(100, shared)),
		resident("bms/elsewhere", "gone", demand(100)), // on a node that no longer exists
	}
	got := Summarize([]Node{busy, rtNode("a-idle", 10)}, res)
	if len(got) != 2 || got[0].Node != "a-idle" || got[1].Node != "b-busy" {
		t.Fatalf("Summarize = %+v, want a-idle then b-busy", got)
	}
	idle := got[0]
	if idle.ExclusiveMilli != 0 || idle.FreeMilli != 8000 || len(idle.Crawlers) != 0 || idle.WorstPredicted != 0 {
		t.Errorf("idle node %+v, want nothing held, 8 CPUs free", idle)
	}
	d := res[0].Sizing
	s := res[1].Sizing
	b := got[1]
	wantExclusive := 1000 + int64(d.HostCPUs)*1000
	wantFree := 16000 - 1500 - int64(d.HostCPUs)*1000 - s.CPURequestMilli
	if b.ExclusiveMilli != wantExclusive || b.FreeMilli != wantFree || len(b.Crawlers) != 2 {
		t.Errorf("busy node %+v, want %d exclusive, %d free, 2 crawlers", b, wantExclusive, wantFree)
	}
	if b.WorstPredicted <= 0 {
		t.Errorf("busy node worst prediction %s, want > 0", b.WorstPredicted)
	}
}
