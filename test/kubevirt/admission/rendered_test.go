package admission

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cloudinit "kubevirt.io/kubevirt/pkg/cloud-init"
	"kubevirt.io/kubevirt/pkg/config"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/cli"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/sizing"
	"isochron.io/isochron/internal/slo"
	"isochron.io/isochron/probes/credential"
)

// clusterGates are the feature gates a real cluster running isochron lists in its
// KubeVirt CR: CPUManager (alpha in v1.8) makes virt-handler label the nodes that
// dedicated-CPU VMIs select. NUMA is GA; realtime and hugepages have no gate.
var clusterGates = []string{"CPUManager"}

func admit(t *testing.T, vmi *kubevirtv1.VirtualMachineInstance) {
	t.Helper()
	if causes := Validate(vmi, clusterGates); len(causes) > 0 {
		for _, c := range causes {
			t.Errorf("KubeVirt refuses VMI %s/%s: %s: %s", vmi.Namespace, vmi.Name, c.Field, c.Message)
		}
	}
}

// admitVM judges the VM and the VMI KubeVirt starts from its template (vm.go
// SetupVMIFromVM: the template's metadata and spec under the VM's name).
func admitVM(t *testing.T, vm *kubevirtv1.VirtualMachine) {
	t.Helper()
	if causes := ValidateVM(vm, clusterGates); len(causes) > 0 {
		for _, c := range causes {
			t.Errorf("KubeVirt refuses VM %s/%s: %s: %s", vm.Namespace, vm.Name, c.Field, c.Message)
		}
	}
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: *vm.Spec.Template.ObjectMeta.DeepCopy(), Spec: *vm.Spec.Template.Spec.DeepCopy()}
	vmi.Name, vmi.Namespace = vm.Name, vm.Namespace
	admit(t, vmi)
}

// Every VM isochronctl renders from config/samples, which is what the operator creates
// for them, is admitted by KubeVirt, and so is the VMI KubeVirt starts from it.
func TestSamplesRenderAdmittedVMs(t *testing.T) {
	inv, err := cli.Load(context.Background(), []string{"../../../config/samples"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.CrawlerVMs) < 3 {
		t.Fatalf("config/samples holds %d CrawlerVMs, want at least 3", len(inv.CrawlerVMs))
	}
	var out, notes bytes.Buffer
	if err := cli.Render(inv, "rt-node-1", &out, &notes); err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(&out, 4096)
	n := 0
	for {
		vm := &kubevirtv1.VirtualMachine{}
		if err := dec.Decode(vm); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if vm.Kind != "VirtualMachine" {
			continue // a guest Secret: KubeVirt reads it when it starts the VMI (TestKubeVirtReadsTheGuestSecret)
		}
		n++
		t.Run(vm.Name, func(t *testing.T) { admitVM(t, vm) })
	}
	if n != len(inv.CrawlerVMs) {
		t.Errorf("rendered %d VMs for %d CrawlerVMs", n, len(inv.CrawlerVMs))
	}
}

// agent is the probe agent as the operator renders it, its Service at a cluster IP, with
// the crawler's probe key.
func agent(c *isov1.CrawlerVM) *render.Agent {
	return &render.Agent{Image: slo.DefaultImage, Gateways: slo.GatewayURLs(c, "10.96.0.17"), Key: credential.Key([]byte("master"), string(c.UID))}
}

// The user data the guest gets is the guest Secret's, as KubeVirt's own code takes it:
// the launcher pod virt-controller renders for the VMI mounts the Secret (keys userdata
// and userData, by subPath), and virt-launcher's cloud-init code reads the NoCloud
// user data from there, for every variant, the longest user data included.
func TestKubeVirtReadsTheGuestSecret(t *testing.T) {
	for name, v := range variants() {
		t.Run(name, func(t *testing.T) {
			s, vm := v.render(t)
			secret, err := render.GuestSecret(render.Input{CrawlerVM: v.cvm, Sizing: s, Node: "rt-node-1", RTBinding: v.binding, Agent: agent(v.cvm)})
			if err != nil || secret == nil {
				t.Fatalf("guest Secret %v, %v", secret, err)
			}
			vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: *vm.Spec.Template.ObjectMeta.DeepCopy(), Spec: *vm.Spec.Template.Spec.DeepCopy()}
			vmi.Name, vmi.Namespace, vmi.UID = vm.Name, vm.Namespace, "uid-1"
			pod, err := LauncherPod(vmi, kubevirtv1.KubeVirtConfiguration{}, clusterGates)
			if err != nil {
				t.Fatal(err)
			}
			// The kubelet's part: each subPath mount of a volume of the guest Secret gets the
			// file of its key, under a root that stands for the launcher's filesystem.
			root := t.TempDir()
			fromSecret := map[string]bool{}
			for _, vol := range pod.Spec.Volumes {
				if vol.Secret != nil && vol.Secret.SecretName == secret.Name {
					fromSecret[vol.Name] = true
				}
			}
			mounted := 0
			for _, c := range pod.Spec.Containers {
				for _, m := range c.VolumeMounts {
					data, ok := secret.Data[m.SubPath]
					if !fromSecret[m.Name] || !ok {
						continue
					}
					path := filepath.Join(root, m.MountPath)
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, data, 0o600); err != nil {
						t.Fatal(err)
					}
					mounted++
				}
			}
			if mounted == 0 {
				t.Fatalf("the launcher pod mounts nothing of Secret %s", secret.Name)
			}
			got, err := cloudinit.ReadCloudInitVolumeDataSource(vmi, filepath.Join(root, config.SecretSourceDir))
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || got.UserData != string(secret.Data[render.SecretKeyUserData]) {
				t.Errorf("KubeVirt reads cloud-init data %+v, want the guest Secret's user data", got)
			}
		})
	}
}

