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

package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"isochron.io/isochron/probes/interval"
)

func TestObserveRecordsIntervalErrorsAndLog(t *testing.T) {
	var log strings.Builder
	g, err := New(Config{Period: time.Second, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		point string
		at    int64
	}{
		{"1", 10_000_000}, {"2", 10_500_000},
		{"1", 11_000_300}, {"2", 11_500_000},
		{"1", 13_000_000}, // one missing
		{"2", 11_500_010}, // duplicate
	} {
		g.Observe(a.point, a.at)
	}
	res, err := g.Result()
	if err != nil {
		t.Fatal(err)
	}
	wantCounts := interval.Counts{Arrivals: 6, Points: 2, Intervals: 3, Missing: 1, Duplicates: 1}
	if diff := cmp.Diff(wantCounts, res.Counts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if res.Requests != 6 || res.Metric != Metric || res.Count != 4 || res.Max != 999_990 {
		t.Errorf("requests %d metric %q count %d max %g, want 6, %q, 4, 999990", res.Requests, res.Metric, res.Count, res.Max, Metric)
	}
	wantLog := "10000000 1\n10500000 2\n11000300 1\n11500000 2\n13000000 1\n11500010 2\n"
	if diff := cmp.Diff(wantLog, log.String()); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
	for _, key := range []string{`"metric":"interval-error"`, `"p99999":`, `"requests":6`, `"missing":1`} {
		if !strings.Contains(res.JSON(), key) {
			t.Errorf("JSON %s lacks %s", res.JSON(), key)
		}
	}
}

func TestOverToleranceAndObjective(t *testing.T) {
	g, err := New(Config{Period: time.Second, Tolerance: time.Millisecond, Objective: 50})
	if err != nil {
		t.Fatal(err)
	}
	// Errors: 300 us, a gap (999,700 us), 0, a duplicate (999,990 us).
	for _, a := range []struct {
		point string
		at    int64
	}{
		{"1", 10_000_000}, {"2", 10_500_000}, {"1", 11_000_300}, {"2", 11_500_000}, {"1", 13_000_000}, {"2", 11_500_010},
	} {
		g.Observe(a.point, a.at)
	}
	res, _ := g.Result()
	if res.OverTolerance == nil || *res.OverTolerance != 2 {
		t.Errorf("overTolerance = %v, want 2 (the gap and the duplicate)", res.OverTolerance)
	}
	if res.AtObjective == nil || *res.AtObjective != 300 {
		t.Errorf("atObjective (p50) = %v, want 300", res.AtObjective)
	}
	plain, _ := New(Config{Period: time.Second})
	if r, _ := plain.Result(); r.OverTolerance != nil || r.AtObjective != nil {
		t.Errorf("without tolerance and objective: overTolerance %v atObjective %v, want both absent", r.OverTolerance, r.AtObjective)
	}
}

func TestHandler(t *testing.T) {
	now := time.UnixMicro(1_000_000)
	g, err := New(Config{Period: time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	h := g.Handler()
	serve := func(target string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
		return w
	}
	if w := serve("/?point=a"); w.Code != http.StatusOK {
		t.Errorf("GET /?point=a: %d", w.Code)
	}
	now = now.Add(time.Second + 250*time.Microsecond)
	serve("/anything?point=a")
	if w := serve("/"); w.Code != http.StatusBadRequest {
		t.Errorf("GET / without a point: %d, want 400", w.Code)
	}
	metrics := serve("/metrics").Body.String()
	for _, want := range []string{"rtprobe_gateway_interval_error_seconds_count 1", "rtprobe_gateway_requests_total 2"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	if res, _ := g.Result(); res.Max != 250 {
		t.Errorf("interval error max = %g us, want 250", res.Max)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New accepted a zero period")
	}
	if _, err := New(Config{Period: time.Second, Delay: -time.Second}); err == nil {
		t.Error("New accepted a negative delay")
	}
}

// The window tells the agent what to send and for how long, relative to the answer, and
// is gone once over.
func TestWindow(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	win := &Window{Traffic: TrafficAgent, RPS: 400, PeriodSeconds: 1, Until: now.Add(90 * time.Second)}
	g, err := New(Config{Period: time.Second, Window: win, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	g.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/window", nil))
	want := `{"traffic":"agent","rps":400,"periodSeconds":1,"remainingSeconds":90,"until":"2026-11-23T10:01:30Z"}` + "\n"
	if rec.Code != http.StatusOK || rec.Body.String() != want {
		t.Errorf("GET /window = %d %q, want 200 %q", rec.Code, rec.Body.String(), want)
	}
	now = now.Add(90 * time.Second)
	rec = httptest.NewRecorder()
	g.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/window", nil))
	if rec.Code != http.StatusGone {
		t.Errorf("GET /window at its end = %d, want 410", rec.Code)
	}
	// Without a window, /window is not served: it is a point like any other path.
	g, _ = New(Config{Period: time.Second})
	rec = httptest.NewRecorder()
	g.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/window", nil))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("GET /window without a window = %d, want 400 (missing ?point)", rec.Code)
	}
}
