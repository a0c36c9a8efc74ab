package inventory

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/placement"
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

func TestClusterKubeVirt(t *testing.T) {
	kv := func(name string, phase kubevirtv1.KubeVirtPhase) kubevirtv1.KubeVirt {
		k := kubevirtv1.KubeVirt{}
		k.Name, k.Status.Phase = name, phase
		return k
	}
	for name, tc := range map[string]struct {
		kvs  []kubevirtv1.KubeVirt
		want string // "" for none
	}{
		"none":                            {nil, ""},
		"one, not yet deployed":           {[]kubevirtv1.KubeVirt{kv("a", kubevirtv1.KubeVirtPhaseDeploying)}, "a"},
		"the deployed one of two":         {[]kubevirtv1.KubeVirt{kv("a", kubevirtv1.KubeVirtPhaseDeploying), kv("b", kubevirtv1.KubeVirtPhaseDeployed)}, "b"},
		"the first of two deployed":       {[]kubevirtv1.KubeVirt{kv("a", kubevirtv1.KubeVirtPhaseDeployed), kv("b", kubevirtv1.KubeVirtPhaseDeployed)}, "a"},
		"the first when none is deployed": {[]kubevirtv1.KubeVirt{kv("a", ""), kv("b", kubevirtv1.KubeVirtPhaseDeleting)}, "a"},
	} {
		t.Run(name, func(t *testing.T) {
			got := ""
			if k := ClusterKubeVirt(tc.kvs); k != nil {
				got = k.Name
			}
			if got != tc.want {
				t.Errorf("ClusterKubeVirt = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCountedOtherwise(t *testing.T) {
	const gi = int64(1) << 30
	held := func(r sizing.Result) *isov1.CrawlerVM {
		return &isov1.CrawlerVM{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "a"},
			Spec:       isov1.CrawlerVMSpec{RPS: 100},
			Status:     isov1.CrawlerVMStatus{Sizing: SizingStatus(r), Placement: &isov1.PlacementStatus{Node: "n1"}},
		}
	}
	base := sizing.Result{VCPUs: 2, HostCPUs: 3, CPURequestMilli: 2000, MemoryBytes: gi, HugepagesBytes: gi}
	with := func(f func(*sizing.Result)) sizing.Result { r := base; f(&r); return r }
	req := func(vfio bool, cpu, mem int64) placement.Request {
		return placement.Request{Demand: sizing.Demand{VFIO: vfio, Support: sizing.Resources{CPUMilli: cpu, MemoryBytes: mem}}}
	}
	for name, tc := range map[string]struct {
		c    *isov1.CrawlerVM
		req  placement.Request
		want bool
	}{
		"counted as it is":                 {held(with(func(r *sizing.Result) { r.SupportCPUMilli, r.SupportMemoryBytes = 35, 140_000_000 })), req(false, 35, 140_000_000), false},
		"VFIO counted as it is":            {held(with(func(r *sizing.Result) { r.VFIOBytes = sizing.VFIOOverheadBytes })), req(true, 0, 0), false},
		"predates the support count":       {held(base), req(false, 35, 140_000_000), true},
		"support CPU sized otherwise":      {held(with(func(r *sizing.Result) { r.SupportCPUMilli, r.SupportMemoryBytes = 35, 80_000_000 })), req(false, 600, 80_000_000), true},
		"support memory sized otherwise":   {held(with(func(r *sizing.Result) { r.SupportCPUMilli, r.SupportMemoryBytes = 600, 140_000_000 })), req(false, 600, 80_000_000), true},
		"the network became SR-IOV":        {held(base), req(true, 0, 0), true},
		"the network is no longer SR-IOV":  {held(with(func(r *sizing.Result) { r.VFIOBytes = sizing.VFIOOverheadBytes })), req(false, 0, 0), true},
		"no reservation, nothing to count": {&isov1.CrawlerVM{}, req(false, 0, 0), false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := CountedOtherwise(tc.c, tc.req); got != tc.want {
				t.Errorf("CountedOtherwise = %v, want %v", got, tc.want)
			}
		})
	}
}
