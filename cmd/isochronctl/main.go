// Command isochronctl shows what isochron decides, offline: `plan` prints where each
// crawler would go and what the contention model predicts there, `render` prints the
// objects the operator would create for a set of CrawlerVMs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"isochron.io/isochron/internal/cli"
	"isochron.io/isochron/internal/version"
)

// Exit codes, a contract for pipelines.
const (
	exitOK        = 0
	exitError     = 1
	exitInvalid   = 2
	exitNotPlaced = 3
)

const usage = `isochronctl shows what isochron decides, offline.

Usage:
  isochronctl plan -f PATH [-f PATH...] [-o table|json]
  isochronctl render -f FILE [-f FILE...] [--node NAME]
  isochronctl version

Commands:
  plan     Place every CrawlerVM in the files on the Node objects in the files (as
           kubectl get nodes -o yaml prints them), with the ContentionProfiles and the
           KubeVirt resource in the files, and print where each goes, its size, its predicted interval error with
           the whole plan applied, each node's use, and why any crawler does not fit.
           Crawlers are placed from scratch in namespace/name order, as on a fresh
           cluster: their status is ignored. -o json is a stable format for pipelines.
  render   Print, as YAML, the objects the operator would create for the CrawlerVMs in
           the files (a KubeVirt VirtualMachine each): each on --node, or placed on
           the Node objects in the files. A CrawlerVM without metadata.uid (written
           by hand, not read from the cluster) gets a VM without what only the API
           server can know: no ownerReference and no isochron.io/vm-inputs hash, so
           kubectl can apply it. A CrawlerVM from kubectl get -o yaml has its uid:
           its VM has both.
  version  Print isochronctl's version, commit, build date and Go version.

Exit status: 0 done, 2 invalid input, 3 some crawler could not be placed, 1 other errors.
`

type files []string

func (f *files) String() string     { return fmt.Sprint(*f) }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitInvalid
		}
		return exitOK
	}
	switch args[0] {
	case "plan":
		return plan(ctx, args[1:], stdin, stdout, stderr)
	case "render":
		return render(ctx, args[1:], stdin, stdout, stderr)
	case "version":
		if len(args) > 1 {
			fmt.Fprintln(stderr, "isochronctl version: takes no arguments")
			return exitInvalid
		}
		fmt.Fprintln(stdout, "isochronctl", version.Get())
		return exitOK
	default:
		fmt.Fprintf(stderr, "isochronctl: unknown command %q\n\n%s", args[0], usage)
		return exitInvalid
	}
}

func render(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var paths files
	fs.Var(&paths, "f", "file or directory of CrawlerVMs (and Nodes, NetworkAttachmentDefinitions); - for standard input; repeatable")
	node := fs.String("node", "", "render every crawler on this node instead of placing it")
	if err := fs.Parse(args); err != nil {
		return exitInvalid
	}
	if len(paths) == 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "isochronctl render: need -f FILE, and no other arguments")
		return exitInvalid
	}
	inv, err := cli.Load(ctx, paths, stdin)
	if err == nil {
		err = cli.Render(inv, *node, stdout, stderr)
	}
	return report(stderr, err)
}

func plan(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var paths files
	fs.Var(&paths, "f", "file or directory of CrawlerVMs, Nodes and ContentionProfiles; - for standard input; repeatable")
	format := fs.String("o", "table", "output format: table or json")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitInvalid
	}
	if len(paths) == 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "isochronctl plan: need -f PATH, and no other arguments")
		return exitInvalid
	}
	if *format != "table" && *format != "json" {
		fmt.Fprintf(stderr, "isochronctl plan: -o %s: the output format is table or json\n", *format)
		return exitInvalid
	}
	inv, err := cli.Load(ctx, paths, stdin)
	if err == nil {
		err = cli.WritePlan(inv, *format, stdout)
	}
	return report(stderr, err)
}

func report(stderr io.Writer, err error) int {
	var invalid *cli.InputError
	var notPlaced *cli.NotPlacedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &invalid):
		fmt.Fprintf(stderr, "isochronctl: invalid input:\n%s\n", err)
		return exitInvalid
	case errors.As(err, &notPlaced):
		fmt.Fprintf(stderr, "isochronctl: %s\n", err)
		return exitNotPlaced
	default:
		fmt.Fprintf(stderr, "isochronctl: %v\n", err)
		return exitError
	}
}
