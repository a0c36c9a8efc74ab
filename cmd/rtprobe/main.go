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

// Command rtprobe measures what a real-time crawler VM needs, the way the
// studies in docs/ did: timer wake-up latency, the gateway's measurement-interval
// error, the crawler's send lateness and UDP round trips against a deadline.
//
//	rtprobe <subcommand> [flags]
//
// Each subcommand prints a human summary, or with --json one JSON object
// (see package probes/stats) on the last line of stdout. It is built static
// (CGO_ENABLED=0) so it runs FROM scratch.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"isochron.io/isochron/internal/version"
	"isochron.io/isochron/probes/stats"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// command is one rtprobe subcommand; it returns the exit code.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands holds every subcommand; each file registers its own in init():
// commands["gateway"] = command{...}.
var commands = map[string]command{}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args[0] to its subcommand.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	case "-version", "--version":
		fmt.Fprintln(stdout, "rtprobe", version.Get())
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "rtprobe: unknown subcommand %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return cmd.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: rtprobe <subcommand> [flags]")
	fmt.Fprintln(w, "       rtprobe --version")
	fmt.Fprintln(w, "\nSubcommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nEvery subcommand takes --json to print one JSON object on the last line of stdout.")
	fmt.Fprintln(w, "Run 'rtprobe <subcommand> -h' for its flags.")
}

// newFlagSet returns a flag set for a subcommand that already has --json;
// the returned pointer is its value after Parse.
func newFlagSet(name string, stderr io.Writer) (*flag.FlagSet, *bool) {
	fs := flag.NewFlagSet("rtprobe "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON object on the last line of stdout instead of the human summary")
	return fs, asJSON
}

// parseFlags parses args into fs. ok is false when the subcommand must stop,
// with the exit code to return: 0 after -h, 2 on bad usage.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK, false
	case err != nil:
		return exitUsage, false
	case fs.NArg() > 0:
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return exitUsage, false
	}
	return exitOK, true
}

// usageError prints msg as a usage error of fs and returns the usage exit code.
func usageError(fs *flag.FlagSet, msg error) int {
	fmt.Fprintf(fs.Output(), "%s: %v\n", fs.Name(), msg)
	return exitUsage
}

// printSummary prints s: as one JSON line when asJSON, else as the human paragraph.
func printSummary(stdout io.Writer, asJSON bool, s stats.Summary) {
	if asJSON {
		fmt.Fprintln(stdout, s.JSON())
		return
	}
	fmt.Fprintln(stdout, s.Human())
}
