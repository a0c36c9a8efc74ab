// Command kubectl-isochron is the kubectl plugin of isochron (kubectl isochron ...): what
// a crawler's status means in words, a what-if plan against the live cluster, a move or
// a probe asked for through the manager, and the versions. Built as virtctl and kueuectl
// are: cobra, with kubectl's connection flags (k8s.io/cli-runtime).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"isochron.io/isochron/internal/cli"
)

// Exit codes, as isochronctl's: 2 invalid input, 3 some crawler of a plan not placed.
const (
	exitOK        = 0
	exitError     = 1
	exitInvalid   = 2
	exitNotPlaced = 3
)

func main() {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	os.Exit(run(context.Background(), os.Args[1:], streams))
}

// run runs the plugin with args and returns its exit status.
func run(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	root := newRoot(streams)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var invalid *cli.InputError
	var notPlaced *cli.NotPlacedError
	var usage *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &notPlaced):
		fmt.Fprintf(streams.ErrOut, "kubectl isochron: %s\n", err)
		return exitNotPlaced
	case errors.As(err, &invalid):
		fmt.Fprintf(streams.ErrOut, "kubectl isochron: invalid input:\n%s\n", err)
		return exitInvalid
	case errors.As(err, &usage), strings.HasPrefix(err.Error(), "unknown command"):
		fmt.Fprintf(streams.ErrOut, "kubectl isochron: %s\n", err)
		return exitInvalid
	default:
		fmt.Fprintf(streams.ErrOut, "kubectl isochron: %s\n", err)
		return exitError
	}
}

// usageError is a command used wrongly: exit 2, as for invalid input.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// newRoot is the plugin's command tree, with kubectl's connection flags.
func newRoot(streams genericiooptions.IOStreams) *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use:         "kubectl-isochron",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl isochron"},
		Short:       "What isochron decided for your crawlers, and what to ask of it",
		Long: `kubectl isochron shows what isochron's manager decided for a CrawlerVM, in words, and
asks the manager for a move or a probe. plan is a what-if on the live cluster.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
	flags.AddFlags(root.PersistentFlags())
	o := &options{flags: flags, streams: streams}
	root.AddCommand(newStatus(o), newPlan(o), newMove(o), newProbe(o), newVersion(o))
	return root
}
