package render

import (
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/types"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// BindingOf is SR-IOV for a NetworkAttachmentDefinition of the sriov CNI plugin or one
// that requests an SR-IOV device resource, bridge otherwise.
func BindingOf(nad *nadv1.NetworkAttachmentDefinition) Binding {
	res := nad.Annotations[isov1.AnnotationMultusResourceName]
	cfg := strings.ReplaceAll(nad.Spec.Config, " ", "")
	if strings.Contains(strings.ToLower(res), "sriov") || strings.Contains(cfg, `"type":"sriov"`) {
		return BindingSRIOV
	}
	return BindingBridge
}

// NetworkKey is the RT-NIC's NetworkAttachmentDefinition; a bare name is in the
// CrawlerVM's namespace.
func NetworkKey(cvm *isov1.CrawlerVM) types.NamespacedName {
	ns, name, found := strings.Cut(cvm.Spec.RTNIC.NetworkName, "/")
	if !found {
		return types.NamespacedName{Namespace: cvm.Namespace, Name: ns}
	}
	return types.NamespacedName{Namespace: ns, Name: name}
}
