package main

import (
	"fmt"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

func newMove(o *options) *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "move NAME",
		Short: "Ask the manager to move a crawler live to another node (one its model chooses, or --to NODE if the model says it holds it)",
		Long: `move asks for a live migration of the crawler's VMI, as virtctl migrate does (a
VirtualMachineInstanceMigration). isochron's manager takes the request over: its model
chooses a node that holds the crawler within every crawler's budget and the crawler
moves there, or it stays, and the manager deletes the request and says why in an Event
(kubectl describe crawlervm NAME). Follow it with kubectl isochron status NAME.

--to NODE asks for that node (the migration's spec.addedNodeSelector, as virtctl
migrate --addedNodeSelector does): the crawler moves there only if the model says the
node holds it within every crawler's budget; otherwise the manager refuses the request
with the model's reasons, in the same Event.`,
		Example: `  kubectl isochron move tower-a -n bms
  kubectl isochron move tower-a -n bms --to rt-node-3`,
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
			mig, err := migrationFor(cvm, to)
			if err != nil {
				return err
			}
			if err := c.Create(cmd.Context(), mig); err != nil {
				return fmt.Errorf("creating a migration of VMI %s: %w", mig.Spec.VMIName, err)
			}
			where := "a node its model chooses"
			if to != "" {
				where = "node " + to + " if its model says that node holds it"
			}
			fmt.Fprintf(o.streams.Out, "Asked for a move of crawler %s/%s off node %s (VirtualMachineInstanceMigration %s).\n"+
				"isochron's manager takes it over: the crawler moves to %s, or stays and an Event says why.\n"+
				"Follow it: kubectl isochron status %s -n %s\n", cvm.Namespace, cvm.Name, cvm.Status.Placement.Node, mig.Name, where, cvm.Name, cvm.Namespace)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "The node to move to (its kubernetes.io/hostname label); the manager refuses it, with the model's reasons, when that node cannot hold the crawler.")
	return cmd
}

// migrationFor is the migration virtctl migrate would create for the crawler's VMI (to
// node to, when set: its addedNodeSelector), or why none can be asked for: the crawler is
// not placed, has no VMI, moves already, or runs on node to.
func migrationFor(cvm *isov1.CrawlerVM, to string) (*kubevirtv1.VirtualMachineInstanceMigration, error) {
	key := cvm.Namespace + "/" + cvm.Name
	switch {
	case cvm.Status.Placement == nil || cvm.Status.Placement.Node == "":
		return nil, fmt.Errorf("crawler %s holds no node, nothing to move: kubectl isochron status %s says why", key, cvm.Name)
	case cvm.Status.Move != nil:
		return nil, fmt.Errorf("crawler %s is moving already, from node %s to node %s: wait for that move to end", key, cvm.Status.Move.From, cvm.Status.Move.To)
	case cvm.Status.VMI == nil || cvm.Status.VMI.Name == "" || cvm.Status.VMI.Phase != string(kubevirtv1.Running):
		return nil, fmt.Errorf("crawler %s has no running VMI to migrate live: kubectl isochron status %s says why", key, cvm.Name)
	case to != "" && to == cvm.Status.Placement.Node:
		return nil, usagef("--to %s: crawler %s runs on node %s already; name another node, or leave --to out for one the model chooses", to, key, to)
	}
	mig := &kubevirtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: cvm.Namespace, GenerateName: "kubectl-isochron-move-" + cvm.Status.VMI.Name + "-"},
		Spec:       kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: cvm.Status.VMI.Name},
	}
	if to != "" {
		mig.Spec.AddedNodeSelector = map[string]string{corev1.LabelHostname: to}
	}
	return mig, nil
}
