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

	"isochron.io/isochron/probes/crawl"
)

func init() {
	commands["crawl"] = command{
		summary: "open-loop crawler: requests N points once per period, reports send lateness and response time",
		run:     runCrawl,
	}
}

func runCrawl(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, asJSON := newFlagSet("crawl", stderr)
	var cfg crawl.Config
	fs.StringVar(&cfg.Target, "target", "", "gateway URL, e.g. http://127.0.0.1:8080/ (required); ?point=ID is added")
	fs.Float64Var(&cfg.RPS, "rps", 1000, "requests per second; sets --points to rps×period when --points is 0")
	fs.DurationVar(&cfg.Period, "period", time.Second, "each point's request period")
	fs.IntVar(&cfg.Points, "points", 0, "number of points; 0 means rps×period")
	fs.DurationVar(&cfg.Duration, "duration", 0, "how long to send requests (required)")
	fs.IntVar(&cfg.Conns, "conns", 64, "connections (and workers) in the pool")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Second, "timeout of each request")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if cfg.Target == "" {
		return usageError(fs, fmt.Errorf("--target is required"))
	}
	if _, err := cfg.Validate(); err != nil {
		return usageError(fs, err)
	}
	res, err := crawl.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rtprobe crawl: %v\n", err)
		return exitError
	}
	printResult(stdout, *asJSON, res)
	return exitOK
}
