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
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"isochron.io/isochron/probes/credential"
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

// keyed is a gateway with a crawler's key, its window at /window, and a handler that
// serves one request with the header given ("" for none) at now.
func keyed(t *testing.T, key []byte, now *time.Time) (*Gateway, func(target, token string) int) {
	t.Helper()
	win := &Window{Traffic: TrafficAgent, RPS: 10, PeriodSeconds: 1, Until: now.Add(time.Hour)}
	g, err := New(Config{Period: time.Second, Window: win, Key: key, MaxPoints: MaxPoints(10, time.Second), Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	h := g.Handler()
	return g, func(target, token string) int {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		if token != "" {
			r.Header.Set(credential.Header, token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
}

// nonceOf is the nonce g announces at /window.
func nonceOf(t *testing.T, g *Gateway) string {
	t.Helper()
	rec := httptest.NewRecorder()
	g.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/window", nil))
	var win Window
	if err := json.NewDecoder(rec.Body).Decode(&win); err != nil {
		t.Fatal(err)
	}
	return win.Nonce
}

// A keyed gateway counts only the requests that carry its token: the crawler's key over
// this probe's nonce. Everything else is foreign, counted and otherwise ignored: it
// measures nothing and no verdict can come of it.
func TestKeyedGatewayCountsOnlyTheCrawlersToken(t *testing.T) {
	key := credential.Key([]byte("master"), "crawler-uid")
	other := credential.Key([]byte("master"), "another-crawler-uid")
	for name, tc := range map[string]struct {
		token       func(nonce string) string
		wantCode    int
		wantCounted bool
	}{
		"the crawler's agent":               {token: func(n string) string { return credential.Token(key, n) }, wantCode: http.StatusOK, wantCounted: true},
		"no token (any other pod)":          {token: func(string) string { return "" }, wantCode: http.StatusForbidden},
		"another crawler's token":           {token: func(n string) string { return credential.Token(other, n) }, wantCode: http.StatusForbidden},
		"a token of another probe's window": {token: func(string) string { return credential.Token(key, "an-older-nonce") }, wantCode: http.StatusForbidden},
		"the key itself":                    {token: func(string) string { return credential.Encode(key) }, wantCode: http.StatusForbidden},
		"garbage":                           {token: func(string) string { return "x" }, wantCode: http.StatusForbidden},
	} {
		t.Run(name, func(t *testing.T) {
			now := time.UnixMicro(10_000_000)
			g, serve := keyed(t, key, &now)
			nonce := nonceOf(t, g)
			if nonce == "" {
				t.Fatal("a keyed gateway announces no nonce")
			}
			tok := tc.token(nonce)
			// Two requests of one point 0.4 s apart: counted, an interval error of 600 ms.
			if code := serve("/?point=7", tok); code != tc.wantCode {
				t.Errorf("status %d, want %d", code, tc.wantCode)
			}
			now = now.Add(400 * time.Millisecond)
			serve("/?point=7", tok)
			res, _ := g.Result()
			counted := Result{Requests: res.Requests, Counts: res.Counts, Foreign: res.Foreign}
			want := Result{Foreign: 2}
			if tc.wantCounted {
				want = Result{Requests: 2, Counts: interval.Counts{Arrivals: 2, Points: 1, Duplicates: 1}}
			}
			if diff := cmp.Diff(want, counted); diff != "" {
				t.Errorf("what the gateway counted (-want +got):\n%s", diff)
			}
			if !tc.wantCounted && res.Count != 0 {
				t.Errorf("%d interval errors recorded from foreign requests", res.Count)
			}
		})
	}
}

// Each keyed gateway draws its own nonce: a token seen in one probe's window is no good
// in the next.
func TestEachProbeHasItsOwnNonce(t *testing.T) {
	key := credential.Key([]byte("master"), "uid")
	now := time.UnixMicro(0)
	a, _ := keyed(t, key, &now)
	b, _ := keyed(t, key, &now)
	if na, nb := nonceOf(t, a), nonceOf(t, b); na == nb {
		t.Errorf("two probes announced the same nonce %s", na)
	}
}

// Whatever it is sent, the gateway holds at most the points of its schedule and a stated
// margin: a flood of distinct IDs with the token is counted as untracked, and a flood
// without the token stores nothing at all.
func TestFloodOfDistinctPointsStaysBounded(t *testing.T) {
	key := credential.Key([]byte("master"), "uid")
	const flood = 20_000
	bound := MaxPoints(10, time.Second)
	if bound != 10+2+64 {
		t.Fatalf("MaxPoints(10 rps, 1 s) = %d, want the 10 points, a quarter more and 64", bound)
	}
	for name, tc := range map[string]struct {
		withToken   bool
		wantTracked int
		wantCounts  interval.Counts
		wantForeign int64
	}{
		"with the token":    {withToken: true, wantTracked: bound, wantCounts: interval.Counts{Arrivals: flood, Points: int64(bound), Untracked: flood - int64(bound)}},
		"without the token": {wantTracked: 0, wantForeign: flood},
	} {
		t.Run(name, func(t *testing.T) {
			now := time.UnixMicro(0)
			g, serve := keyed(t, key, &now)
			tok := ""
			if tc.withToken {
				tok = credential.Token(key, nonceOf(t, g))
			}
			for i := range flood {
				serve("/?point=flood-"+strconv.Itoa(i), tok)
			}
			if got := g.tracker.Tracked(); got != tc.wantTracked {
				t.Errorf("the tracker holds %d points after %d distinct IDs, want %d", got, flood, tc.wantTracked)
			}
			res, _ := g.Result()
			if diff := cmp.Diff(tc.wantCounts, res.Counts); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			if res.Foreign != tc.wantForeign {
				t.Errorf("foreign %d, want %d", res.Foreign, tc.wantForeign)
			}
		})
	}
}
