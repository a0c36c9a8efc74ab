package nicagent

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// CacheOptions is the cache of node's agent: what the node needs, never the cluster's.
// Its own Node; the crawlers placed on it (those moving from it are the Reconciler's
// second cache, leavingCache: a field selector cannot say "or"); the virt-launcher pods
// on it and the VMIs KubeVirt runs there (label kubevirt.io/nodeName, which KubeVirt's
// admission lets no one else change), which prove whose a QEMU is (LauncherOf).
// ContentionProfiles (cluster-scoped, an administrator's) and NetworkAttachmentDefinitions
// are cached whole.
func CacheOptions(node string) cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}:     {Field: fields.OneTermEqualSelector("metadata.name", node)},
			&isov1.CrawlerVM{}: {Field: fields.OneTermEqualSelector(isov1.FieldPlacementNode, node)},
			&corev1.Pod{}: {
				Field: fields.OneTermEqualSelector("spec.nodeName", node),
				Label: labels.SelectorFromSet(labels.Set{kubevirtv1.AppLabel: "virt-launcher"}),
			},
			&kubevirtv1.VirtualMachineInstance{}: {Label: labels.SelectorFromSet(labels.Set{kubevirtv1.NodeNameLabel: node})},
		},
	}
}

// leavingCacheOptions is the agent's second cache: the crawlers moving from node.
func leavingCacheOptions(node string) cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&isov1.CrawlerVM{}: {Field: fields.OneTermEqualSelector(isov1.FieldMoveFrom, node)},
		},
	}
}
