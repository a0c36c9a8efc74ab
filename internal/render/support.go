package render

import (
	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/sizing"
)

// ContainerDisks is the number of containerDisk volumes of every VM isochron renders: the
// guest's disk (VolumeDisk) and the probe agent's (VolumeAgent). KubeVirt gives each a
// container of its own in the launcher pod.
const ContainerDisks = 2

// Support is what the support containers of the crawler's launcher pod request under
// KubeVirt's configuration kv (inventory.Support): its limits for dedicated placement,
// whose pod is Guaranteed, its requests for shared.
func Support(cvm *isov1.CrawlerVM, kv sizing.SupportConfig) sizing.Resources {
	return kv.Requests(cvm.Spec.CPUPlacement != isov1.CPUPlacementShared, ContainerDisks)
}
