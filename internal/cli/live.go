package cli

import (
	"sort"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
)

// Cluster is what kubectl isochron plan reads of a live cluster.
type Cluster struct {
	Nodes        []corev1.Node
	CrawlerVMs   []isov1.CrawlerVM
	Profiles     []isov1.ContentionProfile
	Calibrations []isov1.NodeCalibration
	Networks     []nadv1.NetworkAttachmentDefinition
	KubeVirts    []kubevirtv1.KubeVirt
}

// Live is the plan's input for a what-if on a live cluster: the CrawlerVMs of files (new
// ones, or changed copies of the cluster's) placed on the cluster's Nodes, with its
// profiles, calibrations and KubeVirt, beside the cluster's other crawlers, which keep
// the reservations in their status (Residents). A crawler of the cluster that files
// change gives up its reservation and is placed again. files may hold only CrawlerVMs and
// NetworkAttachmentDefinitions: the rest comes from the cluster.
func Live(files *Inventory, cluster Cluster) (*Inventory, error) {
	var problems []string
	if len(files.Nodes) > 0 || len(files.Profiles) > 0 || len(files.Calibrations) > 0 || files.KubeVirt != nil {
		problems = append(problems, "the files hold Nodes, ContentionProfiles, NodeCalibrations or a KubeVirt: plan reads those from the cluster; pass only the CrawlerVMs to plan (isochronctl plan plans files alone)")
	}
	if len(files.CrawlerVMs) == 0 {
		problems = append(problems, "no CrawlerVM in the files: pass the new or changed CrawlerVMs with -f")
	}
	if len(problems) > 0 {
		return nil, &InputError{Problems: problems}
	}
	inv := &Inventory{CrawlerVMs: files.CrawlerVMs, Networks: files.Networks, KubeVirt: inventory.ClusterKubeVirt(cluster.KubeVirts)}
	planned := make(map[string]bool, len(files.CrawlerVMs))
	for _, c := range files.CrawlerVMs {
		planned[key(c)] = true
	}
	for i := range cluster.CrawlerVMs {
		c := &cluster.CrawlerVMs[i]
		if _, held := inventory.Resident(c); held && !planned[key(c)] {
			inv.Residents = append(inv.Residents, c)
		}
	}
	for i := range cluster.Nodes {
		inv.Nodes = append(inv.Nodes, &cluster.Nodes[i])
	}
	sort.Slice(inv.Nodes, func(i, j int) bool { return inv.Nodes[i].Name < inv.Nodes[j].Name })
	inv.Profiles, inv.Calibrations = cluster.Profiles, cluster.Calibrations
	given := map[string]bool{}
	for _, n := range files.Networks {
		given[n.Namespace+"/"+n.Name] = true
	}
	for i := range cluster.Networks {
		if n := &cluster.Networks[i]; !given[n.Namespace+"/"+n.Name] {
			inv.Networks = append(inv.Networks, n)
		}
	}
	if len(inv.Nodes) == 0 {
		return nil, &InputError{Problems: []string{"the cluster has no Node to plan on"}}
	}
	return inv, nil
}
