// Package stats holds the latency statistics every rtprobe subcommand reports:
// an HDR histogram in microseconds and the summary printed for humans or as JSON.
package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/HdrHistogram/hdrhistogram-go"
)

const (
	// MaxUs is the largest latency a Recorder tracks: one hour in microseconds.
	// Larger values are clamped to it.
	MaxUs int64 = 3_600_000_000
	// sigFigs keeps 3 significant digits: a value is known within 0.1%.
	sigFigs = 3
)

// Recorder is an HDR histogram of latencies in microseconds
// (github.com/HdrHistogram/hdrhistogram-go, 1 us .. 1 h, 3 significant digits),
// safe for one goroutine.
//
// Min and max are tracked exactly beside the histogram; percentiles carry the
// histogram's precision (0.1%) and are clamped into [min, max].
type Recorder struct {
	h   *hdrhistogram.Histogram
	min int64
	max int64
}

// NewRecorder returns an empty Recorder. All its memory is allocated here, so
// Record never allocates.
func NewRecorder() *Recorder {
	return &Recorder{h: hdrhistogram.New(1, MaxUs, sigFigs), min: math.MaxInt64, max: math.MinInt64}
}

// Record adds one latency in microseconds, clamped to [0, MaxUs]. It never allocates.
func (r *Recorder) Record(us int64) {
	us = clamp(us)
	// Cannot fail: us is within the histogram's trackable range.
	_ = r.h.RecordValue(us)
	if us < r.min {
		r.min = us
	}
	if us > r.max {
		r.max = us
	}
}

func clamp(us int64) int64 {
	if us < 0 {
		return 0
	}
	if us > MaxUs {
		return MaxUs
	}
	return us
}

// Count returns the number of recorded values.
func (r *Recorder) Count() int64 { return r.h.TotalCount() }

// Merge adds every value recorded in o to r.
func (r *Recorder) Merge(o *Recorder) {
	if o == nil || o.Count() == 0 {
		return
	}
	r.h.Merge(o.h)
	r.min = min(r.min, o.min)
	r.max = max(r.max, o.max)
}

// Quantile returns the value at percentile p (0 < p <= 100) in microseconds, with the
// histogram's precision and clamped into [min, max]; 0 when nothing was recorded.
func (r *Recorder) Quantile(p float64) float64 {
	if r.Count() == 0 {
		return 0
	}
	return float64(max(r.min, min(r.max, r.h.ValueAtQuantile(p))))
}

// Summary is the result of one rtprobe measurement. Latencies are in microseconds.
type Summary struct {
	Metric     string   `json:"metric"`
	Unit       string   `json:"unit"` // always "us"
	Count      int64    `json:"count"`
	Min        float64  `json:"min"`
	P50        float64  `json:"p50"`
	P99        float64  `json:"p99"`
	P999       float64  `json:"p999"`
	P99999     float64  `json:"p99999"`
	Max        float64  `json:"max"`
	Misses     *int64   `json:"misses,omitempty"`
	DeadlineUs *float64 `json:"deadlineUs,omitempty"`
}

// Summary returns the figures recorded so far under the given metric name.
// An empty Recorder gives zero figures.
func (r *Recorder) Summary(metric string) Summary {
	s := Summary{Metric: metric, Unit: "us", Count: r.Count()}
	if s.Count == 0 {
		return s
	}
	q := r.Quantile
	s.Min = float64(r.min)
	s.P50 = q(50)
	s.P99 = q(99)
	s.P999 = q(99.9)
	s.P99999 = q(99.999)
	s.Max = float64(r.max)
	return s
}

// WithDeadline returns s with the deadline (in microseconds) and the number of
// samples that missed it.
func (s Summary) WithDeadline(deadlineUs float64, misses int64) Summary {
	s.DeadlineUs = &deadlineUs
	s.Misses = &misses
	return s
}

// Human returns the summary as one readable paragraph.
func (s Summary) Human() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d samples, min %s, p50 %s, p99 %s, p99.9 %s, p99.999 %s, max %s %s",
		s.Metric, s.Count, num(s.Min), num(s.P50), num(s.P99), num(s.P999), num(s.P99999), num(s.Max), s.Unit)
	if s.DeadlineUs != nil && s.Misses != nil {
		pct := 0.0
		if s.Count > 0 {
			pct = 100 * float64(*s.Misses) / float64(s.Count)
		}
		fmt.Fprintf(&b, "; %d misses of the %s %s deadline (%.4g%%)", *s.Misses, num(*s.DeadlineUs), s.Unit, pct)
	}
	if s.Count > 0 && s.Count < 100_000 {
		b.WriteString("; note: fewer than 10^5 samples, so p99.999 is the maximum of too few samples")
	}
	b.WriteString(".")
	return b.String()
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// JSON returns the summary as one line of JSON without a trailing newline.
func (s Summary) JSON() string {
	b, err := json.Marshal(s)
	if err != nil {
		// Only NaN or Inf could fail, and Summary never holds them.
		return fmt.Sprintf(`{"metric":%q,"error":%q}`, s.Metric, err.Error())
	}
	return string(b)
}
