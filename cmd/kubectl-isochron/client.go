package main

import (
	"context"
	"fmt"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// options are what every command shares: the connection flags and the streams.
type options struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
}

// scheme holds the kinds the plugin reads and writes.
func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, isov1.AddToScheme, kubevirtv1.AddToScheme, nadv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // only a programming error: the types conflict
		}
	}
	return s
}

// client connects as kubectl would with the same flags, and returns the namespace.
func (o *options) client() (client.Client, string, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, "", fmt.Errorf("reading the kubeconfig: %w", err)
	}
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme()})
	if err != nil {
		return nil, "", fmt.Errorf("connecting to the API server: %w", err)
	}
	return c, ns, nil
}

// crawlerNames completes a CrawlerVM name in the namespace of the flags.
func (o *options) crawlerNames(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, ns, err := o.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	list := &isov1.CrawlerVMList{}
	if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	return completions(list.Items, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completions are the names of crawlers that start with prefix.
func completions(crawlers []isov1.CrawlerVM, prefix string) []string {
	var out []string
	for _, c := range crawlers {
		if strings.HasPrefix(c.Name, prefix) {
			out = append(out, c.Name)
		}
	}
	return out
}

// getCrawler reads the named CrawlerVM, with an error that says where it looked.
func getCrawler(ctx context.Context, c client.Client, ns, name string) (*isov1.CrawlerVM, error) {
	cvm := &isov1.CrawlerVM{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cvm); err != nil {
		return nil, fmt.Errorf("reading CrawlerVM %s in namespace %s: %w", name, ns, err)
	}
	return cvm, nil
}

// oneName is the argument check of the commands that take a crawler's name.
func oneName(_ *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usagef("need the name of one CrawlerVM, got %d arguments", len(args))
	}
	return nil
}

// noArgs is the argument check of the commands that take none.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}
