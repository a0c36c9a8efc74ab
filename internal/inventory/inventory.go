// Package inventory converts API objects into the plain values the pure core takes.
package inventory

import (
	corev1 "k8s.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/sizing"
)

const hugepages2Mi corev1.ResourceName = "hugepages-2Mi"

// Node is what placement needs of a Node.
func Node(n *corev1.Node) placement.Node {
	alloc := n.Status.Allocatable
	return placement.Node{
		Name:           n.Name,
		Labels:         n.Labels,
		Taints:         n.Spec.Taints,
		Unschedulable:  n.Spec.Unschedulable,
		CPUMilli:       alloc.Cpu().MilliValue(),
		MemoryBytes:    alloc.Memory().Value(),
		HugepagesBytes: alloc.Name(hugepages2Mi, "BinarySI").Value(),
	}
}

// Resident is the reservation a CrawlerVM holds: the size and node in its status.
func Resident(c *isov1.CrawlerVM) (placement.Resident, bool) {
	s, p := c.Status.Sizing, c.Status.Placement
	if s == nil || p == nil || p.Node == "" {
		return placement.Resident{}, false
	}
	r := sizing.Result{
		VCPUs:           s.VCPUs,
		HostCPUs:        s.HostCPUs,
		CPURequestMilli: s.CPURequest.MilliValue(),
		MemoryBytes:     s.Memory.Value(),
	}
	if s.Hugepages != nil {
		r.HugepagesBytes = s.Hugepages.Value()
	}
	return placement.Resident{Key: c.Namespace + "/" + c.Name, Node: p.Node, Sizing: r}, true
}

// Request is the placement request for a CrawlerVM of the given size.
func Request(c *isov1.CrawlerVM, s sizing.Result) placement.Request {
	req := placement.Request{Key: c.Namespace + "/" + c.Name, Sizing: s, Policy: isov1.PlacementPolicyPack}
	if p := c.Spec.Placement; p != nil {
		req.NodeSelector, req.Tolerations = p.NodeSelector, p.Tolerations
		if p.Policy != "" {
			req.Policy = p.Policy
		}
	}
	if c.Status.Placement != nil {
		req.Current = c.Status.Placement.Node
	}
	return req
}
