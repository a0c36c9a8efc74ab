package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"isochron.io/isochron/probes/credential"
	"isochron.io/isochron/probes/gateway"
)

// key is the test crawler's probe key.
var key = credential.Key([]byte("master"), "crawler-uid")

// startGateway serves a probe gateway with win on loopback, keyed with the test
// crawler's key, as a probe Job does, until the test ends; its log records every arrival
// it counted.
func startGateway(t *testing.T, win *gateway.Window) (*gateway.Gateway, string, *strings.Builder) {
	t.Helper()
	log := &strings.Builder{}
	g, err := gateway.New(gateway.Config{Period: time.Second, Window: win, Log: log, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return g, "http://" + ln.Addr().String(), log
}

// runUntilServed runs the agent until it has served one window, and returns it.
func runUntilServed(t *testing.T, cfg Config) Window {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got Window
	served := func(w Window) { got = w; cancel() }
	if err := Run(ctx, cfg, served); err != nil {
		t.Fatal(err)
	}
	if got.Gateway == "" {
		t.Fatal("no window served before the test's timeout")
	}
	return got
}

// The agent crawls the announced schedule to the gateway, for the window and no longer:
// every point each period, and nothing after the window's end.
func TestAgentCrawlsTheWindow(t *testing.T) {
	until := time.Now().Add(2 * time.Second)
	g, url, log := startGateway(t, &gateway.Window{Traffic: gateway.TrafficAgent, RPS: 50, PeriodSeconds: 1, Until: until})
	// The process's CPU clock reads 1 s + 2 s before the window and 1.5 s + 3.5 s after.
	readings := []CPU{{User: time.Second, System: 2 * time.Second}, {User: 1500 * time.Millisecond, System: 3500 * time.Millisecond}}
	cpu := func() CPU { c := readings[0]; readings = readings[1:]; return c }
	agentLog := &strings.Builder{}
	w := runUntilServed(t, Config{Gateways: []string{"http://127.0.0.1:1", url}, Poll: 10 * time.Millisecond, CPUTime: cpu, Log: agentLog, Key: key})
	if w.Err != nil || w.Crawl == nil {
		t.Fatalf("window %+v: want a crawl without error", w)
	}
	// What the window cost is in the window and in the agent's log line.
	if want := (CPU{User: 500 * time.Millisecond, System: 1500 * time.Millisecond}); w.CPU != want {
		t.Errorf("window CPU %+v, want %+v", w.CPU, want)
	}
	perRequest := fmt.Sprintf("agent CPU 0.50 s user + 1.50 s system, %.1f us per request", 2e6/float64(w.Crawl.Sent))
	if !strings.Contains(agentLog.String(), perRequest) {
		t.Errorf("agent log %q, want %q", agentLog.String(), perRequest)
	}
	if w.Crawl.Points != 50 || w.Crawl.Sent < 80 || w.Crawl.Sent > 101 || w.Crawl.Errors != 0 {
		t.Errorf("crawl: %d points, %d sent, %d errors; want 50 points, 80 to 100 requests in 2 s, no error", w.Crawl.Points, w.Crawl.Sent, w.Crawl.Errors)
	}
	res, err := g.Result()
	if err != nil {
		t.Fatal(err)
	}
	// Every request carried the crawler's token: all counted, none foreign.
	if res.Points != 50 || res.Intervals < 30 || res.Requests != w.Crawl.Sent || res.Foreign != 0 {
		t.Errorf("gateway: %d points, %d intervals, %d requests, %d foreign; want 50 points, intervals, and the %d requests sent, none foreign",
			res.Points, res.Intervals, res.Requests, res.Foreign, w.Crawl.Sent)
	}
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		us, _ := strconv.ParseInt(strings.Fields(line)[0], 10, 64)
		if at := time.UnixMicro(us); at.After(until.Add(50 * time.Millisecond)) {
			t.Errorf("a request arrived at %s, after the window's end %s", at.Format(time.StampMicro), until.Format(time.StampMicro))
			break
		}
	}
}

// Without a window (no probe runs: the Service has no endpoint, or the gateway has no
// window or an ended one) the agent only asks, and sends nothing else.
func TestAgentIdlesWithoutAWindow(t *testing.T) {
	var asks, others atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/window" {
			asks.Add(1)
			http.Error(w, "the probe window is over", http.StatusGone)
			return
		}
		others.Add(1)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Gateways: []string{"http://127.0.0.1:1", srv.URL}, Poll: 5 * time.Millisecond}, func(w Window) {
			t.Errorf("served %+v without a window", w)
		})
	}()
	for asks.Load() < 5 && ctx.Err() == nil {
		time.Sleep(time.Millisecond) // polling for the condition: five asks seen
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if asks.Load() < 5 || others.Load() != 0 {
		t.Errorf("%d asks and %d other requests; want asks only", asks.Load(), others.Load())
	}
}

