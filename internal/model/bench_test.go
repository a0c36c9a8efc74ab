package model

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkPredict predicts every workload on a node holding 10 and 100 workloads (a mix
// of shared and dedicated crawlers, half with RT-NICs), with messages (Predict) and
// without (Evaluate).
func BenchmarkPredict(b *testing.B) {
	for _, n := range []int{10, 100} {
		r := rand.New(rand.NewPCG(1, uint64(n)))
		ws := make([]Workload, n)
		for i := range ws {
			ws[i] = Workload{
				Key: fmt.Sprintf("bms/crawler-%03d", i), RPS: int32(50 + r.IntN(950)),
				Tolerance: 10 * time.Millisecond, Objective: 99.999, Dedicated: i%3 == 0,
			}
			ws[i].VCPUs = Size(ws[i].RPS, ws[i].Tolerance, ws[i].Objective, DefaultParams())
			if i%2 == 0 {
				ws[i].NIC = &NICFlow{Deadline: time.Duration(1+r.IntN(20)) * time.Millisecond, MinBandwidthBitsPerSecond: 1_000_000}
			}
		}
		node := Node{CPUs: float64(4 * n), Params: DefaultParams()}
		b.Run(fmt.Sprintf("Predict/workloads=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Predict(node, ws)
			}
		})
		b.Run(fmt.Sprintf("Evaluate/workloads=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Evaluate(node, ws)
			}
		})
	}
}
