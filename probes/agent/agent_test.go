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

	"isochron.io/isochron/probes/gateway"
)

// startGateway serves a probe gateway with win on loopback, as a probe Job does, until
// the test ends; its log records every arrival.
func startGateway(t *testing.T, win *gateway.Window) (*gateway.Gateway, string, *strings.Builder) {
	t.Helper()
	log := &strings.Builder{}
	g, err := gateway.New(gateway.Config{Period: time.Second, Window: win, Log: log})
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
	w := runUntilServed(t, Config{Gateways: []string{"http://127.0.0.1:1", url}, Poll: 10 * time.Millisecond, CPUTime: cpu, Log: agentLog})
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
	if res.Points != 50 || res.Intervals < 30 || res.Requests != w.Crawl.Sent {
		t.Errorf("gateway: %d points, %d intervals, %d requests; want 50 points, intervals, and the %d requests sent", res.Points, res.Intervals, res.Requests, w.Crawl.Sent)
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
	w := runUntilServed(t, Config{Gateways: []string{url}, Poll: 10 * time.Millisecond, WindowFile: file})
	if w.Err != nil || w.Crawl != nil {
		t.Fatalf("window %+v: want the file announced, no crawl", w)
	}
	if !read.Load() || seen.Gateway != url || seen.RPS != 20 || seen.PeriodSeconds != 1 || time.Until(seen.Until) > time.Second {
		t.Errorf("window file %+v (read %v): want the gateway %s, 20 rps, a 1 s period and the window's end", seen, read.Load(), url)
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("window file left after the window: %v", err)
	}
	if res, _ := g.Result(); res.Requests != 0 {
		t.Errorf("the agent sent %d requests in a crawler's window", res.Requests)
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
