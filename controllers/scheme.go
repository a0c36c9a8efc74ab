package controllers

import (
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

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

// CacheOptions are the informer cache's options, the manager's and the tests': objects are
// cached without their managedFields, which the reconciler never reads (it writes merge
// patches of cached copies and server-side applies of objects it builds). With 10,000
// crawlers, their VMIs, Services and Jobs, they are a large share of the cache.
func CacheOptions() cache.Options {
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
}
