package main

import (
	"fmt"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"isochron.io/isochron/internal/cli"
	"isochron.io/isochron/internal/version"
)

// The manager's Deployment as config/default installs it.
const (
	managerNamespace  = "isochron-system"
	managerDeployment = "isochron-controller-manager"
	managerContainer  = "manager"
)

func newVersion(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and the manager's (its Deployment's image tag)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The build's version, as every binary of isochron reports it (internal/version:
			// make kubectl-plugin sets it with the Makefile's GO_LDFLAGS).
			fmt.Fprintf(o.streams.Out, "kubectl-isochron: %s\n", version.Get().Version)
			c, _, err := o.client()
			if err != nil {
				return err
			}
			dep := &appsv1.Deployment{}
			err = c.Get(cmd.Context(), client.ObjectKey{Namespace: managerNamespace, Name: managerDeployment}, dep)
			if apierrors.IsNotFound(err) {
				fmt.Fprintf(o.streams.Out, "manager: not installed (no Deployment %s/%s)\n", managerNamespace, managerDeployment)
				return nil
			}
			if err != nil {
				return fmt.Errorf("reading the manager's Deployment %s/%s: %w", managerNamespace, managerDeployment, err)
			}
			fmt.Fprintf(o.streams.Out, "manager: %s\n", managerVersion(dep))
			return nil
		},
	}
}

// managerVersion is the tag of the manager container's image, or the image itself when
// it has no tag (a digest, or latest by default).
func managerVersion(dep *appsv1.Deployment) string {
	for _, c := range dep.Spec.Template.Spec.Containers {
		if c.Name == managerContainer {
			return cli.ImageTag(c.Image)
		}
	}
	return fmt.Sprintf("unknown (Deployment %s/%s has no container %q)", dep.Namespace, dep.Name, managerContainer)
}
