package cli

import nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

func (inv *Inventory) network(key string) *nadv1.NetworkAttachmentDefinition {
	for _, n := range inv.Networks {
		if n.Namespace+"/"+n.Name == key {
			return n
		}
	}
	return nil
}
