package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// kubeVirts are KubeVirt resources across what their configuration does to launchers'
// support containers: none (KubeVirt's defaults), the local node VMs' (e2e/local/
// kubevirt-nodes: a 300m CPU limit for container disks, no console log), and one that
// sets requests and limits of both types.
func kubeVirts() map[string]*kubevirtv1.KubeVirt {
	q := resource.MustParse
	return map[string]*kubevirtv1.KubeVirt{
		"no KubeVirt resource": nil,
		"node VMs' configuration": {Spec: kubevirtv1.KubeVirtSpec{Configuration: kubevirtv1.KubeVirtConfiguration{
			VirtualMachineOptions: &kubevirtv1.VirtualMachineOptions{DisableSerialConsoleLog: &kubevirtv1.DisableSerialConsoleLog{}},
			SupportContainerResources: []kubevirtv1.SupportContainerResources{{Type: kubevirtv1.ContainerDisk, Resources: kubevirtv1.ResourceRequirementsWithoutClaims{
				Limits: corev1.ResourceList{corev1.ResourceCPU: q("300m")}}}},
		}}},
		"requests and limits of both": {Spec: kubevirtv1.KubeVirtSpec{Configuration: kubevirtv1.KubeVirtConfiguration{
			SupportContainerResources: []kubevirtv1.SupportContainerResources{
				{Type: kubevirtv1.ContainerDisk, Resources: kubevirtv1.ResourceRequirementsWithoutClaims{
					Requests: corev1.ResourceList{corev1.ResourceCPU: q("20m"), corev1.ResourceMemory: q("30Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("80Mi")}}},
				{Type: kubevirtv1.GuestConsoleLog, Resources: kubevirtv1.ResourceRequirementsWithoutClaims{
					Requests: corev1.ResourceList{corev1.ResourceCPU: q("7m"), corev1.ResourceMemory: q("50M")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: q("25m"), corev1.ResourceMemory: q("100M")}}},
			},
		}}},
	}
}

// What placement counts of a crawler's launcher pod (sizing.Result's PodCPUMilli,
// PodMemoryBytes and hugepages, support containers included) is what kube-scheduler
// counts of the pod KubeVirt's own virt-controller code renders for its VMI
// (component-helpers' PodRequests, NodeResourcesFit's function), for every variant under
// every KubeVirt configuration.
func TestPlacementCountsTheLauncherPodKubeVirtRenders(t *testing.T) {
	for kvName, kv := range kubeVirts() {
		var cfg kubevirtv1.KubeVirtConfiguration
		if kv != nil {
			cfg = kv.Spec.Configuration
		}
		for name, tc := range variants() {
			t.Run(kvName+"/"+name, func(t *testing.T) {
				s, vm := tc.renderWith(t, kv)
				vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: *vm.Spec.Template.ObjectMeta.DeepCopy(), Spec: *vm.Spec.Template.Spec.DeepCopy()}
				vmi.Name, vmi.Namespace, vmi.UID = vm.Name, vm.Namespace, "uid-1"
				pod, err := LauncherPod(vmi, cfg, clusterGates)
				if err != nil {
					t.Fatal(err)
				}
				req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
				if got, want := s.PodCPUMilli(), req.Cpu().MilliValue(); got != want {
					t.Errorf("placement counts %dm of CPU (support containers %dm), KubeVirt's launcher pod requests %dm", got, s.SupportCPUMilli, want)
				}
				if got, want := s.PodMemoryBytes(), req.Memory().Value(); got != want {
					t.Errorf("placement counts %d bytes of memory (support containers %d), KubeVirt's launcher pod requests %d", got, s.SupportMemoryBytes, want)
				}
				hp := req[corev1.ResourceHugePagesPrefix+"2Mi"]
				if got, want := s.HugepagesBytes, hp.Value(); got != want {
					t.Errorf("placement counts %d bytes of 2Mi hugepages, KubeVirt's launcher pod requests %d", got, want)
				}
				if t.Failed() {
					for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
						t.Logf("container %s: requests %v", c.Name, c.Resources.Requests)
					}
				}
			})
		}
	}
}
