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

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"isochron.io/isochron/probes/credential"
	"isochron.io/isochron/probes/gateway"
	"isochron.io/isochron/probes/report"
	"isochron.io/isochron/probes/rtt"
)

func init() {
	commands["slo"] = command{
		summary: "a probe Job's measurement: gateway and RT-NIC round trips at once, one report",
		run:     runSLO,
	}
}

// runSLO is what the operator's probe Jobs run: the gateway the crawler sends to and,
// with --rtt-target, UDP round trips to the crawler's RT-NIC, both for --duration. The
// report (package probes/report) goes to --report, the pod's termination message.
func runSLO(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, asJSON := newFlagSet("slo", stderr)
	listen := fs.String("listen", ":8080", "gateway address the crawler sends to (also serves /metrics)")
	period := fs.Duration("period", time.Second, "each point's request period")
	delay := fs.Duration("delay", 10*time.Millisecond, "emulated one-way WAN delay before each gateway answer")
	objective := fs.Float64("objective", 99.999, "percentile the atObjective figures are taken at")
	tolerance := fs.Duration("tolerance", 0, "interval error above which an interval counts in overTolerance (0: not counted)")
	duration := fs.Duration("duration", 0, "how long to measure (required)")
	var rc rtt.Config
	fs.StringVar(&rc.Target, "rtt-target", "", "HOST:PORT of the crawler's RT-NIC echo service; empty: no round trips")
	fs.Float64Var(&rc.Rate, "rtt-rate", 1000, "round trips per second")
	fs.DurationVar(&rc.Deadline, "rtt-deadline", 5*time.Millisecond, "round-trip deadline")
	reportPath := fs.String("report", "", "file to write the report to, e.g. /dev/termination-log")
	crawlRPS := fs.Int("crawl-rps", 0, "announce a probe window at /window asking the guest for this schedule (requests per second); 0: no window")
	traffic := fs.String("traffic", gateway.TrafficAgent, "what the window asks the guest to send: agent (the agent crawls) or crawler (the guest's own crawler copies its requests)")
	keyEnv := fs.String("key-env", "", "environment variable holding the crawler's probe key (hex): the gateway then counts only requests with its token over this probe's nonce; empty: every request counts")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *duration <= 0 {
		return usageError(fs, fmt.Errorf("--duration must be positive, got %s", *duration))
	}
	if *traffic != gateway.TrafficAgent && *traffic != gateway.TrafficCrawler {
		return usageError(fs, fmt.Errorf("--traffic must be %s or %s, got %q", gateway.TrafficAgent, gateway.TrafficCrawler, *traffic))
	}
	gcfg := gateway.Config{Delay: *delay, Period: *period, Objective: *objective, Tolerance: *tolerance}
	if *crawlRPS > 0 {
		// Its end is set when the measurement starts, below.
		gcfg.Window = &gateway.Window{Traffic: *traffic, RPS: *crawlRPS, PeriodSeconds: period.Seconds()}
		gcfg.MaxPoints = gateway.MaxPoints(*crawlRPS, *period)
	}
	rep := report.Report{Version: report.Version, Objective: *objective, RTTTarget: rc.Target}
	if *keyEnv != "" {
		// A probe without its key would count nobody: it fails, and says why.
		key, err := credential.Parse("--key-env "+*keyEnv, os.Getenv(*keyEnv))
		if err != nil {
			rep.Error = err.Error()
			return finishSLO(stdout, stderr, *asJSON, *reportPath, rep)
		}
		gcfg.Key = key
	}
	g, err := gateway.New(gcfg)
	if err != nil {
		return usageError(fs, err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		rep.Error = fmt.Sprintf("listening on --listen %s: %v", *listen, err)
		return finishSLO(stdout, stderr, *asJSON, *reportPath, rep)
	}
	fmt.Fprintf(stderr, "rtprobe slo: gateway on %s for %s", ln.Addr(), *duration)
	if rc.Target != "" {
		fmt.Fprintf(stderr, ", round trips to %s at %g/s against %s", rc.Target, rc.Rate, rc.Deadline)
	}
	fmt.Fprintln(stderr)

	rep.Start = time.Now().UTC()
	if gcfg.Window != nil {
		// The window ends with the measurement: the agent stops sending then.
		gcfg.Window.Until = rep.Start.Add(*duration)
	}
	mctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var (
		wg       sync.WaitGroup
		gwErr    error
		rttRes   rtt.Result
		rttErr   error
		rttTried = rc.Target != ""
	)
	wg.Add(1)
	go func() { defer wg.Done(); gwErr = g.Serve(mctx, ln) }()
	if rttTried {
		rc.Duration, rc.Objective = *duration, *objective
		wg.Add(1)
		go func() { defer wg.Done(); rttRes, rttErr = rtt.Run(ctx, rc) }()
	}
	wg.Wait()
	rep.End = time.Now().UTC()
	// Interrupted: the pod was stopped (SIGTERM) before the duration ended.
	rep.Interrupted = ctx.Err() != nil
	gw, _ := g.Result()
	rep.Interval = &gw
	switch {
	case gwErr != nil:
		rep.Error = gwErr.Error()
	case rttErr != nil:
		rep.Error = "round trips: " + rttErr.Error()
	}
	if rttTried && rttErr == nil {
		rep.RTT = &rttRes
	}
	return finishSLO(stdout, stderr, *asJSON, *reportPath, rep)
}

// finishSLO writes rep to path and stdout. The exit code is 0 only for a measurement
// that ran its whole duration without error, so a Job never completes on a partial one.
func finishSLO(stdout, stderr io.Writer, asJSON bool, path string, rep report.Report) int {
	b, err := rep.Marshal()
	if err != nil {
		fmt.Fprintf(stderr, "rtprobe slo: %v\n", err)
		return exitError
	}
	if path != "" {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			fmt.Fprintf(stderr, "rtprobe slo: writing --report: %v\n", err)
			return exitError
		}
	}
	if asJSON {
		fmt.Fprintln(stdout, string(b))
	} else {
		if rep.Interval != nil {
			fmt.Fprintln(stdout, rep.Interval.Human())
		}
		if rep.RTT != nil {
			fmt.Fprintln(stdout, rep.RTT.Human())
		}
	}
	switch {
	case rep.Error != "":
		fmt.Fprintf(stderr, "rtprobe slo: %s\n", rep.Error)
		return exitError
	case rep.Interrupted:
		fmt.Fprintln(stderr, "rtprobe slo: interrupted before --duration ended")
		return exitError
	}
	return exitOK
}
