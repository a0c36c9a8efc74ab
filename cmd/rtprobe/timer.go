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
	"time"

	"isochron.io/isochron/probes/timer"
)

func init() {
	commands["timer"] = command{
		summary: "timer wake-up latency, like cyclictest (clock_nanosleep, SCHED_FIFO, pinned)",
		run:     runTimer,
	}
}

func runTimer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, asJSON := newFlagSet("timer", stderr)
	cfg := timer.Config{LockMemory: true, HoldDMALatency: true}
	fs.DurationVar(&cfg.Interval, "interval", time.Millisecond, "time between wake-ups")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to measure")
	fs.IntVar(&cfg.Priority, "priority", 0, "SCHED_FIFO priority 1..99 (0: normal scheduling); needs CAP_SYS_NICE")
	fs.IntVar(&cfg.CPU, "cpu", -1, "pin the measuring thread to this CPU (-1: no pinning)")
	defaultSystem := fs.Bool("default-system", false, "leave /dev/cpu_dma_latency alone (like cyclictest --default-system); by default it is held at 0 while measuring, as cyclictest does")
	mode := fs.String("mode", string(timer.Periodic), "periodic: targets on the grid start+k*interval (cyclictest's default); "+
		"oneshot: each target is the previous wake-up + interval (like cyclictest -r)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	cfg.Mode = timer.Mode(*mode)
	cfg.HoldDMALatency = !*defaultSystem
	if err := cfg.Validate(); err != nil {
		return usageError(fs, err)
	}

	res, err := timer.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rtprobe timer: %v\n", err)
		return exitError
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "rtprobe timer: warning: %s\n", w)
	}
	if res.Skipped > 0 {
		fmt.Fprintf(stderr, "rtprobe timer: %d periods skipped after wake-ups later than the next target\n", res.Skipped)
	}
	printSummary(stdout, *asJSON, res.Latency.Summary(timer.Metric))
	if res.Interrupted {
		fmt.Fprintf(stderr, "rtprobe timer: interrupted after %d of %d wake-ups\n", res.Latency.Count(), cfg.ExpectedSamples())
		return exitError
	}
	return exitOK
}
