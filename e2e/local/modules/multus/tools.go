//go:build tools

// Package multus pins Multus CNI for the local e2e cluster (docs/dev/e2e.md, Provider 2):
// `go build gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus` from this module
// builds the thin plugin the node runs as its primary CNI.
package multus

import (
	_ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus"
)