// With traffic "crawler", the agent sends nothing itself: it writes the window for the
// guest's own crawler and removes it when the window ends.
func TestAgentAnnouncesTheWindowToTheCrawler(t *testing.T) {
	g, url, _ := startGateway(t, &gateway.Window{Traffic: gateway.TrafficCrawler, RPS: 20, PeriodSeconds: 1, Until: time.Now().Add(time.Second)})
	file := filepath.Join(t.TempDir(), "run", "probe-window.json")
	var seen WindowFileContent
	var read atomic.Bool
	go func() {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !read.Load(); time.Sleep(time.Millisecond) {
			if b, err := os.ReadFile(file); err == nil && json.Unmarshal(b, &seen) == nil {
				read.Store(true)
			}
		}
	}()
	w := runUntilServed(t, Config{Gateways: []string{url}, Poll: 10 * time.Millisecond, WindowFile: file, Key: key})
	if w.Err != nil || w.Crawl != nil {
		t.Fatalf("window %+v: want the file announced, no crawl", w)
	}
	if !read.Load() || seen.Gateway != url || seen.RPS != 20 || seen.PeriodSeconds != 1 || time.Until(seen.Until) > time.Second {
		t.Errorf("window file %+v (read %v): want the gateway %s, 20 rps, a 1 s period and the window's end", seen, read.Load(), url)
	}
	// The file carries the token the crawler's copies present: one the gateway counts.
	if seen.Header != credential.Header || seen.Token != credential.Token(key, w.Nonce) {
		t.Errorf("window file header %q token %q, want %s: the token of the window's nonce %s", seen.Header, seen.Token, credential.Header, w.Nonce)
	}
	req := httptest.NewRequest(http.MethodGet, "/?point=copy-1", nil)
	req.Header.Set(seen.Header, seen.Token)
	rec := httptest.NewRecorder()
	g.Handler().ServeHTTP(rec, req)
	if res, _ := g.Result(); rec.Code != http.StatusOK || res.Requests != 1 {
		t.Errorf("a copy with the file's token: %d, %d counted; want it counted", rec.Code, res.Requests)
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("window file left after the window: %v", err)
	}
	if res, _ := g.Result(); res.Requests != 1 || res.Foreign != 0 {
		t.Errorf("the gateway counted %d requests (%d foreign) in a crawler's window; want only the test's copy", res.Requests, res.Foreign)
	}
}

// The window file holds the crawler's credential for the window: root reads it, no one
// else.
func TestWindowFileIsPrivate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "probe-window.json")
	if err := os.WriteFile(file+".tmp", nil, 0o644); err != nil { // left by a crash, readable
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- announce(ctx, Config{WindowFile: file}, WindowFileContent{Token: "t"}) }()
	var mode os.FileMode
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if fi, err := os.Stat(file); err == nil {
			mode = fi.Mode().Perm()
			break
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if mode != 0o600 {
		t.Errorf("window file mode %v, want 0600", mode)
	}
}

// An agent without the crawler's key does not crawl a gateway that counts only the
// crawler's credential: nothing it sent would count, and it says why.
func TestAgentWithoutAKeySendsNothingToAKeyedGateway(t *testing.T) {
	g, url, _ := startGateway(t, &gateway.Window{Traffic: gateway.TrafficAgent, RPS: 20, PeriodSeconds: 1, Until: time.Now().Add(time.Second)})
	w := runUntilServed(t, Config{Gateways: []string{url}, Poll: 10 * time.Millisecond})
	if w.Err == nil || !strings.Contains(w.Err.Error(), "no key (--key-file)") || w.Crawl != nil {
		t.Errorf("window %+v, err %v: want no crawl and an error naming --key-file", w, w.Err)
	}
	if res, _ := g.Result(); res.Requests != 0 || res.Foreign != 0 {
		t.Errorf("gateway counted %d and %d foreign requests, want none sent", res.Requests, res.Foreign)
	}
}

func TestConns(t *testing.T) {
	for rps, want := range map[int]int{1: 4, 50: 4, 100: 5, 1000: 50, 10000: 256} {
		if got := Conns(rps); got != want {
			t.Errorf("Conns(%d) = %d, want %d", rps, got, want)
		}
	}
}

// A window is served once, however often the agent asks during it.
func TestAgentServesAWindowOnce(t *testing.T) {
	until := time.Now().Add(time.Hour)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/window" {
			_ = json.NewEncoder(w).Encode(gateway.Window{Traffic: gateway.TrafficAgent, RPS: 10, PeriodSeconds: 1, RemainingSeconds: 0.1, Until: until})
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var served atomic.Int64
	var asks int
	cfg := Config{Gateways: []string{srv.URL}, Poll: 5 * time.Millisecond, Client: &http.Client{Transport: countingTransport{&asks, cancel}}}
	if err := Run(ctx, cfg, func(Window) { served.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if served.Load() != 1 {
		t.Errorf("the same window served %d times in %d asks", served.Load(), asks)
	}
}

// countingTransport counts the agent's requests and ends the run after 5.
type countingTransport struct {
	n      *int
	cancel func()
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if *c.n++; *c.n >= 5 {
		c.cancel()
	}
	return http.DefaultTransport.RoundTrip(r)
}

// The default CPU clock is the process's own: it advances as the process computes.
func TestProcessCPUAdvances(t *testing.T) {
	before := processCPU()
	for sum, start := 0, time.Now(); time.Since(start) < 50*time.Millisecond; sum++ {
		_ = sum * sum
	}
	if d := processCPU().Sub(before); d.Total() <= 0 {
		t.Errorf("the process's CPU time advanced %+v while it computed for 50 ms", d)
	}
}
