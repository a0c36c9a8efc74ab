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

// Package gateway is the BMS crawler study's building gateway: an HTTP server
// that stamps each request's arrival, identifies the point from ?point=ID,
// answers after an emulated WAN delay and computes each point's
// measurement-interval error (see package interval).
//
// With a key (Config.Key) it counts only the requests that carry the probe's token
// (package credential) and counts the others as foreign, storing nothing of them; and it
// keeps at most Config.MaxPoints points. What it holds is bounded whatever it is sent.
package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"isochron.io/isochron/probes/credential"
	"isochron.io/isochron/probes/interval"
	"isochron.io/isochron/probes/stats"
)

// Metric is the summary's metric name.
const Metric = "interval-error"

// Config configures a Gateway.
type Config struct {
	// Delay is the emulated one-way WAN delay; the answer is sent after it.
	Delay time.Duration
	// Period is each point's request period.
	Period time.Duration
	// Objective, if > 0, is a percentile (for example 99.999) whose interval error the
	// result also reports as atObjective.
	Objective float64
	// Tolerance, if > 0, is the interval error above which an interval counts as over
	// tolerance (reported as overTolerance).
	Tolerance time.Duration
	// Log, if set, receives one line per request: "unix_us point".
	Log io.Writer
	// Now returns the time; time.Now if nil.
	Now func() time.Time
	// Window, if set, is the probe window the gateway announces at /window to the agent
	// in the guest (package probes/agent): the traffic it asks for and until when.
	Window *Window
	// Key, if set, is the crawler's probe key: the gateway draws a nonce, announces it
	// with the window, and counts only the requests whose credential.Header carries
	// credential.Token(Key, nonce); the others are counted as Foreign, and nothing else
	// of them is kept. Without a key every request counts (rtprobe gateway).
	Key []byte
	// MaxPoints, if > 0, is the most points the gateway measures (MaxPoints gives it for a
	// schedule); the requests of further points are counted as untracked.
	MaxPoints int
}

// MaxPoints is the most points a gateway measures for a schedule of rps requests a second,
// each point once per period: the schedule's points and a quarter more, plus 64, so that
// a crawler whose point IDs change now and then (Crawler traffic) is still measured
// whole. Further points are counted, not measured, and say so in the result.
func MaxPoints(rps int, period time.Duration) int {
	points := int(float64(rps)*period.Seconds() + 0.5)
	return points + points/4 + 64
}

// MaxHeaderBytes bounds what the gateway reads of each request's line and headers: a
// point ID and the token fit many times over.
const MaxHeaderBytes = 16 << 10

// Window is a probe window as the gateway announces it at /window.
type Window struct {
	// Traffic is what the guest sends: TrafficAgent (the agent crawls the schedule) or
	// TrafficCrawler (the guest's own crawler copies its requests here).
	Traffic string `json:"traffic"`
	// RPS and PeriodSeconds are the schedule: RPS requests a second, each of
	// RPS×PeriodSeconds points once per period.
	RPS           int     `json:"rps"`
	PeriodSeconds float64 `json:"periodSeconds"`
	// RemainingSeconds is how long the window still lasts, from the moment of the answer:
	// relative, so that the guest's clock need not agree with the gateway's.
	RemainingSeconds float64 `json:"remainingSeconds"`
	// Until is the end of the window on the gateway's clock (for people reading it).
	Until time.Time `json:"until"`
	// Nonce, with a keyed gateway, is this probe's nonce: the agent presents
	// credential.Token(its key, Nonce) in credential.Header on every request.
	Nonce string `json:"nonce,omitempty"`
}

// The traffic a window asks for.
const (
	TrafficAgent   = "agent"
	TrafficCrawler = "crawler"
)

// Gateway records interval errors. Its Handler is safe for concurrent use.
type Gateway struct {
	cfg Config
	// nonce and token are the probe's nonce and the token it asks for; "" without a key.
	nonce, token string
	// foreign counts the requests without the token (atomic: no lock for them).
	foreign atomic.Int64

	mu       sync.Mutex
	tracker  *interval.Tracker
	rec      *stats.Recorder
	requests int64
	over     int64
	log      *bufio.Writer

	registry       *prometheus.Registry
	histogram      prometheus.Histogram
	counter        prometheus.Counter
	foreignCounter prometheus.Counter
}

// New returns a Gateway for cfg. Period must be positive.
func New(cfg Config) (*Gateway, error) {
	if cfg.Period <= 0 {
		return nil, fmt.Errorf("gateway: --period must be positive, got %s", cfg.Period)
	}
	if cfg.Objective < 0 || cfg.Objective > 100 {
		return nil, fmt.Errorf("gateway: --objective must be a percentile in (0, 100], got %g", cfg.Objective)
	}
	if cfg.Delay < 0 {
		return nil, fmt.Errorf("gateway: --delay must not be negative, got %s", cfg.Delay)
	}
	if cfg.MaxPoints < 0 {
		return nil, fmt.Errorf("gateway: the most points must not be negative, got %d", cfg.MaxPoints)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Gateway{
		cfg:     cfg,
		tracker: interval.NewBoundedTracker(cfg.Period.Microseconds(), cfg.MaxPoints),
		rec:     stats.NewRecorder(),
		histogram: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rtprobe_gateway_interval_error_seconds",
			Help:    "Measurement-interval error |actual interval - period| of each point's requests.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 20), // 10 us .. ~5 s
		}),
		counter: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rtprobe_gateway_requests_total",
			Help: "Requests the gateway counted (with a key: those that carried the probe's token).",
		}),
		foreignCounter: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rtprobe_gateway_foreign_requests_total",
			Help: "Requests without the probe's token: not counted.",
		}),
		registry: prometheus.NewRegistry(),
	}
	if cfg.Key != nil {
		nonce, err := credential.NewNonce()
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		g.nonce, g.token = nonce, credential.Token(cfg.Key, nonce)
	}
	g.registry.MustRegister(g.histogram, g.counter, g.foreignCounter)
	if cfg.Log != nil {
		g.log = bufio.NewWriterSize(cfg.Log, 64<<10)
	}
	return g, nil
}

