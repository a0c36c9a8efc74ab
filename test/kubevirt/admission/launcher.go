package admission

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/mutating-webhook/mutators"
	"kubevirt.io/kubevirt/pkg/virt-config/featuregate"
	"kubevirt.io/kubevirt/pkg/virt-controller/services"
)

// LauncherPod is the virt-launcher pod virt-controller renders for vmi (the VMI as
// created, before virt-api's mutating webhook, which LauncherPod applies) in a cluster
// whose KubeVirt CR has spec.configuration c and the feature gates featureGates: KubeVirt's
// own TemplateService.RenderLaunchManifest. The ExternalNetResourceInjection gate is added
// so that rendering reads no NetworkAttachmentDefinition (there is no API server): it
// only leaves out the device-plugin resource an SR-IOV network would add, not CPU or
// memory.
func LauncherPod(vmi *kubevirtv1.VirtualMachineInstance, c kubevirtv1.KubeVirtConfiguration, featureGates []string) (*corev1.Pod, error) {
	cfg, err := newClusterConfigFor(c, append(featureGates, featuregate.ExternalNetResourceInjection))
	if err != nil {
		return nil, err
	}
	vmi = vmi.DeepCopy()
	if err := mutators.ApplyNewVMIMutations(vmi, cfg); err != nil {
		return nil, fmt.Errorf("mutating webhook defaults: %w", err)
	}
	store := func() cache.Store { return cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, nil) }
	// The paths and images are virt-controller's defaults; none of them changes a
	// container's resources.
	svc := services.NewTemplateService("virt-launcher", 240, "/var/run/kubevirt", "/var/run/kubevirt-ephemeral-disks",
		"/var/run/kubevirt/container-disks", kubevirtv1.HotplugDiskDir, "", store(), nil, cfg, 107, "virt-exportserver", store(), store())
	return svc.RenderLaunchManifest(vmi)
}
