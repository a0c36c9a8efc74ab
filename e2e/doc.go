// Package e2e is isochron's end-to-end suite (build tag e2e): it deploys the operator
// into the cluster KUBECONFIG points at, which must run KubeVirt, Multus and kubelets
// with the static CPU Manager, and checks what a user sees: crawlers placed and running
// on exclusive CPUs (read from the virt-launcher pod's cgroup), unplaceable crawlers
// reported, probe Jobs setting SLOConfirmed, and deletion removing everything.
//
//	make e2e              # against the current cluster
//	make e2e-kind         # creates a kind cluster first (e2e/kind)
//
// Without the tag, the package holds only the checks of the providers' configuration
// (config_test.go), which run in make test. docs/dev/e2e.md describes both providers.
package e2e
