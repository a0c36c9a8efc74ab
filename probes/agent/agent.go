// Package agent is isochron's probe agent, which runs in a crawler's guest. It idles until
// the crawler's probe gateway announces a window (GET /window on the probe Service, which
// has an endpoint only while a probe Job runs), then, for that window only:
//
//   - traffic "agent": it crawls the crawler's schedule itself (spec.rps requests a
//     second, each point once per period, open loop, package probes/crawl) to the
//     gateway, which measures each point's interval error; the real crawler's traffic
//     is not touched;
//   - traffic "crawler": it writes the window to a file (WindowFile) for the guest's
//     own crawler, which copies its requests to the gateway while the file is there,
//     and removes it when the window ends.
//
// Every request to the gateway carries the crawler's probe credential: the token of its
// key (Config.Key, which isochron's cloud-init part writes) over the nonce the gateway
// announced with the window (package credential). The gateway counts nothing else.
//
// Between windows it costs one HTTP GET per poll. docs/probes.md gives the contract.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"isochron.io/isochron/probes/crawl"
	"isochron.io/isochron/probes/credential"
	"isochron.io/isochron/probes/gateway"
)

// Config configures the agent.
type Config struct {
	// Gateways are the probe gateway's base URLs, tried in order: the Service's DNS name
	// (where the guest resolves cluster names) and its address.
	Gateways []string
	// Poll is how often the agent asks for a window.
	Poll time.Duration
	// WindowFile is where a window of traffic "crawler" is written for the guest's own
	// crawler.
	WindowFile string
	// Key is the crawler's probe key: its token over each window's nonce goes with every
	// request. Without it the agent serves no window of a gateway that asks for a token.
	Key []byte
	// Client asks for the window; a client with a 5 s timeout if nil.
	Client *http.Client
	// Log receives one line per window.
	Log io.Writer
	// Now returns the time; time.Now if nil.
	Now func() time.Time
	// CPUTime returns the CPU time the agent's process has used so far; its rusage if
	// nil. A window's cost is the difference across the window.
	CPUTime func() CPU
}

// CPU is CPU time, user and system.
type CPU struct {
	User, System time.Duration
}

// Sub is c less o.
func (c CPU) Sub(o CPU) CPU { return CPU{User: c.User - o.User, System: c.System - o.System} }

// Total is user and system time together.
func (c CPU) Total() time.Duration { return c.User + c.System }

// processCPU is the CPU time of this process, from getrusage(2).
func processCPU() CPU {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return CPU{}
	}
	return CPU{User: time.Duration(ru.Utime.Nano()), System: time.Duration(ru.Stime.Nano())}
}

// DefaultWindowFile is where a window for the guest's own crawler is written.
const DefaultWindowFile = "/run/isochron/probe-window.json"

// WindowFileContent is what WindowFile holds while a window of traffic "crawler" lasts:
// the crawler copies each of its requests, as GET <Gateway>/?point=<its point ID> with
// the header Header: Token, until Until on the guest's clock, and stops when the file is
// gone. The file is readable by root alone: the token is the crawler's credential for
// this window.
type WindowFileContent struct {
	Gateway       string    `json:"gateway"`
	RPS           int       `json:"rps"`
	PeriodSeconds float64   `json:"periodSeconds"`
	Until         time.Time `json:"until"`
	// Header and Token are the header every copied request carries and its value; absent
	// for a gateway that asks for none.
	Header string `json:"header,omitempty"`
	Token  string `json:"token,omitempty"`
}

// Window is one window the agent served.
type Window struct {
	Gateway string
	gateway.Window
	// Crawl is what the agent's own crawl measured of itself (traffic "agent").
	Crawl *crawl.Result
	// CPU is what the window cost the agent's process: the probe's cost to the guest.
	CPU CPU
	Err error
}

