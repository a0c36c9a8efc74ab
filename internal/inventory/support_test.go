package inventory

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"isochron.io/isochron/internal/sizing"
)

func TestSupport(t *testing.T) {
	q := resource.MustParse
	entry := func(typ kubevirtv1.SupportContainerType, req, lim corev1.ResourceList) kubevirtv1.SupportContainerResources {
		return kubevirtv1.SupportContainerResources{Type: typ, Resources: kubevirtv1.ResourceRequirementsWithoutClaims{Requests: req, Limits: lim}}
	}
	kv := func(opts *kubevirtv1.VirtualMachineOptions, entries ...kubevirtv1.SupportContainerResources) *kubevirtv1.KubeVirt {
		return &kubevirtv1.KubeVirt{Spec: kubevirtv1.KubeVirtSpec{Configuration: kubevirtv1.KubeVirtConfiguration{
			VirtualMachineOptions: opts, SupportContainerResources: entries}}}
	}
	def := sizing.DefaultSupport()
	with := func(f func(*sizing.SupportConfig)) sizing.SupportConfig {
		c := sizing.DefaultSupport()
		f(&c)
		return c
	}
	for name, tc := range map[string]struct {
		kv   *kubevirtv1.KubeVirt
		want sizing.SupportConfig
	}{
		"no KubeVirt resource":       {nil, def},
		"nothing configured":         {kv(nil), def},
		"virtualMachineOptions only": {kv(&kubevirtv1.VirtualMachineOptions{}), def},
		"console log disabled": {kv(&kubevirtv1.VirtualMachineOptions{DisableSerialConsoleLog: &kubevirtv1.DisableSerialConsoleLog{}}),
			with(func(c *sizing.SupportConfig) { c.ConsoleLogDisabled = true })},
		"a container-disk CPU limit": {kv(nil, entry(kubevirtv1.ContainerDisk, nil, corev1.ResourceList{corev1.ResourceCPU: q("300m")})),
			with(func(c *sizing.SupportConfig) { c.ContainerDisk.Limits.CPUMilli = 300 })},
		"guest-console-log requests": {kv(nil, entry(kubevirtv1.GuestConsoleLog, corev1.ResourceList{corev1.ResourceCPU: q("7m"), corev1.ResourceMemory: q("50Mi")}, nil)),
			with(func(c *sizing.SupportConfig) {
				c.ConsoleLog.Requests = sizing.Resources{CPUMilli: 7, MemoryBytes: 50 << 20}
			})},
		"other types are not ours": {kv(nil, entry(kubevirtv1.SideCar, corev1.ResourceList{corev1.ResourceCPU: q("1")}, nil), entry(kubevirtv1.HotplugAttachment, nil, corev1.ResourceList{corev1.ResourceMemory: q("1Gi")})),
			def},
		"a zero quantity keeps the default": {kv(nil, entry(kubevirtv1.ContainerDisk, corev1.ResourceList{corev1.ResourceCPU: q("0")}, nil)), def},
		"the first entry with a quantity wins, per resource": {kv(nil,
			entry(kubevirtv1.ContainerDisk, corev1.ResourceList{corev1.ResourceCPU: q("0")}, corev1.ResourceList{corev1.ResourceMemory: q("64Mi")}),
			entry(kubevirtv1.ContainerDisk, corev1.ResourceList{corev1.ResourceCPU: q("20m")}, corev1.ResourceList{corev1.ResourceMemory: q("128Mi"), corev1.ResourceCPU: q("1")})),
			with(func(c *sizing.SupportConfig) {
				c.ContainerDisk.Requests.CPUMilli, c.ContainerDisk.Limits.MemoryBytes, c.ContainerDisk.Limits.CPUMilli = 20, 64<<20, 1000
			})},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Support(tc.kv)); diff != "" {
				t.Errorf("Support (-want +got):\n%s", diff)
			}
		})
	}
}
