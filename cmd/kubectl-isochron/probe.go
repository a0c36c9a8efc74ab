package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

func newProbe(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "probe NAME",
		Short: "Ask the manager to probe a crawler now",
		Long: fmt.Sprintf(`probe annotates the CrawlerVM with %s=<now>: the manager starts a probe
with trigger Requested once the crawler's VMI runs and no probe is running (one that
starts after the request serves it). Its result lands in status.lastProbe and the
SLOConfirmed condition: kubectl isochron status NAME.`, isov1.AnnotationProbeRequested),
		Example:           `  kubectl isochron probe tower-a -n bms`,
		Args:              oneName,
		ValidArgsFunction: o.crawlerNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			cvm, err := getCrawler(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			now := time.Now()
			patch, err := probeRequest(now)
			if err != nil {
				return err
			}
			if err := c.Patch(cmd.Context(), cvm, client.RawPatch(types.MergePatchType, patch)); err != nil {
				return fmt.Errorf("annotating CrawlerVM %s/%s: %w", cvm.Namespace, cvm.Name, err)
			}
			fmt.Fprintf(o.streams.Out, "Asked for a probe of crawler %s/%s at %s: it starts once its VMI runs and no other probe does.\n"+
				"Follow it: kubectl isochron status %s -n %s\n", cvm.Namespace, cvm.Name, now.UTC().Format(time.RFC3339), cvm.Name, cvm.Namespace)
			return nil
		},
	}
	return cmd
}

// probeRequest is the merge patch that asks for a probe at now.
func probeRequest(now time.Time) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		isov1.AnnotationProbeRequested: now.UTC().Format(time.RFC3339),
	}}})
}
