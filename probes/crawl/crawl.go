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
	"io"
	"net/http"
	"net/url"
	"strconv"
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
	return Schedule{Points: cfg.Points, Period: cfg.Period}, nil
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
}

type worker struct {
	lateness, response *stats.Recorder
	sent, errors       int64
	firstErr           string
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
	urls := make([]string, cfg.Points)
	for i := range urls {
		urls[i], _ = PointURL(cfg.Target, i)
	}
	transport := &http.Transport{
		MaxConnsPerHost:     cfg.Conns,
		MaxIdleConns:        cfg.Conns,
		MaxIdleConnsPerHost: cfg.Conns,
		IdleConnTimeout:     90 * time.Second,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: cfg.Timeout}

	jobs := make(chan job) // unbuffered: a busy pool blocks the scheduler, visibly late
	workers := make([]*worker, cfg.Conns)
	var wg sync.WaitGroup
	for k := range workers {
		w := &worker{lateness: stats.NewRecorder(), response: stats.NewRecorder()}
		workers[k] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				w.do(client, j)
			}
		}()
	}

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
		at := start.Add(off)
		select {
		case jobs <- job{url: urls[sched.Point(j)], scheduled: at}:
			scheduled++
		case <-ctx.Done():
			break loop
		}
	}
	close(jobs)
	wg.Wait()

	lat, resp := stats.NewRecorder(), stats.NewRecorder()
	res := Result{Scheduled: scheduled, Points: cfg.Points}
	for _, w := range workers {
		lat.Merge(w.lateness)
		resp.Merge(w.response)
		res.Sent += w.sent
		res.Errors += w.errors
		if res.FirstError == "" {
			res.FirstError = w.firstErr
		}
	}
	res.SendLateness = lat.Summary("send-lateness")
	res.ResponseTime = resp.Summary("response-time")
	return res, nil
}

func (w *worker) do(client *http.Client, j job) {
	req, err := http.NewRequest(http.MethodGet, j.url, nil)
	if err != nil {
		w.fail(err)
		return
	}
	sent := time.Now()
	w.lateness.Record(sent.Sub(j.scheduled).Microseconds())
	w.sent++
	resp, err := client.Do(req)
	if err != nil {
		w.fail(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	w.response.Record(time.Since(j.scheduled).Microseconds())
	if resp.StatusCode/100 != 2 {
		w.fail(fmt.Errorf("GET %s: %s", j.url, resp.Status))
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
