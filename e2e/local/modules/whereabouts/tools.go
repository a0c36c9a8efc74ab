//go:build tools

// Package whereabouts pins whereabouts, the cluster-wide IPAM CNI plugin, for the local
// e2e cluster (docs/dev/e2e.md, Provider 2): `go build
// github.com/k8snetworkplumbingwg/whereabouts/cmd` from this module builds the plugin the
// node runs for the RT networks' addresses, and its CRDs are copied from this version's
// doc/crds.
package whereabouts

import (
	_ "github.com/k8snetworkplumbingwg/whereabouts/cmd"
)
