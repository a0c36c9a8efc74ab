//go:build tools

// Package kubeproxy pins kube-proxy, which hack/tools/build-kube-bins.sh builds from
// this module; the import keeps `go mod tidy` from dropping its dependencies.
package kubeproxy

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