// Run serves windows until ctx ends. served, if set, is called after each window.
func Run(ctx context.Context, cfg Config, served func(Window)) error {
	if len(cfg.Gateways) == 0 {
		return errors.New("agent: no --gateway")
	}
	if cfg.Poll <= 0 {
		return fmt.Errorf("agent: --poll must be positive, got %s", cfg.Poll)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 5 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.WindowFile == "" {
		cfg.WindowFile = DefaultWindowFile
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.CPUTime == nil {
		cfg.CPUTime = processCPU
	}
	ticker := time.NewTicker(cfg.Poll)
	defer ticker.Stop()
	var last time.Time // the end of the last window served, on the gateway's clock
	for {
		// A window is served once: asked again before it ends (the crawl stops EndMargin
		// early), the gateway announces the same window, with the same end.
		if gw, win, ok := ask(ctx, cfg); ok && !win.Until.Equal(last) {
			last = win.Until
			before := cfg.CPUTime()
			w := serve(ctx, cfg, gw, win)
			w.CPU = cfg.CPUTime().Sub(before)
			fmt.Fprintf(cfg.Log, "agent: window of %s at %d rps from %s: %s\n", w.Traffic, w.RPS, gw, outcome(w))
			if served != nil {
				served(w)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// ask returns the first gateway that announces a window, and the window.
func ask(ctx context.Context, cfg Config) (string, gateway.Window, bool) {
	for _, gw := range cfg.Gateways {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(gw, "/")+"/window", nil)
		if err != nil {
			continue
		}
		resp, err := cfg.Client.Do(req)
		if err != nil {
			continue // no probe runs: the Service has no endpoint
		}
		var win gateway.Window
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&win)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK && err == nil && win.RemainingSeconds > 0 && win.RPS > 0 && win.PeriodSeconds > 0 {
			return gw, win, true
		}
	}
	return "", gateway.Window{}, false
}

// serve serves one window until it ends.
func serve(ctx context.Context, cfg Config, gw string, win gateway.Window) Window {
	w := Window{Gateway: gw, Window: win}
	remaining := time.Duration(win.RemainingSeconds * float64(time.Second))
	period := time.Duration(win.PeriodSeconds * float64(time.Second))
	var header http.Header
	var token string
	if win.Nonce != "" {
		if cfg.Key == nil {
			w.Err = errors.New("the gateway counts only requests with the crawler's probe credential, and this agent has no key (--key-file): it sends nothing")
			return w
		}
		token = credential.Token(cfg.Key, win.Nonce)
		header = http.Header{credential.Header: {token}}
	}
	wctx, cancel := context.WithTimeout(ctx, remaining)
	defer cancel()
	switch win.Traffic {
	case gateway.TrafficCrawler:
		c := WindowFileContent{Gateway: gw, RPS: win.RPS, PeriodSeconds: win.PeriodSeconds, Until: cfg.Now().Add(remaining)}
		if token != "" {
			c.Header, c.Token = credential.Header, token
		}
		w.Err = announce(wctx, cfg, c)
	default: // gateway.TrafficAgent
		if remaining <= EndMargin {
			w.Err = fmt.Errorf("%s of the window left: too little to crawl", remaining.Round(time.Millisecond))
			return w
		}
		res, err := crawl.Run(wctx, crawl.Config{
			Target:   strings.TrimSuffix(gw, "/") + "/",
			RPS:      float64(win.RPS),
			Period:   period,
			Duration: remaining - EndMargin,
			Conns:    Conns(win.RPS),
			Header:   header,
		})
		w.Crawl, w.Err = &res, err
	}
	return w
}

// EndMargin is how long before the window's end the agent's crawl stops, so that no
// request meets the gateway closing at the end of its measurement.
const EndMargin = 250 * time.Millisecond

// Conns is how many connections the agent's crawl keeps for rps requests a second: the
// requests of 50 ms in flight at once (the gateway answers after its emulated 10 ms WAN
// delay), at least 4 and at most 256.
func Conns(rps int) int {
	return int(math.Min(256, math.Max(4, math.Ceil(float64(rps)*0.05))))
}

// announce writes the window file for the guest's crawler, waits for the window's end
// and removes it.
func announce(ctx context.Context, cfg Config, c WindowFileContent) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.WindowFile), 0o755); err != nil {
		return err
	}
	tmp := cfg.WindowFile + ".tmp"
	_ = os.Remove(tmp) // WriteFile keeps the mode of a file that exists
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, cfg.WindowFile); err != nil {
		return err
	}
	<-ctx.Done()
	return os.Remove(cfg.WindowFile)
}

func outcome(w Window) string {
	switch {
	case w.Err != nil:
		return "error: " + w.Err.Error()
	case w.Crawl != nil:
		s := fmt.Sprintf("sent %d requests (%d failed); agent CPU %.2f s user + %.2f s system", w.Crawl.Sent, w.Crawl.Errors, w.CPU.User.Seconds(), w.CPU.System.Seconds())
		if w.Crawl.Sent > 0 {
			s += fmt.Sprintf(", %.1f us per request", float64(w.CPU.Total().Microseconds())/float64(w.Crawl.Sent))
		}
		return s
	}
	return "window file written, and removed at its end"
}
