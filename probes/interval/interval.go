/*
Copyright 2026 The isochron Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package interval computes the BMS crawler study's measurement-interval
// error from the arrival times a gateway stamps on each point's requests.
//
// The study's metric is the deviation of each request's actual time from its
// schedule. A gateway does not know the crawler's schedule, only the arrivals,
// so it measures each point's consecutive arrivals against the period:
//
//	error = |actual interval - period|
//
// How the irregular cases are counted (all in microseconds):
//
//   - Late: a request late by L gives an interval of period+L and the next one
//     period-L, so it shows as two errors of L. Nothing is re-aligned.
//   - Missing: a gap spanning k periods (k >= 2, rounded) is ONE interval with
//     error (k-1)×period, and k-1 requests are counted as missing. The gap is
//     deliberately not measured against k×period: that would report a
//     measurement that never happened as perfectly punctual, while for billing
//     and control a lost sample is an error of at least one period.
//   - Duplicated: a second arrival less than half a period after the last kept
//     arrival is a duplicate. It is counted, its error |interval - period| is
//     recorded (so it shows in the percentiles), and the first arrival is kept
//     as the reference for the next interval. A request late by less than half
//     a period is therefore never mistaken for a duplicate.
//   - The first arrival of a point only sets the reference; it has no error.
//
// Arrivals of one point must be fed in time order; an arrival earlier than the
// point's reference is treated as a duplicate.
//
// A Tracker holds one reference per point, and at most the points it is given room for
// (NewBoundedTracker): the arrivals of any further point are counted as Untracked and
// stored nowhere, so what it holds is bounded whatever it is sent.
package interval

import "hash/maphash"

// Kind says how one arrival was counted.
type Kind int

const (
	// First is a point's first arrival: it sets the reference, no error.
	First Kind = iota
	// Regular is an interval of about one period (less than 1.5 periods).
	Regular
	// Gap is an interval spanning at least one missing request.
	Gap
	// Duplicate is an arrival less than half a period after the reference.
	Duplicate
	// Untracked is an arrival of a point beyond the tracker's bound: no error.
	Untracked
)

// Observation is the result of one arrival.
type Observation struct {
	Kind Kind
	// ErrorUs is the interval error in microseconds; zero for First.
	ErrorUs int64
	// Missing is the number of requests the gap spanned; zero unless Gap.
	Missing int64
}

// Counts are the totals over all points.
type Counts struct {
	Arrivals   int64 `json:"arrivals"`
	Points     int64 `json:"points"`
	Intervals  int64 `json:"intervals"`
	Missing    int64 `json:"missing"`
	Duplicates int64 `json:"duplicates"`
	// Untracked is the number of arrivals of points beyond the tracker's bound: counted,
	// never measured.
	Untracked int64 `json:"untracked,omitempty"`
}

// Classify computes the error of an interval of deltaUs between an arrival
// and its point's reference, for a period of periodUs (> 0).
func Classify(deltaUs, periodUs int64) Observation {
	if 2*deltaUs < periodUs {
		return Observation{Kind: Duplicate, ErrorUs: abs(deltaUs - periodUs)}
	}
	// k = round(delta / period), at least 1.
	k := (2*deltaUs + periodUs) / (2 * periodUs)
	if k <= 1 {
		return Observation{Kind: Regular, ErrorUs: abs(deltaUs - periodUs)}
	}
	return Observation{Kind: Gap, ErrorUs: abs(deltaUs - periodUs), Missing: k - 1}
}

// Tracker keeps each point's reference arrival. It is not safe for
// concurrent use; callers serialise Observe.
type Tracker struct {
	periodUs int64
	// max is the most points kept; 0 for no bound.
	max int
	// last is each point's reference arrival, keyed by the point's hash (seed): a point
	// costs the same few bytes whatever the length of its ID. Two IDs of one hash would
	// share a reference; with a random 64-bit seed that is a chance of about n²/2^65
	// for n points (10^-10 at 125,000), and no sender can aim for it.
	last map[uint64]int64
	seed maphash.Seed
	// counts are the totals so far.
	counts Counts
}

// NewTracker returns a Tracker for the given period in microseconds (> 0) that keeps
// every point it sees.
func NewTracker(periodUs int64) *Tracker { return NewBoundedTracker(periodUs, 0) }

// NewBoundedTracker returns a Tracker for the given period in microseconds (> 0) that
// keeps at most maxPoints points (0: no bound); the arrivals of any point beyond them are
// counted as Untracked and not stored.
func NewBoundedTracker(periodUs int64, maxPoints int) *Tracker {
	if periodUs <= 0 {
		panic("interval: period must be positive")
	}
	if maxPoints < 0 {
		panic("interval: maxPoints must not be negative")
	}
	return &Tracker{periodUs: periodUs, max: maxPoints, last: map[uint64]int64{}, seed: maphash.MakeSeed()}
}

// Observe counts one arrival of point at atUs and returns how it was
// counted. Callers record ErrorUs unless Kind is First or Untracked.
func (t *Tracker) Observe(point string, atUs int64) Observation {
	t.counts.Arrivals++
	key := maphash.String(t.seed, point)
	prev, seen := t.last[key]
	if !seen {
		if t.max > 0 && len(t.last) >= t.max {
			t.counts.Untracked++
			return Observation{Kind: Untracked}
		}
		t.last[key] = atUs
		t.counts.Points++
		return Observation{Kind: First}
	}
	o := Classify(atUs-prev, t.periodUs)
	switch o.Kind {
	case Duplicate:
		t.counts.Duplicates++
		return o // keep the first arrival as the reference
	case Gap:
		t.counts.Missing += o.Missing
	}
	t.counts.Intervals++
	t.last[key] = atUs
	return o
}

// Tracked is the number of points the tracker holds a reference for (never more than
// its bound).
func (t *Tracker) Tracked() int { return len(t.last) }

// Counts returns the totals so far.
func (t *Tracker) Counts() Counts { return t.counts }

// Series computes the errors of one point's arrival series (in time order),
// calling record for every error; it returns the counts.
func Series(arrivalsUs []int64, periodUs int64, record func(errUs int64)) Counts {
	t := NewTracker(periodUs)
	for _, at := range arrivalsUs {
		if o := t.Observe("", at); o.Kind != First && o.Kind != Untracked && record != nil {
			record(o.ErrorUs)
		}
	}
	return t.Counts()
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
