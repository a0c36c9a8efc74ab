//go:build tools

// Package kubebins pins the Kubernetes binaries hack/tools/build-kube-bins.sh
// builds; the imports keep `go mod tidy` from dropping their dependencies.
package kubebins

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
