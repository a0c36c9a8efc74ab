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

package report

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"isochron.io/isochron/probes/gateway"
	"isochron.io/isochron/probes/interval"
	"isochron.io/isochron/probes/rtt"
	"isochron.io/isochron/probes/stats"
)

func f(v float64) *float64 { return &v }

// full is a report with every part, at its largest realistic figures.
func full() Report {
	start := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	big := stats.Summary{Unit: "us", Count: 86_400_000, Min: 0, P50: 1234567, P99: 2345678, P999: 3456789, P99999: 3599999999, Max: 3600000000}
	return Report{
		Version:   Version,
		Start:     start,
		End:       start.Add(24 * time.Hour),
		Objective: 99.999,
		Interval: &gateway.Result{
			Summary:     withMetric(big, gateway.Metric),
			Requests:    86_400_000,
			Counts:      interval.Counts{Points: 100000, Intervals: 86_300_000, Missing: 12345, Duplicates: 678, Untracked: 86_400_000},
			AtObjective: f(3599999999),
			Foreign:     9_223_372_036_854_775_807,
		},
		RTT: &rtt.Result{
			Summary:     withMetric(big, rtt.Metric).WithDeadline(1_000_000, 86_400_000),
			Sent:        86_400_000,
			Lost:        1,
			Late:        86_399_999,
			Duplicates:  2,
			AtObjective: f(3599999999),
		},
		RTTTarget:   "[fd00:1234:5678:9abc:def0:1234:5678:9abc]:7",
		Interrupted: true,
		Error:       strings.Repeat("e", 512),
	}
}

func withMetric(s stats.Summary, m string) stats.Summary { s.Metric = m; return s }

func TestRoundTrip(t *testing.T) {
	r := full()
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// The largest report leaves room under the kubelet's limit.
	if len(b) > MaxBytes/2 {
		t.Errorf("largest report is %d bytes; keep it well under %d", len(b), MaxBytes)
	}
	got, err := Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, got); diff != "" {
		t.Errorf("round trip changed the report (-want +got):\n%s", diff)
	}
}

func TestMarshalRefusesOversize(t *testing.T) {
	r := full()
	r.Error = strings.Repeat("e", MaxBytes)
	if _, err := r.Marshal(); err == nil || !strings.Contains(err.Error(), "termination message") {
		t.Errorf("Marshal of a %d-byte error: err = %v, want a size error", MaxBytes, err)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ msg, want string }{
		"empty":           {"", "empty termination message"},
		"log tail":        {"rtprobe slo: listening on :8080: address already in use", "not a probe report"},
		"unknown field":   {`{"v":1,"verdict":"pass"}`, "unknown field"},
		"a later version": {`{"v":3}`, "version 3, this operator reads versions 1 to 2"},
		"missing version": {`{"objective":99.9}`, "version 0"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.msg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse(%q) = %v, want an error containing %q", tc.msg, err, tc.want)
			}
		})
	}
}

// A version 1 report, from the gateway before probe credentials, still reads: it has no
// foreign or untracked requests to tell of.
func TestParseReadsVersion1(t *testing.T) {
	msg := `{"v":1,"start":"2026-11-22T03:00:00Z","end":"2026-11-22T03:20:00Z","objective":99.999,` +
		`"interval":{"metric":"interval-error","unit":"us","count":480000,"min":2,"p50":140,"p99":910,"p999":1520,"p99999":2100,"max":2300,` +
		`"requests":480400,"arrivals":480400,"points":400,"intervals":480000,"missing":0,"duplicates":0,"atObjective":2100}}`
	r, err := Parse(msg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != 1 || r.Interval == nil || r.Interval.Count != 480000 || r.Interval.Foreign != 0 || r.Interval.Untracked != 0 {
		t.Errorf("parsed %+v", r)
	}
}
