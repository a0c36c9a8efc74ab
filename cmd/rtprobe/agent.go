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
	"strings"
	"time"

	"isochron.io/isochron/probes/agent"
	"isochron.io/isochron/probes/credential"
)

func init() {
	commands["agent"] = command{
		summary: "in-guest probe agent: while the crawler's probe gateway announces a window, sends the crawler's schedule to it",
		run:     runAgent,
	}
}

// runAgent runs in a crawler's guest for as long as the guest runs (isochron's cloud-init
// part starts it); each window it served is one line on stdout.
func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, asJSON := newFlagSet("agent", stderr)
	gateways := fs.String("gateway", "", "probe gateway base URLs, comma-separated, tried in order (required), e.g. http://tower-a-probe.bms.svc:8080,http://10.96.0.17:8080")
	cfg := agent.Config{Log: stderr}
	fs.DurationVar(&cfg.Poll, "poll", 5*time.Second, "how often to ask the gateway for a window")
	fs.StringVar(&cfg.WindowFile, "window-file", agent.DefaultWindowFile, "where a window for the guest's own crawler is written (traffic crawler)")
	keyFile := fs.String("key-file", "", "file holding the crawler's probe key (hex), which isochron's cloud-init part writes; without it a gateway that counts only the crawler's credential gets nothing from this agent")
	var mark agent.Marking
	fs.IntVar(&mark.DSCP, "dscp", -1, "DSCP code point to set, at start, on everything leaving the NIC of --dscp-mac (the RT-NIC); -1: none")
	fs.StringVar(&mark.MAC, "dscp-mac", "", "MAC address of the NIC to mark (with --dscp)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if mark.DSCP >= 0 {
		// A guest whose marking fails still serves probe windows: the error is logged.
		ifaces, err := net.Interfaces()
		if err == nil {
			var dev string
			dev, err = agent.Mark(mark, ifaces, agent.ExecRunner)
			if err == nil {
				fmt.Fprintf(stderr, "rtprobe agent: DSCP %d on %s (MAC %s)\n", mark.DSCP, dev, mark.MAC)
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "rtprobe agent: marking the RT-NIC: %v\n", err)
		}
	}
	for _, g := range strings.Split(*gateways, ",") {
		if g = strings.TrimSpace(g); g != "" {
			cfg.Gateways = append(cfg.Gateways, g)
		}
	}
	if len(cfg.Gateways) == 0 {
		return usageError(fs, fmt.Errorf("--gateway is required"))
	}
	if *keyFile != "" {
		b, err := os.ReadFile(*keyFile)
		if err == nil {
			cfg.Key, err = credential.Parse("--key-file "+*keyFile, string(b))
		}
		if err != nil {
			// The agent still runs: it logs, at each window, that it cannot take part.
			fmt.Fprintf(stderr, "rtprobe agent: reading the probe key: %v\n", err)
		}
	}
	served := func(w agent.Window) {
		if w.Crawl != nil {
			printResult(stdout, *asJSON, *w.Crawl)
		}
	}
	if err := agent.Run(ctx, cfg, served); err != nil {
		fmt.Fprintf(stderr, "rtprobe agent: %v\n", err)
		return exitError
	}
	return exitOK
}
