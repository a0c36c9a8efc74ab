package main

import (
	"context"
	"fmt"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/cli"
)

func newPlan(o *options) *cobra.Command {
	var paths []string
	var output string
	cmd := &cobra.Command{
		Use:   "plan -f FILE",
		Short: "What-if: place the CrawlerVMs of the files on the live cluster beside its crawlers",
		Long: `plan reads the cluster's Nodes, CrawlerVMs, ContentionProfiles, NodeCalibrations,
NetworkAttachmentDefinitions and KubeVirt resource, and places the CrawlerVMs of the files
(new ones, or changed copies of the cluster's) with the manager's planner beside the
cluster's crawlers, which keep the reservations in their status. A changed crawler gives
up its reservation and is placed again. Nothing is written. The pods of other workloads
are not read: their CPU on the nodes is not counted (the manager counts it).

Exit status: 0 all placed, 3 some crawler not placed, 2 invalid input, 1 other errors.`,
		Example: `  kubectl isochron plan -f new-crawlers.yaml -n bms
  kubectl isochron plan -f crawlers/ -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkPlanFlags(paths, output); err != nil {
				return err
			}
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			files, err := cli.LoadIn(cmd.Context(), ns, paths, o.streams.In)
			if err != nil {
				return err
			}
			cluster, err := readCluster(cmd.Context(), c)
			if err != nil {
				return err
			}
			inv, err := cli.Live(files, cluster)
			if err != nil {
				return err
			}
			return cli.WritePlan(inv, output, o.streams.Out)
		},
	}
	cmd.Flags().StringArrayVarP(&paths, "filename", "f", nil, "file or directory of the new or changed CrawlerVMs; - for standard input; repeatable")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json (isochronctl plan's JSON)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// checkPlanFlags checks plan's flags before anything is read.
func checkPlanFlags(paths []string, output string) error {
	if len(paths) == 0 {
		return usagef("plan needs -f FILE: the new or changed CrawlerVMs to place")
	}
	if output != "table" && output != "json" {
		return usagef("-o %s: plan's output format is table or json", output)
	}
	return nil
}

// readCluster lists what plan places on. The optional APIs (NodeCalibrations,
// NetworkAttachmentDefinitions, KubeVirt) may be missing: their lists are then empty.
func readCluster(ctx context.Context, c client.Client) (cli.Cluster, error) {
	nodes, crawlers, profiles := &corev1.NodeList{}, &isov1.CrawlerVMList{}, &isov1.ContentionProfileList{}
	cals, nets, kvs := &isov1.NodeCalibrationList{}, &nadv1.NetworkAttachmentDefinitionList{}, &kubevirtv1.KubeVirtList{}
	for _, l := range []struct {
		what     string
		list     client.ObjectList
		optional bool
	}{
		{"Nodes", nodes, false}, {"CrawlerVMs", crawlers, false}, {"ContentionProfiles", profiles, false},
		{"NodeCalibrations", cals, true}, {"NetworkAttachmentDefinitions", nets, true}, {"KubeVirt resources", kvs, true},
	} {
		err := c.List(ctx, l.list)
		if l.optional && (apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err)) {
			continue
		}
		if err != nil {
			return cli.Cluster{}, fmt.Errorf("listing %s: %w", l.what, err)
		}
	}
	return cli.Cluster{Nodes: nodes.Items, CrawlerVMs: crawlers.Items, Profiles: profiles.Items,
		Calibrations: cals.Items, Networks: nets.Items, KubeVirts: kvs.Items}, nil
}