// Handler serves the gateway at /, its Prometheus metrics at /metrics and, with a
// Window, the window at /window.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{}))
	if g.cfg.Window != nil {
		mux.HandleFunc("/window", g.window)
	}
	mux.HandleFunc("/", g.serve)
	return mux
}

// window answers with the window and how long it still lasts; 410 Gone once it is over.
func (g *Gateway) window(w http.ResponseWriter, _ *http.Request) {
	win := *g.cfg.Window
	win.Nonce = g.nonce
	win.RemainingSeconds = win.Until.Sub(g.cfg.Now()).Seconds()
	if win.RemainingSeconds <= 0 {
		http.Error(w, "the probe window is over", http.StatusGone)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(win)
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	// Stamp first, before the query or the body is looked at.
	at := g.cfg.Now().UnixMicro()
	if g.token != "" && !credential.Equal(g.token, r.Header.Get(credential.Header)) {
		// Not the crawler's agent: counted, and nothing else of it is kept or waited for.
		g.foreign.Add(1)
		g.foreignCounter.Inc()
		http.Error(w, "no probe credential: this gateway counts only its crawler's agent", http.StatusForbidden)
		return
	}
	point := r.URL.Query().Get("point")
	if point == "" {
		http.Error(w, "missing ?point=ID", http.StatusBadRequest)
		return
	}
	g.Observe(point, at)
	_, _ = io.Copy(io.Discard, r.Body)
	if g.cfg.Delay > 0 {
		// Each request runs in its own goroutine: sleeping here delays only
		// this answer.
		time.Sleep(g.cfg.Delay)
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, point+"\n")
}

// Observe counts one arrival of point at atUs (Unix microseconds).
func (g *Gateway) Observe(point string, atUs int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.requests++
	g.counter.Inc()
	if g.log != nil {
		var buf [64]byte
		b := strconv.AppendInt(buf[:0], atUs, 10)
		b = append(b, ' ')
		_, _ = g.log.Write(b)
		_, _ = g.log.WriteString(point)
		_ = g.log.WriteByte('\n')
	}
	o := g.tracker.Observe(point, atUs)
	if o.Kind == interval.First || o.Kind == interval.Untracked {
		return
	}
	g.rec.Record(o.ErrorUs)
	if g.cfg.Tolerance > 0 && o.ErrorUs > g.cfg.Tolerance.Microseconds() {
		g.over++
	}
	g.histogram.Observe(float64(o.ErrorUs) / 1e6)
}

// Result is what the gateway measured.
type Result struct {
	stats.Summary
	Requests int64 `json:"requests"`
	interval.Counts
	// AtObjective is the interval error at Config.Objective, in microseconds (absent
	// without an objective).
	AtObjective *float64 `json:"atObjective,omitempty"`
	// OverTolerance is the number of intervals whose error exceeded Config.Tolerance
	// (absent without a tolerance); gaps count, as their error is at least a period.
	OverTolerance *int64 `json:"overTolerance,omitempty"`
	// Foreign is the number of requests that did not carry the probe's token (another
	// pod's, or an agent without the crawler's key): not counted anywhere else.
	Foreign int64 `json:"foreign,omitempty"`
}

// Result returns the summary so far and flushes the log.
func (g *Gateway) Result() (Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var err error
	if g.log != nil {
		err = g.log.Flush()
	}
	res := Result{Summary: g.rec.Summary(Metric), Requests: g.requests, Counts: g.tracker.Counts(), Foreign: g.foreign.Load()}
	if g.cfg.Objective > 0 {
		v := g.rec.Quantile(g.cfg.Objective)
		res.AtObjective = &v
	}
	if g.cfg.Tolerance > 0 {
		over := g.over
		res.OverTolerance = &over
	}
	return res, err
}

// Human returns the result as readable text.
func (r Result) Human() string {
	s := fmt.Sprintf("%s\nrequests %d, points %d, intervals %d, missing %d, duplicates %d.",
		r.Summary.Human(), r.Requests, r.Points, r.Intervals, r.Missing, r.Duplicates)
	if r.Untracked > 0 {
		s += fmt.Sprintf(" %d requests of points beyond the most measured were not measured.", r.Untracked)
	}
	if r.Foreign > 0 {
		s += fmt.Sprintf(" %d requests without the probe's token were not counted.", r.Foreign)
	}
	return s
}

// JSON returns the result as one line of JSON: the summary's keys plus the counts.
func (r Result) JSON() string {
	b, err := json.Marshal(r)
	if err != nil {
		return r.Summary.JSON()
	}
	return string(b)
}

// Serve serves the gateway on ln until ctx is done, then shuts the server
// down, letting answers in flight finish for up to a second plus the delay.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: MaxHeaderBytes}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serving gateway on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second+g.cfg.Delay)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutting down gateway: %w", err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving gateway on %s: %w", ln.Addr(), err)
	}
	return nil
}
