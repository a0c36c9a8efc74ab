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

// Package crawl is the BMS crawler study's crawler: it requests N points, each
// once per period, spread evenly over the period, at their scheduled instants
// whatever the responses do (open loop).
//
// One scheduler goroutine sleeps until each request's absolute scheduled time
// and hands it to a bounded pool of workers, one per connection. When every
// worker is busy the hand-over blocks; the schedule is never skipped, and the
// requests that follow go out as soon as a worker is free, late. Lateness and
// response time are both measured from the SCHEDULED instant, so a stall shows
// in the figures instead of being hidden (no coordinated omission):
//
//	send-lateness = actual send - scheduled
//	response-time = response fully read - scheduled
package crawl

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"isochron.io/isochron/probes/monoclock"
	"isochron.io/isochron/probes/stats"
)

// Config configures a crawl.
type Config struct {
	// Target is the gateway URL; ?point=ID is added to it.
	Target string
	// RPS is the request rate; with Points it sets nothing else: Points
	// defaults to RPS×Period.
	RPS float64
	// Period is each point's request period.
	Period time.Duration
	// Points is the number of points; 0 means RPS×Period.
	Points int
	// Duration is how long requests are scheduled.
	Duration time.Duration
	// Conns bounds the connections and workers.
	Conns int
	// Timeout bounds each request; 0 means 10 s.
	Timeout time.Duration
	// Header is sent with every request (the agent's probe token, package credential).
	Header http.Header
}

// Schedule is the crawl's timetable: request j is for point j mod N at
// offset (j/N)×Period + (j mod N)×Period/N from the start.
type Schedule struct {
	Points int
	Period time.Duration
}

// Offset returns request j's offset from the start.
func (s Schedule) Offset(j int64) time.Duration {
	n := int64(s.Points)
	cycle, i := j/n, j%n
	return time.Duration(cycle)*s.Period + time.Duration(i*int64(s.Period)/n)
}

// Point returns the point of request j.
func (s Schedule) Point(j int64) int { return int(j % int64(s.Points)) }

// Count returns how many requests fall in [0, d).
func (s Schedule) Count(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	n := int64(s.Points)
	full := int64(d / s.Period)
	rest := d - time.Duration(full)*s.Period
	// Requests i of the last, partial cycle with i×period/n < rest.
	var extra int64
	for extra < n && time.Duration(extra*int64(s.Period)/n) < rest {
		extra++
	}
	return full*n + extra
}

// PointURL returns the URL for point i of target.
func PointURL(target string, i int) (string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", fmt.Errorf("parsing --target %q: %w", target, err)
	}
	q := u.Query()
	q.Set("point", strconv.Itoa(i))
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Validate fills defaults and checks cfg, returning the schedule.
func (cfg *Config) Validate() (Schedule, error) {
	if cfg.Period <= 0 {
		return Schedule{}, fmt.Errorf("--period must be positive, got %s", cfg.Period)
	}
	if cfg.Points == 0 {
		cfg.Points = int(cfg.RPS*cfg.Period.Seconds() + 0.5)
	}
	if cfg.Points <= 0 {
		return Schedule{}, fmt.Errorf("need --points > 0 or --rps > 0 (got points %d, rps %g)", cfg.Points, cfg.RPS)
	}
	if cfg.Duration <= 0 {
		return Schedule{}, fmt.Errorf("--duration must be positive, got %s", cfg.Duration)
	}
	if cfg.Conns <= 0 {
		return Schedule{}, fmt.Errorf("--conns must be positive, got %d", cfg.Conns)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if _, err := PointURL(cfg.Target, 0); err != nil {
		return Schedule{}, err
	}
	for name, values := range cfg.Header {
		for _, v := range append([]string{name}, values...) {
			if strings.ContainsAny(v, "\r\n") {
				return Schedule{}, fmt.Errorf("header %s: a line break in %q", name, v)
			}
		}
	}
	if u, _ := url.Parse(cfg.Target); u.Scheme != "http" || u.Host == "" {
		return Schedule{}, fmt.Errorf("--target must be an http:// URL with a host, got %q", cfg.Target)
	}
	return Schedule{Points: cfg.Points, Period: cfg.Period}, nil
}

// headerLines is h as the lines of a request, "Name: value\r\n", in name order.
func headerLines(h http.Header) string {
	var b strings.Builder
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for _, v := range h[name] {
			b.WriteString(http.CanonicalHeaderKey(name) + ": " + v + "\r\n")
		}
	}
	return b.String()
}

// Result is what a crawl measured.
type Result struct {
	SendLateness stats.Summary `json:"sendLateness"`
	ResponseTime stats.Summary `json:"responseTime"`
	Scheduled    int64         `json:"scheduled"`
	Sent         int64         `json:"sent"`
	Errors       int64         `json:"errors"`
	Points       int           `json:"points"`
	// FirstError is the first failed request's error, to say what failed.
	FirstError string `json:"firstError,omitempty"`
}

