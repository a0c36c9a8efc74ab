//go:build tools

// Package tools pins KubeVirt's components for the local e2e cluster (docs/dev/e2e.md,
// stage 3): `go build` of these packages in this module builds virt-operator,
// virt-api, virt-controller, virt-handler, virt-launcher and their helpers at the
// version of go.mod, which must equal KUBEVIRT_VERSION in the Makefile.
package tools

import (
	_ "kubevirt.io/kubevirt/cmd/virt-api"
	_ "kubevirt.io/kubevirt/cmd/virt-chroot"
	_ "kubevirt.io/kubevirt/cmd/virt-controller"
	_ "kubevirt.io/kubevirt/cmd/virt-freezer"
	_ "kubevirt.io/kubevirt/cmd/virt-handler"
	_ "kubevirt.io/kubevirt/cmd/virt-launcher"
	_ "kubevirt.io/kubevirt/cmd/virt-launcher-monitor"
	_ "kubevirt.io/kubevirt/cmd/virt-operator"
	_ "kubevirt.io/kubevirt/cmd/virt-probe"
	_ "kubevirt.io/kubevirt/cmd/virt-tail"
	_ "kubevirt.io/kubevirt/tools/manifest-templator"
)
