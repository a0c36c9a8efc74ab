package render

import (
	"fmt"
	"slices"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

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

// GuestDSCPOf says whether a network's crawlers mark their own RT traffic
// (isov1.AnnotationGuestDSCP).
func GuestDSCPOf(nad *nadv1.NetworkAttachmentDefinition) bool {
	return nad.Annotations[isov1.AnnotationGuestDSCP] == "true"
}

// VFIO reports whether the crawler's RT-NIC is passed through with VFIO: it has one, on
// an SR-IOV network (rtNet, its NetworkAttachmentDefinition; nil when missing). KubeVirt
// then locks the guest's memory and adds 1Gi to its pod (sizing.VFIOOverheadBytes).
func VFIO(cvm *isov1.CrawlerVM, rtNet *nadv1.NetworkAttachmentDefinition) bool {
	return cvm.Spec.RTNIC != nil && rtNet != nil && BindingOf(rtNet) == BindingSRIOV
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

// NetworkAllowed refuses an RT network in another namespace than the crawler's unless
// an administrator shares that namespace's networks with every namespace (shared, the
// manager's --shared-network-namespaces: Multus' globalNamespaces under its namespace
// isolation). config/default's ValidatingAdmissionPolicy refuses the same at admission;
// this catches what was applied before it or without it.
func NetworkAllowed(cvm *isov1.CrawlerVM, shared []string) error {
	if cvm.Spec.RTNIC == nil {
		return nil
	}
	key := NetworkKey(cvm)
	if key.Namespace == cvm.Namespace || slices.Contains(shared, key.Namespace) {
		return nil
	}
	return fmt.Errorf("spec.rtNIC.networkName: NetworkAttachmentDefinition %s is in namespace %s, and a CrawlerVM may use only the networks of its own namespace (%s) and of the namespaces an administrator shares (%s); create the network in %s, or have %s added to the shared namespaces",
		key, key.Namespace, cvm.Namespace, sharedList(shared), cvm.Namespace, key.Namespace)
}

// SharedNamespaces reads the administrator's sharedNamespaces (key of the ConfigMap
// isochron-networks, which reaches the manager as --shared-network-namespaces): namespace
// names separated by commas, spaces around them and empty items ignored, as the
// ValidatingAdmissionPolicy rt-network-tenancy reads the same key.
func SharedNamespaces(list string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a namespace name: %s", n, strings.Join(errs, "; "))
		}
		out = append(out, n)
	}
	return out, nil
}

func sharedList(shared []string) string {
	if len(shared) == 0 {
		return "none"
	}
	return strings.Join(shared, ", ")
}

// UplinkAllowed refuses an RT network whose NetworkAttachmentDefinition names, with
// AnnotationRTUplink, a host interface that is not one of the RT uplinks the cluster
// administrator named (uplinks): a namespace's network never chooses which host
// interface the root NIC agent reshapes. A network that names none is the NIC agent's
// to judge on each node (its bridge's port must be a named uplink too).
func UplinkAllowed(nad *nadv1.NetworkAttachmentDefinition, uplinks []string) error {
	link, ok := nad.Annotations[isov1.AnnotationRTUplink]
	if !ok || slices.Contains(uplinks, link) {
		return nil
	}
	return fmt.Errorf("NetworkAttachmentDefinition %s/%s: its annotation %s names host interface %q, which is not one of the RT uplinks the cluster administrator named (%s); remove the annotation or name one of those, or have the administrator add %q to rtUplinks in the ConfigMap isochron-networks",
		nad.Namespace, nad.Name, isov1.AnnotationRTUplink, link, sharedList(uplinks), link)
}
