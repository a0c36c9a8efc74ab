package stats

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// within reports whether got is within the HDR precision (3 significant
// digits, so 0.1%) of want, plus one microsecond for rounding at small values.
func within(got, want float64) bool {
	return math.Abs(got-want) <= want*0.001+1
}

func TestSummaryPercentiles(t *testing.T) {
	uniform := func(r *Recorder) {
		for v := int64(1); v <= 100_000; v++ {
			r.Record(v)
		}
	}
	tests := map[string]struct {
		fill func(*Recorder)
		want Summary
	}{
		"uniform 1..100000": {
			fill: uniform,
			want: Summary{Count: 100_000, Min: 1, P50: 50_000, P99: 99_000, P999: 99_900, P99999: 99_999, Max: 100_000},
		},
		"bimodal 99% at 100 us, 1% at 10 ms": {
			fill: func(r *Recorder) {
				for i := 0; i < 99_000; i++ {
					r.Record(100)
				}
				for i := 0; i < 1_000; i++ {
					r.Record(10_000)
				}
			},
			// p99 is the 99,000th value, the last of the fast mode; p99.9 falls in the slow one.
			want: Summary{Count: 100_000, Min: 100, P50: 100, P99: 100, P999: 10_000, P99999: 10_000, Max: 10_000},
		},
		"one outlier in 10^5 samples is above p99.999": {
			fill: func(r *Recorder) {
				for i := 0; i < 99_999; i++ {
					r.Record(20)
				}
				r.Record(5_000)
			},
			want: Summary{Count: 100_000, Min: 20, P50: 20, P99: 20, P999: 20, P99999: 20, Max: 5_000},
		},
		"two outliers in 10^5 samples reach p99.999": {
			fill: func(r *Recorder) {
				for i := 0; i < 99_998; i++ {
					r.Record(20)
				}
				r.Record(5_000)
				r.Record(6_000)
			},
			want: Summary{Count: 100_000, Min: 20, P50: 20, P99: 20, P999: 20, P99999: 5_000, Max: 6_000},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := NewRecorder()
			tc.fill(r)
			got := r.Summary("m")
			if got.Metric != "m" || got.Unit != "us" || got.Count != tc.want.Count {
				t.Fatalf("got metric %q unit %q count %d, want m us %d", got.Metric, got.Unit, got.Count, tc.want.Count)
			}
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"min", got.Min, tc.want.Min}, {"p50", got.P50, tc.want.P50}, {"p99", got.P99, tc.want.P99},
				{"p999", got.P999, tc.want.P999}, {"p99999", got.P99999, tc.want.P99999}, {"max", got.Max, tc.want.Max},
			} {
				if !within(f.got, f.want) {
					t.Errorf("%s = %v, want %v within HDR precision", f.name, f.got, f.want)
				}
			}
		})
	}
}

func TestRecordClamps(t *testing.T) {
	r := NewRecorder()
	r.Record(-5)
	r.Record(math.MaxInt64)
	s := r.Summary("clamp")
	if s.Count != 2 || s.Min != 0 || s.Max != float64(MaxUs) {
		t.Errorf("got count %d min %v max %v, want 2, 0, %d", s.Count, s.Min, s.Max, MaxUs)
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	r := NewRecorder()
	v := int64(0)
	if n := testing.AllocsPerRun(1000, func() { v += 997; r.Record(v) }); n != 0 {
		t.Errorf("Record allocated %v times per call, want 0", n)
	}
}

func TestMerge(t *testing.T) {
	a, b, all := NewRecorder(), NewRecorder(), NewRecorder()
	for v := int64(1); v <= 1000; v++ {
		all.Record(v)
		if v%2 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	a.Merge(b)
	a.Merge(NewRecorder()) // an empty recorder changes nothing
	if diff := cmp.Diff(all.Summary("m"), a.Summary("m")); diff != "" {
		t.Errorf("merged summary differs from recording everything (-want +got):\n%s", diff)
	}
}

func TestEmptySummary(t *testing.T) {
	want := Summary{Metric: "m", Unit: "us"}
	if diff := cmp.Diff(want, NewRecorder().Summary("m")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestJSONKeys(t *testing.T) {
	r := NewRecorder()
	r.Record(10)
	base := []string{"metric", "unit", "count", "min", "p50", "p99", "p999", "p99999", "max"}
	tests := map[string]struct {
		s    Summary
		want []string
	}{
		"without deadline": {s: r.Summary("timer-latency"), want: base},
		"with deadline":    {s: r.Summary("rtt").WithDeadline(5000, 3), want: append(slices.Clone(base), "misses", "deadlineUs")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			line := tc.s.JSON()
			if strings.ContainsAny(line, "\n") {
				t.Fatalf("JSON() %q contains a newline", line)
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("JSON() %q: %v", line, err)
			}
			var got []string
			for k := range m {
				got = append(got, k)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
			if m["unit"] != "us" {
				t.Errorf("unit = %v, want us", m["unit"])
			}
		})
	}
}

func TestWithDeadline(t *testing.T) {
	s := NewRecorder().Summary("rtt").WithDeadline(5000, 7)
	if s.DeadlineUs == nil || *s.DeadlineUs != 5000 || s.Misses == nil || *s.Misses != 7 {
		t.Fatalf("WithDeadline(5000, 7) = %+v", s)
	}
	if h := s.Human(); !strings.Contains(h, "7 misses of the 5000 us deadline") {
		t.Errorf("Human() = %q, want it to mention the misses and the deadline", h)
	}
}

func TestHuman(t *testing.T) {
	r := NewRecorder()
	r.Record(12)
	h := r.Summary("timer-latency").Human()
	for _, want := range []string{"timer-latency", "1 samples", "p99.999 12", "max 12 us"} {
		if !strings.Contains(h, want) {
			t.Errorf("Human() = %q, want it to contain %q", h, want)
		}
	}
	if strings.Contains(h, "\n") {
		t.Errorf("Human() = %q, want one paragraph", h)
	}
}

func TestQuantileAtAnyObjective(t *testing.T) {
	r := NewRecorder()
	if got := r.Quantile(99.9); got != 0 {
		t.Errorf("empty recorder: Quantile(99.9) = %g, want 0", got)
	}
	for v := int64(1); v <= 100_000; v++ {
		r.Record(v)
	}
	for p, want := range map[float64]float64{90: 90_000, 99.95: 99_950, 99.999: 99_999, 100: 100_000} {
		if got := r.Quantile(p); !within(got, want) {
			t.Errorf("Quantile(%g) = %g, want %g within 0.1%%", p, got, want)
		}
	}
}
