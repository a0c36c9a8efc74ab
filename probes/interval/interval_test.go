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

package interval

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const period = 1_000_000 // 1 s in microseconds

func TestSeries(t *testing.T) {
	tests := map[string]struct {
		arrivals   []int64
		wantErrors []int64
		wantCounts Counts
	}{
		"punctual": {
			arrivals:   []int64{0, 1_000_000, 2_000_000, 3_000_000},
			wantErrors: []int64{0, 0, 0},
			wantCounts: Counts{Arrivals: 4, Points: 1, Intervals: 3},
		},
		"jitter both ways": {
			arrivals:   []int64{0, 1_000_150, 1_999_900},
			wantErrors: []int64{150, 250},
			wantCounts: Counts{Arrivals: 3, Points: 1, Intervals: 2},
		},
		"one late request shows as two errors of its lateness": {
			arrivals:   []int64{0, 1_000_000, 2_300_000, 3_000_000, 4_000_000},
			wantErrors: []int64{0, 300_000, 300_000, 0},
			wantCounts: Counts{Arrivals: 5, Points: 1, Intervals: 4},
		},
		"late by just under half a period is still late, not a duplicate": {
			arrivals:   []int64{0, 1_499_999, 2_000_000},
			wantErrors: []int64{499_999, 499_999},
			wantCounts: Counts{Arrivals: 3, Points: 1, Intervals: 2},
		},
		"one missing request is one error of a whole period": {
			arrivals:   []int64{0, 1_000_000, 3_000_000, 4_000_000},
			wantErrors: []int64{0, 1_000_000, 0},
			wantCounts: Counts{Arrivals: 4, Points: 1, Intervals: 3, Missing: 1},
		},
		"three missing requests, the next one late": {
			arrivals:   []int64{0, 4_000_200, 5_000_000},
			wantErrors: []int64{3_000_200, 200},
			wantCounts: Counts{Arrivals: 3, Points: 1, Intervals: 2, Missing: 3},
		},
		"duplicate is an error and the first arrival stays the reference": {
			arrivals:   []int64{0, 1_000_000, 1_000_100, 2_000_000},
			wantErrors: []int64{0, 999_900, 0},
			wantCounts: Counts{Arrivals: 4, Points: 1, Intervals: 2, Duplicates: 1},
		},
		"out-of-order arrival counts as a duplicate": {
			arrivals:   []int64{1_000_000, 999_000, 2_000_000},
			wantErrors: []int64{1_001_000, 0},
			wantCounts: Counts{Arrivals: 3, Points: 1, Intervals: 1, Duplicates: 1},
		},
		"single arrival has no interval": {
			arrivals:   []int64{42},
			wantCounts: Counts{Arrivals: 1, Points: 1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []int64
			counts := Series(tc.arrivals, period, func(e int64) { got = append(got, e) })
			if diff := cmp.Diff(tc.wantErrors, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCounts, counts); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTrackerKeepsPointsApart(t *testing.T) {
	tr := NewTracker(period)
	steps := []struct {
		point string
		at    int64
		want  Observation
	}{
		{"a", 0, Observation{Kind: First}},
		{"b", 500_000, Observation{Kind: First}},
		{"a", 1_000_010, Observation{Kind: Regular, ErrorUs: 10}},
		{"b", 1_500_000, Observation{Kind: Regular}},
		{"b", 3_500_000, Observation{Kind: Gap, ErrorUs: 1_000_000, Missing: 1}},
		{"a", 1_000_020, Observation{Kind: Duplicate, ErrorUs: 999_990}},
	}
	for i, s := range steps {
		if diff := cmp.Diff(s.want, tr.Observe(s.point, s.at)); diff != "" {
			t.Errorf("step %d (%s at %d) (-want +got):\n%s", i, s.point, s.at, diff)
		}
	}
	want := Counts{Arrivals: 6, Points: 2, Intervals: 3, Missing: 1, Duplicates: 1}
	if diff := cmp.Diff(want, tr.Counts()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

func TestClassifyBoundaries(t *testing.T) {
	tests := map[string]struct {
		delta int64
		want  Kind
	}{
		"just under half a period":       {499_999, Duplicate},
		"exactly half a period":          {500_000, Regular},
		"just under one and a half":      {1_499_999, Regular},
		"one and a half rounds to a gap": {1_500_000, Gap},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Classify(tc.delta, period).Kind; got != tc.want {
				t.Errorf("Classify(%d).Kind = %v, want %v", tc.delta, got, tc.want)
			}
		})
	}
}

// A bounded tracker holds at most its bound of points whatever it is sent: a flood of
// distinct IDs is counted, never stored, and the points it holds are measured as before.
func TestBoundedTrackerHoldsAtMostItsBound(t *testing.T) {
	for name, tc := range map[string]struct {
		bound, distinct int
		wantTracked     int
		wantUntracked   int64
	}{
		"under the bound":     {bound: 10, distinct: 7, wantTracked: 7},
		"at the bound":        {bound: 10, distinct: 10, wantTracked: 10},
		"a flood of new IDs":  {bound: 10, distinct: 100_000, wantTracked: 10, wantUntracked: 100_000 - 10},
		"no bound keeps all":  {bound: 0, distinct: 1000, wantTracked: 1000},
		"long IDs cost alike": {bound: 3, distinct: 50, wantTracked: 3, wantUntracked: 47},
	} {
		t.Run(name, func(t *testing.T) {
			tr := NewBoundedTracker(period, tc.bound)
			for i := range tc.distinct {
				id := strconv.Itoa(i)
				if name == "long IDs cost alike" {
					id = strings.Repeat("x", 4096) + id
				}
				tr.Observe(id, int64(i))
			}
			if got := tr.Tracked(); got != tc.wantTracked {
				t.Errorf("tracked %d points, want %d", got, tc.wantTracked)
			}
			if got := tr.Counts().Untracked; got != tc.wantUntracked {
				t.Errorf("untracked %d arrivals, want %d", got, tc.wantUntracked)
			}
			// The points held are still measured: the first one's next arrival is an interval.
			first := "0"
			if name == "long IDs cost alike" {
				first = strings.Repeat("x", 4096) + "0"
			}
			if o := tr.Observe(first, period); o.Kind != Regular {
				t.Errorf("the first point's next arrival: %+v, want Regular", o)
			}
		})
	}
}