type job struct {
	url       string
	scheduled time.Time
	// reused is set when the request went out on a connection already open.
	reused bool
}

// worker is one connection and the goroutine that reads its answers.
type worker struct {
	conn     *conn
	pending  chan job
	response *stats.Recorder
	errors   int64
	firstErr string
}

func (w *worker) fail(err error) {
	w.errors++
	if w.firstErr == "" {
		w.firstErr = err.Error()
	}
}

// Run crawls until the duration ends or ctx is done, then waits for the
// answers in flight (each bounded by the request timeout).
func Run(ctx context.Context, cfg Config) (Result, error) {
	sched, err := cfg.Validate()
	if err != nil {
		return Result{}, err
	}
	target, _ := url.Parse(cfg.Target)
	// Request URIs (path and query) of every point, built before the clock starts.
	urls := make([]string, cfg.Points)
	for i := range urls {
		u, _ := PointURL(cfg.Target, i)
		pu, _ := url.Parse(u)
		urls[i] = pu.RequestURI()
	}

	// Connections free for a request; the scheduler takes one at each scheduled instant
	// (or waits, visibly late, when all are busy), writes the request itself and hands
	// the connection to its goroutine, which reads the answer and frees it again.
	idle := make(chan *worker, cfg.Conns)
	workers := make([]*worker, cfg.Conns)
	var wg sync.WaitGroup
	for k := range workers {
		c, err := newConn(target, cfg.Timeout, headerLines(cfg.Header))
		if err != nil {
			return Result{}, err
		}
		w := &worker{response: stats.NewRecorder(), conn: c, pending: make(chan job, 1)}
		workers[k] = w
		idle <- w
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.close()
			for j := range w.pending {
				w.receive(j)
				idle <- w
			}
		}()
	}

	lateness := stats.NewRecorder()
	var sent, sendErrors int64
	var firstSendErr string
	total := sched.Count(cfg.Duration)
	// Scheduled instants as Go times (for lateness) and as CLOCK_MONOTONIC
	// readings (for the absolute sleeps), from one starting point.
	start := time.Now().Add(10 * time.Millisecond) // let the workers start
	startMono := monoclock.Now() + int64(10*time.Millisecond)
	var scheduled int64
loop:
	for j := int64(0); j < total; j++ {
		off := sched.Offset(j)
		for monoclock.Now() < startMono+int64(off) {
			if ctx.Err() != nil {
				break loop
			}
			monoclock.SleepUntil(startMono+int64(off), 100*time.Millisecond)
		}
		var w *worker
		select {
		case w = <-idle:
		case <-ctx.Done():
			break loop
		}
		scheduled++
		jb := job{url: urls[sched.Point(j)], scheduled: start.Add(off), reused: w.conn.open()}
		err := w.conn.send(jb.url)
		lateness.Record(time.Since(jb.scheduled).Microseconds())
		sent++
		if err != nil {
			sendErrors++
			if firstSendErr == "" {
				firstSendErr = fmt.Sprintf("GET %s: %v", jb.url, err)
			}
			idle <- w
			continue
		}
		w.pending <- jb
	}
	for _, w := range workers {
		close(w.pending)
	}
	wg.Wait()

	resp := stats.NewRecorder()
	res := Result{Scheduled: scheduled, Points: cfg.Points, Sent: sent, Errors: sendErrors, FirstError: firstSendErr}
	for _, w := range workers {
		resp.Merge(w.response)
		res.Errors += w.errors
		if res.FirstError == "" {
			res.FirstError = w.firstErr
		}
	}
	lat := lateness
	res.SendLateness = lat.Summary("send-lateness")
	res.ResponseTime = resp.Summary("response-time")
	return res, nil
}

// receive reads the answer to j and records its response time from the schedule.
func (w *worker) receive(j job) {
	status, err := w.conn.receive(j.url, j.reused)
	if err != nil {
		w.fail(fmt.Errorf("GET %s: %w", j.url, err))
		return
	}
	w.response.Record(time.Since(j.scheduled).Microseconds())
	if status/100 != 2 {
		w.fail(fmt.Errorf("GET %s: status %d", j.url, status))
	}
}

// Human returns the result as readable text.
func (r Result) Human() string {
	s := fmt.Sprintf("%s\n%s\npoints %d, scheduled %d, sent %d, errors %d.",
		r.SendLateness.Human(), r.ResponseTime.Human(), r.Points, r.Scheduled, r.Sent, r.Errors)
	if r.FirstError != "" {
		s += "\nfirst error: " + r.FirstError
	}
	return s
}

// JSON returns the result as one line of JSON.
func (r Result) JSON() string {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Sprintf(`{"error":%q}`, err.Error())
	}
	return string(b)
}
