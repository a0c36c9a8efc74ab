package model

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// sizedWorkload is a crawler as placement sizes them: shared or dedicated, some with an
// RT-NIC, budgets from 2 to 100 ms at a few objectives.
func sizedWorkload(r *rand.Rand, key string, p Params) Workload {
	w := Workload{
		Key:       key,
		RPS:       int32(20 + r.IntN(2000)),
		Tolerance: []time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}[r.IntN(4)],
		Objective: []float64{0, 99, 99.9, 99.999}[r.IntN(4)],
		Dedicated: r.IntN(2) == 0,
	}
	w.VCPUs = Size(w.RPS, w.Tolerance, w.Objective, p)
	if r.IntN(4) == 0 {
		w.NIC = &NICFlow{Deadline: time.Duration(1+r.IntN(10)) * time.Millisecond, MinBandwidthBitsPerSecond: int64(1+r.IntN(50)) * 1_000_000}
	}
	return w
}

// A Load predicts what Evaluate predicts, bit for bit, as workloads come and go, and
// Excludes never rules out a workload Evaluate finds within its budget.
func TestLoadMatchesEvaluate(t *testing.T) {
	params := map[string]Params{
		"default": DefaultParams(),
		"kvm":     {SchedulerGranularity: 3 * time.Millisecond, HostIOCostPerRequest: 100 * time.Microsecond},
		"isolated": {HostIOIsolated: true, HostReservedCPUs: 2, HostIOCostPerRequest: 50 * time.Microsecond,
			NICCapacityBitsPerSecond: 100_000_000},
		"fractional": {HostReservedCPUs: 1.5, CPUPerRequest: time.Millisecond},
	}
	for name, p := range params {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(len(name))))
			excluded, checked := 0, 0
			for node := range 40 {
				n := Node{CPUs: float64(8 + 8*r.IntN(8)), Params: p}
				if node%3 == 0 {
					n.Correction = 0.5 + r.Float64()*2
				}
				l := NewLoad(n)
				var ws []Workload
				for step := range 60 {
					key := fmt.Sprintf("ns/c-%02d-%02d", step, r.IntN(100)) // unique on the node
					w := sizedWorkload(r, key, p)
					if step%5 == 0 { // unsized: no vCPU, no deadline, zero rate
						w = randomWorkload(r, key)
					}
					x := NewCandidate(w, p)
					all := append(append([]Workload(nil), ws...), x.W)
					want := Evaluate(n, all)
					if got := l.EvaluateWith(x, nil); !reflect.DeepEqual(got, want) {
						t.Fatalf("node %d step %d: EvaluateWith differs from Evaluate:\n got %+v\nwant %+v", node, step, got, want)
					}
					within, selfWithin := true, true
					for _, pr := range want {
						within = within && pr.Within
						if pr.Key == x.W.Key {
							selfWithin = pr.Within
						}
					}
					got, selfOver := l.Admit(x)
					switch {
					case within && !reflect.DeepEqual(got, want):
						t.Fatalf("node %d step %d: Admit = %+v, want %+v", node, step, got, want)
					case !within && (got != nil || selfOver != !selfWithin):
						t.Fatalf("node %d step %d: Admit = %v, %v; want nil, %v", node, step, got, selfOver, !selfWithin)
					}
					checked++
					if l.Excludes(x) {
						excluded++
						if selfWithin {
							t.Fatalf("node %d step %d: Excludes rules out %+v, which Evaluate predicts within budget", node, step, x.W)
						}
					}
					switch {
					case r.IntN(4) == 0 && len(ws) > 0: // one leaves
						i := r.IntN(len(ws))
						if !l.Remove(ws[i].Key) {
							t.Fatalf("Remove(%s) = false", ws[i].Key)
						}
						ws = append(ws[:i], ws[i+1:]...)
					case r.IntN(3) > 0 && len(ws) < 30:
						l.Add(x.W)
						ws = append(ws, x.W)
					}
					if got, want := l.Evaluate(), Evaluate(n, ws); !reflect.DeepEqual(got, want) {
						t.Fatalf("node %d step %d: Evaluate differs", node, step)
					}
				}
			}
			t.Logf("%d of %d candidates excluded without predicting", excluded, checked)
		})
	}
}

// mdOneRateAbove bounds the bisection's root from above.
func TestMDOneRateAbove(t *testing.T) {
	for _, rho := range []float64{1e-6, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 0.999, 0.9999, 1 - 1e-5, 1 - 1e-6} {
		// mdOneWait = s/x·ln(rho/tail): recover x from it with s = 1 and tail = rho/e.
		x := 1 / mdOneWait(rho, 1, rho/2.718281828459045)
		if up := mdOneRateAbove(rho); up < x*(1-1e-12) {
			t.Errorf("rho %v: bound %v below the root %v", rho, up, x)
		}
	}
}
