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
	"time"

	"isochron.io/isochron/probes/gateway"
)

func init() {
	commands["gateway"] = command{
		summary: "emulated building gateway: stamps arrivals, reports each point's interval error",
		run:     runGateway,
	}
}

// result is a subcommand's figures, printed human or as one JSON line.
type result interface {
	Human() string
	JSON() string
}

// printResult prints r: as one JSON line when asJSON, else as human text.
func printResult(stdout io.Writer, asJSON bool, r result) {
	if asJSON {
		fmt.Fprintln(stdout, r.JSON())
		return
	}
	fmt.Fprintln(stdout, r.Human())
}

func runGateway(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, asJSON := newFlagSet("gateway", stderr)
	listen := fs.String("listen", "", "address to listen on, e.g. 127.0.0.1:8080 (required)")
	delay := fs.Duration("delay", 10*time.Millisecond, "emulated one-way WAN delay before each answer")
	period := fs.Duration("period", time.Second, "each point's request period")
	duration := fs.Duration("duration", 0, "how long to serve; 0 serves until SIGTERM or interrupt")
	logFile := fs.String("log", "", `file to write one line per request, "unix_us point"`)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *listen == "" {
		return usageError(fs, fmt.Errorf("--listen is required"))
	}
	if *duration < 0 {
		return usageError(fs, fmt.Errorf("--duration must not be negative, got %s", *duration))
	}
	cfg := gateway.Config{Delay: *delay, Period: *period}
	var logf *os.File
	if *logFile != "" {
		f, err := os.Create(*logFile)
		if err != nil {
			fmt.Fprintf(stderr, "rtprobe gateway: creating --log: %v\n", err)
			return exitError
		}
		defer f.Close() // on the early returns; the normal end closes it and checks
		logf, cfg.Log = f, f
	}
	g, err := gateway.New(cfg)
	if err != nil {
		return usageError(fs, err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "rtprobe gateway: listening on --listen %s: %v\n", *listen, err)
		return exitError
	}
	fmt.Fprintf(stderr, "rtprobe gateway: serving on %s (metrics at /metrics)\n", ln.Addr())
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := g.Serve(ctx, ln); err != nil {
		fmt.Fprintf(stderr, "rtprobe gateway: %v\n", err)
		return exitError
	}
	res, err := g.Result()
	if logf != nil {
		// A write the kernel deferred can fail only here: the log would be short.
		if cerr := logf.Close(); err == nil {
			err = cerr
		}
	}
	printResult(stdout, *asJSON, res)
	if err != nil {
		fmt.Fprintf(stderr, "rtprobe gateway: writing --log: %v\n", err)
		return exitError
	}
	return exitOK
}
