package nicagent

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net"
	"slices"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/types"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/nic"
	"isochron.io/isochron/internal/render"
)

// Flow is one RT-NIC's traffic on its node's uplink: package nic's, which schedules it.
type Flow = nic.Flow

// Uplink is a host interface RT traffic leaves the node by, with the flows it carries.
type Uplink struct {
	// Interface is the interface named by the networks' AnnotationRTUplink; "" when the
	// agent takes Bridge's physical port.
	Interface string
	// Bridge is the Linux bridge of the networks (bridge CNI).
	Bridge string
	// Networks are the NetworkAttachmentDefinitions (namespace/name) it serves.
	Networks []string
	Flows    []Flow
}

// Skipped is a crawler on the node whose RT-NIC the agent does not schedule, and why.
type Skipped struct {
	Key, Reason string
}

// Desired is what the agent of node programs: the RT-NICs of the crawlers placed on
// node, or moving from it, grouped by uplink, in a deterministic order. Crawlers whose
// network is missing (unless the host scheduled them already: status.rtNIC.uplink, which
// they keep) or an SR-IOV network (a VF bypasses the host's qdiscs) are skipped with the
// reason.
func Desired(node string, crawlers []isov1.CrawlerVM, nads []nadv1.NetworkAttachmentDefinition) ([]Uplink, []Skipped) {
	byKey := map[types.NamespacedName]*nadv1.NetworkAttachmentDefinition{}
	for i := range nads {
		byKey[types.NamespacedName{Namespace: nads[i].Namespace, Name: nads[i].Name}] = &nads[i]
	}
	ups := map[[2]string]*Uplink{}
	var skipped []Skipped
	for i := range crawlers {
		c := &crawlers[i]
		// A moving crawler's RT-NIC is scheduled on both nodes until its move ends: its
		// guest runs on the one it leaves until the migration switches over.
		res, held := inventory.Resident(c)
		leaving, moving := inventory.Leaving(c)
		if !held || (res.Node != node && (!moving || leaving.Node != node)) || c.Spec.RTNIC == nil {
			continue
		}
		key := c.Namespace + "/" + c.Name
		netKey := render.NetworkKey(c)
		nad, ok := byKey[netKey]
		var up Uplink
		switch {
		case !ok && c.Status.RTNIC != nil && c.Status.RTNIC.Uplink != "":
			// Deleted under a crawler the host scheduled: its VMI keeps the RT-NIC it
			// started with, so its traffic keeps its schedule on the uplink it had.
			up = Uplink{Interface: c.Status.RTNIC.Uplink}
		case !ok:
			skipped = append(skipped, Skipped{key, fmt.Sprintf("NetworkAttachmentDefinition %s not found", netKey)})
			continue
		case render.BindingOf(nad) == render.BindingSRIOV:
			skipped = append(skipped, Skipped{key, fmt.Sprintf("%s is an SR-IOV network: its VF bypasses the host's traffic control (the guest can mark its traffic where the network opts in with isochron.io/guest-dscp)", netKey)})
			continue
		}
		mac, err := net.ParseMAC(render.MAC(c))
		if err != nil {
			skipped = append(skipped, Skipped{key, err.Error()})
			continue
		}
		if nad != nil {
			up = Uplink{Interface: nad.Annotations[isov1.AnnotationRTUplink], Bridge: bridgeOf(nad)}
		}
		k := [2]string{up.Interface, up.Bridge}
		if ups[k] == nil {
			ups[k] = &up
		}
		u := ups[k]
		if n := netKey.String(); !slices.Contains(u.Networks, n) {
			u.Networks = append(u.Networks, n)
		}
		u.Flows = append(u.Flows, Flow{Key: key, MAC: mac, Deadline: c.Spec.RTNIC.Deadline.Duration,
			MinBandwidth: c.Spec.RTNIC.MinBandwidth.Value(), Raise: feedbackOf(c).Raise})
	}
	var out []Uplink
	for _, u := range ups {
		slices.Sort(u.Networks)
		slices.SortFunc(u.Flows, func(a, b Flow) int { return cmp.Compare(a.Key, b.Key) })
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b Uplink) int {
		return cmp.Or(cmp.Compare(a.Interface, b.Interface), cmp.Compare(a.Bridge, b.Bridge))
	})
	slices.SortFunc(skipped, func(a, b Skipped) int { return cmp.Compare(a.Key, b.Key) })
	return out, skipped
}

// defaultBridge is the bridge CNI plugin's bridge when its configuration names none.
const defaultBridge = "cni0"

// bridgeOf is the Linux bridge of a bridge CNI network's configuration (a single plugin
// or a conflist).
func bridgeOf(nad *nadv1.NetworkAttachmentDefinition) string {
	var conf struct {
		Type    string `json:"type"`
		Bridge  string `json:"bridge"`
		Plugins []struct {
			Type   string `json:"type"`
			Bridge string `json:"bridge"`
		} `json:"plugins"`
	}
	if json.Unmarshal([]byte(nad.Spec.Config), &conf) != nil {
		return defaultBridge
	}
	if conf.Type == "bridge" && conf.Bridge != "" {
		return conf.Bridge
	}
	for _, p := range conf.Plugins {
		if p.Type == "bridge" && p.Bridge != "" {
			return p.Bridge
		}
	}
	return defaultBridge
}
