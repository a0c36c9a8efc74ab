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

package crawl

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestScheduleSpreadsPointsEvenly(t *testing.T) {
	s := Schedule{Points: 4, Period: time.Second}
	var gotOffsets []time.Duration
	var gotPoints []int
	for j := int64(0); j < 9; j++ {
		gotOffsets = append(gotOffsets, s.Offset(j))
		gotPoints = append(gotPoints, s.Point(j))
	}
	ms := time.Millisecond
	wantOffsets := []time.Duration{0, 250 * ms, 500 * ms, 750 * ms, 1000 * ms, 1250 * ms, 1500 * ms, 1750 * ms, 2000 * ms}
	if diff := cmp.Diff(wantOffsets, gotOffsets); diff != "" {
		t.Errorf("offsets (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 1, 2, 3, 0, 1, 2, 3, 0}, gotPoints); diff != "" {
		t.Errorf("points (-want +got):\n%s", diff)
	}
}

func TestScheduleOffsetIsExactAtLargeIndices(t *testing.T) {
	// 1,000 points over 1 s for 20 minutes: request j is exactly j ms in.
	s := Schedule{Points: 1000, Period: time.Second}
	for _, j := range []int64{0, 1, 999, 1000, 1_199_999} {
		if got, want := s.Offset(j), time.Duration(j)*time.Millisecond; got != want {
			t.Errorf("Offset(%d) = %s, want %s", j, got, want)
		}
	}
	// 3 points over 1 s: offsets round down, never drift across cycles.
	s = Schedule{Points: 3, Period: time.Second}
	if got, want := s.Offset(3*1000+2), 1000*time.Second+666_666_666*time.Nanosecond; got != want {
		t.Errorf("Offset(3002) = %s, want %s", got, want)
	}
}

func TestScheduleCount(t *testing.T) {
	s := Schedule{Points: 4, Period: time.Second}
	tests := map[string]struct {
		d    time.Duration
		want int64
	}{
		"zero":                 {0, 0},
		"first instant only":   {time.Nanosecond, 1},
		"one full period":      {time.Second, 4},
		"just past a quarter":  {250*time.Millisecond + 1, 2},
		"two and a half":       {2500 * time.Millisecond, 10},
		"sixty seconds":        {60 * time.Second, 240},
		"negative is no crawl": {-time.Second, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := s.Count(tc.d); got != tc.want {
				t.Errorf("Count(%s) = %d, want %d", tc.d, got, tc.want)
			}
		})
	}
}

func TestPointURL(t *testing.T) {
	tests := map[string]struct {
		target, want string
	}{
		"bare host":      {"http://127.0.0.1:8080", "http://127.0.0.1:8080?point=7"},
		"path":           {"http://127.0.0.1:8080/index.html", "http://127.0.0.1:8080/index.html?point=7"},
		"existing query": {"http://h/x?building=3", "http://h/x?building=3&point=7"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := PointURL(tc.target, 7)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("PointURL(%q, 7) = %q, want %q", tc.target, got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := map[string]struct {
		cfg        Config
		wantPoints int
		wantErr    bool
	}{
		"points default to rps x period": {cfg: Config{Target: "http://h/", RPS: 1000, Period: time.Second, Duration: time.Second, Conns: 64}, wantPoints: 1000},
		"points given win":               {cfg: Config{Target: "http://h/", RPS: 1000, Period: time.Second, Points: 10, Duration: time.Second, Conns: 1}, wantPoints: 10},
		"no rate, no points":             {cfg: Config{Target: "http://h/", Period: time.Second, Duration: time.Second, Conns: 1}, wantErr: true},
		"no duration":                    {cfg: Config{Target: "http://h/", RPS: 10, Period: time.Second, Conns: 1}, wantErr: true},
		"no conns":                       {cfg: Config{Target: "http://h/", RPS: 10, Period: time.Second, Duration: time.Second}, wantErr: true},
		"zero period":                    {cfg: Config{Target: "http://h/", RPS: 10, Duration: time.Second, Conns: 1}, wantErr: true},
		"https target":                   {cfg: Config{Target: "https://h/", RPS: 10, Period: time.Second, Duration: time.Second, Conns: 1}, wantErr: true},
		"no host":                        {cfg: Config{Target: "/index.html", RPS: 10, Period: time.Second, Duration: time.Second, Conns: 1}, wantErr: true},
		"a line break in a header":       {cfg: Config{Target: "http://h/", RPS: 10, Period: time.Second, Duration: time.Second, Conns: 1, Header: http.Header{"X": {"a\r\nHost: evil"}}}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := tc.cfg
			s, err := cfg.Validate()
			if (err != nil) != tc.wantErr {
				t.Fatalf("Validate() error = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && s.Points != tc.wantPoints {
				t.Errorf("points = %d, want %d", s.Points, tc.wantPoints)
			}
		})
	}
}

// The worker's own HTTP/1.1 connection keeps alive, follows a server that closes, and
// dials again when a kept connection was closed while idle.
func TestConnKeepAliveAndReconnect(t *testing.T) {
	var mu sync.Mutex
	var remotes, tokens []string
	closeNext := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes = append(remotes, r.RemoteAddr)
		tokens = append(tokens, r.Header.Get("Isochron-Probe-Token"))
		if closeNext {
			w.Header().Set("Connection", "close")
			closeNext = false
		}
		mu.Unlock()
		_, _ = io.WriteString(w, r.URL.Query().Get("point"))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	c, err := newConn(u, time.Second, headerLines(http.Header{"isochron-probe-token": {"t0k"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	get := func(i int) {
		t.Helper()
		uri := fmt.Sprintf("/?point=%d", i)
		reused := c.open()
		if err := c.send(uri); err != nil {
			t.Fatalf("request %d: send: %v", i, err)
		}
		status, err := c.receive(uri, reused)
		if err != nil || status != 200 {
			t.Fatalf("request %d: status %d, err %v", i, status, err)
		}
	}
	get(0)
	get(1) // same connection
	mu.Lock()
	closeNext = true
	mu.Unlock()
	get(2) // the server closes after answering
	get(3) // a new connection
	srv.CloseClientConnections()
	get(4) // the kept connection was closed while idle: dialled again
	mu.Lock()
	defer mu.Unlock()
	if remotes[0] != remotes[1] || remotes[1] != remotes[2] || remotes[2] == remotes[3] || remotes[3] == remotes[4] {
		t.Errorf("connections used: %v; want 0-2 on one, 3 on a second, 4 on a third", remotes)
	}
	// Every request carries the header, a resent one too.
	for i, tok := range tokens {
		if tok != "t0k" {
			t.Errorf("request %d carried token %q, want t0k", i, tok)
		}
	}
}
