package controllers

import (
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// Scheme holds every API type the operator reads or writes: Kubernetes' own, isochron's,
// KubeVirt's VirtualMachineInstance and Multus's NetworkAttachmentDefinition. The
// manager, the tests and the demo all use this one.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, isov1.AddToScheme, kubevirtv1.AddToScheme, nadv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // only a programming error: the types conflict
		}
	}
	return s
}
