package main

import (
	"fmt"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

func newMove(o *options) *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "move NAME",
		Short: "Ask the manager to move a crawler live to another node its model chooses",
		Long: `move asks for a live migration of the crawler's VMI, as virtctl migrate does (a
VirtualMachineInstanceMigration). isochron's manager takes the request over: its model
chooses a node that holds the crawler within every crawler's budget and the crawler
moves there, or it stays, and the manager deletes the request and says why in an Event
(kubectl describe crawlervm NAME). Follow it with kubectl isochron status NAME.

--to is not supported: the manager does not honour a target node in the request
(spec.addedNodeSelector); its model chooses the node.`,
		Example:           `  kubectl isochron move tower-a -n bms`,
		Args:              oneName,
		ValidArgsFunction: o.crawlerNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkMoveTarget(to); err != nil {
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
			mig, err := migrationFor(cvm)
			if err != nil {
				return err
			}
			if err := c.Create(cmd.Context(), mig); err != nil {
				return fmt.Errorf("creating a migration of VMI %s: %w", mig.Spec.VMIName, err)
			}
			fmt.Fprintf(o.streams.Out, "Asked for a move of crawler %s/%s off node %s (VirtualMachineInstanceMigration %s).\n"+
				"isochron's manager takes it over: the crawler moves to a node its model chooses, or stays and an Event says why.\n"+
				"Follow it: kubectl isochron status %s -n %s\n", cvm.Namespace, cvm.Name, cvm.Status.Placement.Node, mig.Name, cvm.Name, cvm.Namespace)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "not supported: the manager's model chooses the node (the manager ignores a migration's target)")
	return cmd
}

// checkMoveTarget refuses --to: the manager's takeover of a migration (controllers,
// takeOverMigrations) places the crawler by its model and ignores the migration's
// spec.addedNodeSelector, so a target would be silently dropped.
func checkMoveTarget(to string) error {
	if to == "" {
		return nil
	}
	return usagef("--to %s: not supported: isochron's manager moves a crawler to the node its model chooses and ignores a requested target; run kubectl isochron move without --to, or see which nodes would hold it with kubectl isochron plan", to)
}

// migrationFor is the migration virtctl migrate would create for the crawler's VMI, or
// why none can be asked for: the crawler is not placed, has no VMI, or moves already.
func migrationFor(cvm *isov1.CrawlerVM) (*kubevirtv1.VirtualMachineInstanceMigration, error) {
	key := cvm.Namespace + "/" + cvm.Name
	switch {
	case cvm.Status.Placement == nil || cvm.Status.Placement.Node == "":
		return nil, fmt.Errorf("crawler %s holds no node, nothing to move: kubectl isochron status %s says why", key, cvm.Name)
	case cvm.Status.Move != nil:
		return nil, fmt.Errorf("crawler %s is moving already, from node %s to node %s: wait for that move to end", key, cvm.Status.Move.From, cvm.Status.Move.To)
	case cvm.Status.VMI == nil || cvm.Status.VMI.Name == "" || cvm.Status.VMI.Phase != string(kubevirtv1.Running):
		return nil, fmt.Errorf("crawler %s has no running VMI to migrate live: kubectl isochron status %s says why", key, cvm.Name)
	}
	return &kubevirtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: cvm.Namespace, GenerateName: "kubectl-isochron-move-" + cvm.Status.VMI.Name + "-"},
		Spec:       kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: cvm.Status.VMI.Name},
	}, nil
}
