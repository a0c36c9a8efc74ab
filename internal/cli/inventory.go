package cli

import (
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/calibration"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/render"
)

func (inv *Inventory) network(key string) *nadv1.NetworkAttachmentDefinition {
	for _, n := range inv.Networks {
		if n.Namespace+"/"+n.Name == key {
			return n
		}
	}
	return nil
}

// rtNetwork is the input's NetworkAttachmentDefinition of the crawler's RT-NIC, nil for
// none.
func (inv *Inventory) rtNetwork(c *isov1.CrawlerVM) *nadv1.NetworkAttachmentDefinition {
	if c.Spec.RTNIC == nil {
		return nil
	}
	return inv.network(render.NetworkKey(c).String())
}

// PlacementNodes are the input's Nodes as placement sees them, with their profiles and
// their corrections from the input's NodeCalibrations.
func (inv *Inventory) PlacementNodes() []placement.Node {
	cals := inv.calibrationsByNode()
	nodes := make([]placement.Node, 0, len(inv.Nodes))
	for _, n := range inv.Nodes {
		nodes = append(nodes, inventory.Node(n, inv.Profiles, placement.Held{}, cals[n.Name]))
	}
	return nodes
}

// Corrections are, per node of the input, the correction its predictions get and what
// it rests on (inventory.Correction), from the input's NodeCalibrations and profiles.
func (inv *Inventory) Corrections() map[string]calibration.Applied {
	cals := inv.calibrationsByNode()
	out := make(map[string]calibration.Applied, len(inv.Nodes))
	for _, n := range inv.Nodes {
		out[n.Name] = inventory.Correction(inventory.ProfileFor(n, inv.Profiles), cals[n.Name])
	}
	return out
}

// calibrationsByNode are the input's NodeCalibrations by node name.
func (inv *Inventory) calibrationsByNode() map[string]*isov1.NodeCalibration {
	cals := make(map[string]*isov1.NodeCalibration, len(inv.Calibrations))
	for i := range inv.Calibrations {
		cals[inv.Calibrations[i].Name] = &inv.Calibrations[i]
	}
	return cals
}

// Requests are the input's CrawlerVMs as placement requests, in namespace/name order.
func (inv *Inventory) Requests() []placement.Request {
	reqs := make([]placement.Request, len(inv.CrawlerVMs))
	for i, c := range inv.CrawlerVMs {
		reqs[i] = inventory.Request(c, render.VFIO(c, inv.rtNetwork(c)), render.Support(c, inventory.Support(inv.KubeVirt)))
	}
	return reqs
}

// residents are the reservations inv.Residents hold (a moving crawler's on both nodes).
func (inv *Inventory) residents() []placement.Resident {
	var out []placement.Resident
	for _, c := range inv.Residents {
		out = append(out, inventory.Residents(c)...)
	}
	return out
}

// paramsOf is the contention profile of the named node, the defaults if it is not in the
// input.
func (inv *Inventory) paramsOf(name string) model.Params {
	for _, n := range inv.Nodes {
		if n.Name == name {
			return inventory.Node(n, inv.Profiles, placement.Held{}, nil).Params
		}
	}
	return model.Params{}
}
