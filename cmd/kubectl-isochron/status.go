package main

import (
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/printers"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/cli"
)

func newStatus(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Say where a crawler runs and why, its size, predicted and measured error, outages, moves and what to do",
		Example: `  kubectl isochron status tower-a -n bms
  kubectl isochron status tower-a -o yaml`,
		Args:              oneName,
		ValidArgsFunction: o.crawlerNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := objectPrinter(output)
			if err != nil {
				return err
			}
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			cvm, err := getCrawler(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			if p != nil {
				cvm.SetGroupVersionKind(isov1.GroupVersion.WithKind("CrawlerVM"))
				cvm.SetManagedFields(nil) // as kubectl get -o yaml shows it
				return p.PrintObj(cvm, o.streams.Out)
			}
			return cli.WriteStatus(o.streams.Out, cvm, time.Now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "print the CrawlerVM itself: yaml or json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"yaml", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// objectPrinter is the printer of -o: nil for the text (""), YAML or JSON.
func objectPrinter(output string) (printers.ResourcePrinter, error) {
	switch output {
	case "":
		return nil, nil
	case "yaml":
		return &printers.YAMLPrinter{}, nil
	case "json":
		return &printers.JSONPrinter{}, nil
	}
	return nil, usagef("-o %s: the output format is yaml or json", output)
}