type option func(*isov1.CrawlerVM)

func crawlerVM(opts ...option) *isov1.CrawlerVM {
	c := &isov1.CrawlerVM{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "variant", UID: "0b7f6d1e-0000-4000-8000-000000000001"},
		Spec: isov1.CrawlerVMSpec{
			RPS:          400,
			ErrorBudget:  isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}, Objective: "99.999"},
			Guest:        isov1.Guest{Image: "quay.io/isochron/crawler:0.1", Memory: resource.MustParse("1Gi")},
			CPUPlacement: isov1.CPUPlacementDedicated,
			Placement:    &isov1.Placement{Policy: isov1.PlacementPolicyPack},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func rtNIC(deadline time.Duration) option {
	return func(c *isov1.CrawlerVM) {
		c.Spec.RTNIC = &isov1.RTNIC{NetworkName: "bms/rt-net", Deadline: metav1.Duration{Duration: deadline}, MinBandwidth: resource.MustParse("1G")}
	}
}

type variant struct {
	cvm     *isov1.CrawlerVM
	binding render.Binding
}

// render sizes the variant's crawler and renders its VM, as the operator would, counting
// no support containers.
func (v variant) render(t *testing.T) (sizing.Result, *kubevirtv1.VirtualMachine) {
	t.Helper()
	return v.renderDemand(t, v.demand())
}

// renderWith is render with the support containers counted as the operator counts them
// in a cluster whose KubeVirt resource is kv (nil: none, KubeVirt's defaults).
func (v variant) renderWith(t *testing.T, kv *kubevirtv1.KubeVirt) (sizing.Result, *kubevirtv1.VirtualMachine) {
	t.Helper()
	d := v.demand()
	d.Support = render.Support(v.cvm, inventory.Support(kv))
	return v.renderDemand(t, d)
}

func (v variant) demand() sizing.Demand {
	d := inventory.Demand(&v.cvm.Spec)
	d.VFIO = v.binding == render.BindingSRIOV // as the operator's render.VFIO finds it
	return d
}

func (v variant) renderDemand(t *testing.T, d sizing.Demand) (sizing.Result, *kubevirtv1.VirtualMachine) {
	t.Helper()
	s, err := sizing.Size(d, model.DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	vm, err := render.VM(render.Input{CrawlerVM: v.cvm, Sizing: s, Node: "rt-node-1", RTBinding: v.binding, Agent: agent(v.cvm)})
	if err != nil {
		t.Fatal(err)
	}
	return s, vm
}

// variants are CrawlerVMs across the API's range, each with its RT-NIC binding.
func variants() map[string]variant {
	return map[string]variant{
		"dedicated, smallest":        {cvm: crawlerVM(func(c *isov1.CrawlerVM) { c.Spec.RPS = 1; c.Spec.Guest.Memory = resource.MustParse("256Mi") })},
		"dedicated, 1000 rps":        {cvm: crawlerVM(func(c *isov1.CrawlerVM) { c.Spec.RPS = 1000 })},
		"dedicated, largest rate":    {cvm: crawlerVM(func(c *isov1.CrawlerVM) { c.Spec.RPS = 100000; c.Spec.Guest.Memory = resource.MustParse("64Gi") })},
		"memory not a page multiple": {cvm: crawlerVM(func(c *isov1.CrawlerVM) { c.Spec.Guest.Memory = resource.MustParse("1000001k") })},
		"shared":                     {cvm: crawlerVM(func(c *isov1.CrawlerVM) { c.Spec.CPUPlacement = isov1.CPUPlacementShared })},
		"shared with RT-NIC":         {cvm: crawlerVM(rtNIC(50*time.Millisecond), func(c *isov1.CrawlerVM) { c.Spec.CPUPlacement = isov1.CPUPlacementShared })},
		"RT-NIC bridge, EF":          {cvm: crawlerVM(rtNIC(5 * time.Millisecond)), binding: render.BindingBridge},
		"RT-NIC SR-IOV, AF41":        {cvm: crawlerVM(rtNIC(20 * time.Millisecond)), binding: render.BindingSRIOV},
		"RT-NIC with longest user data": {cvm: crawlerVM(rtNIC(time.Second), func(c *isov1.CrawlerVM) {
			c.Spec.Guest.CloudInitUserData = "#cloud-config\n" + strings.Repeat("#", 1024-len("#cloud-config\n"))
		})},
		"user data alone": {cvm: crawlerVM(func(c *isov1.CrawlerVM) { c.Spec.Guest.CloudInitUserData = "#!/bin/sh\necho crawler\n" })},
		"node selector and tolerations": {cvm: crawlerVM(func(c *isov1.CrawlerVM) {
			c.Spec.Placement.NodeSelector = map[string]string{"isochron.io/rt": "true"}
			c.Spec.Placement.Tolerations = []corev1.Toleration{{Key: "isochron.io/rt", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		})},
	}
}

// Variants across the API's range, each admitted by KubeVirt as rendered.
func TestRenderedVariantsAreAdmitted(t *testing.T) {
	cases := variants()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, vm := tc.render(t)
			admitVM(t, vm)
		})
	}
}

