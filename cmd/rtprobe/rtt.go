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
	"time"

	"isochron.io/isochron/probes/rtt"
)

func init() {
	commands["rtt"] = command{
		summary: "UDP round trips at a fixed rate against a deadline (--target), or the echo server (--serve)",
		run:     runRTT,
	}
}

func runRTT(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, asJSON := newFlagSet("rtt", stderr)
	serve := fs.String("serve", "", "echo UDP datagrams on this address, e.g. 0.0.0.0:9000")
	var cfg rtt.Config
	fs.StringVar(&cfg.Target, "target", "", "HOST:PORT of an echo server to probe")
	fs.Float64Var(&cfg.Rate, "rate", 1000, "probes per second")
	fs.DurationVar(&cfg.Deadline, "deadline", 5*time.Millisecond, "round-trip deadline; a later answer is a miss")
	fs.DurationVar(&cfg.Duration, "duration", 0, "how long to probe (with --target), or to serve (with --serve; 0 until SIGTERM)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	switch {
	case (*serve == "") == (cfg.Target == ""):
		return usageError(fs, fmt.Errorf("give exactly one of --serve and --target"))
	case *serve != "":
		conn, err := net.ListenPacket("udp", *serve)
		if err != nil {
			fmt.Fprintf(stderr, "rtprobe rtt: listening on --serve %s: %v\n", *serve, err)
			return exitError
		}
		defer conn.Close()
		fmt.Fprintf(stderr, "rtprobe rtt: echoing on %s\n", conn.LocalAddr())
		if cfg.Duration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
			defer cancel()
		}
		if err := rtt.Serve(ctx, conn); err != nil {
			fmt.Fprintf(stderr, "rtprobe rtt: %v\n", err)
			return exitError
		}
		return exitOK
	}
	res, err := rtt.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rtprobe rtt: %v\n", err)
		return exitError
	}
	printResult(stdout, *asJSON, res)
	return exitOK
}