// A VM whose crawler gave up its reservation is pinned to no node (render.Affinity("")):
// KubeVirt admits it, and the VMI started from it.
func TestParkedVMIsAdmitted(t *testing.T) {
	_, vm := variants()["dedicated, 1000 rps"].render(t)
	vm.Spec.Template.Spec.Affinity = render.Affinity("")
	if !render.Parked(&vm.Spec.Template.Spec) || render.PinnedNode(&vm.Spec.Template.Spec) != "" {
		t.Fatalf("affinity %+v: want it parked, pinned to no node", vm.Spec.Template.Spec.Affinity)
	}
	admitVM(t, vm)
}

// The harness is not a rubber stamp: a rendered VMI broken the way a rendering bug
// would break it is refused.
func TestBrokenRenderingIsRefused(t *testing.T) {
	c := crawlerVM()
	s, _ := sizing.Size(inventory.Demand(&c.Spec), model.DefaultParams())
	vmi, err := render.VMI(render.Input{CrawlerVM: c, Sizing: s, Node: "rt-node-1", Agent: agent(c)})
	if err != nil {
		t.Fatal(err)
	}
	vmi.Spec.Domain.CPU.NUMA = nil // realtime without guest NUMA passthrough
	if causes := Validate(vmi, clusterGates); len(causes) == 0 {
		t.Error("KubeVirt admitted realtime without numa.guestMappingPassthrough")
	}
	vm, err := render.VM(render.Input{CrawlerVM: c, Sizing: s, Node: "rt-node-1", Agent: agent(c)})
	if err != nil {
		t.Fatal(err)
	}
	vm.Spec.Template.Spec.Domain.CPU.NUMA = nil
	if causes := ValidateVM(vm, clusterGates); len(causes) == 0 {
		t.Error("KubeVirt admitted a VM whose template is realtime without numa.guestMappingPassthrough")
	}
	vm.Spec.Template.Spec.Domain.CPU.NUMA = &kubevirtv1.NUMA{GuestMappingPassthrough: &kubevirtv1.NUMAGuestMappingPassthrough{}}
	vm.Spec.Running = ptr.To(true) // with runStrategy: mutually exclusive
	if causes := ValidateVM(vm, clusterGates); len(causes) == 0 {
		t.Error("KubeVirt admitted a VM with both running and runStrategy")
	}
}

// The agent disk of a crawler whose probe image is private (--probe-image-pull-secret) is
// admitted by KubeVirt, and KubeVirt's launcher pod pulls it with that Secret.
func TestPrivateAgentImageIsPulledWithItsSecret(t *testing.T) {
	for name, v := range variants() {
		t.Run(name, func(t *testing.T) {
			s, err := sizing.Size(v.demand(), model.DefaultParams())
			if err != nil {
				t.Fatal(err)
			}
			a := agent(v.cvm)
			a.Image, a.PullSecret = "registry.example:5000/isochron/rtprobe:v0.2.0", "registry-creds"
			vm, err := render.VM(render.Input{CrawlerVM: v.cvm, Sizing: s, Node: "rt-node-1", RTBinding: v.binding, Agent: a})
			if err != nil {
				t.Fatal(err)
			}
			admitVM(t, vm)
			vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: *vm.Spec.Template.ObjectMeta.DeepCopy(), Spec: *vm.Spec.Template.Spec.DeepCopy()}
			vmi.Name, vmi.Namespace, vmi.UID = vm.Name, vm.Namespace, "uid-1"
			pod, err := LauncherPod(vmi, kubevirtv1.KubeVirtConfiguration{}, clusterGates)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(pod.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == "registry-creds" }) {
				t.Errorf("launcher pod's imagePullSecrets %v: want registry-creds, to pull %s", pod.Spec.ImagePullSecrets, a.Image)
			}
		})
		break // one variant: the agent disk is the same in all
	}
}
