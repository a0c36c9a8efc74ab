package render

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/rtnet"
	"isochron.io/isochron/internal/sizing"
	"isochron.io/isochron/probes/credential"
	"isochron.io/isochron/test/support/testcases"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

type cvmOption func(*isov1.CrawlerVM)

func crawler(opts ...cvmOption) *isov1.CrawlerVM {
	c := &isov1.CrawlerVM{
		ObjectMeta: metav1.ObjectMeta{Name: "tower-a", Namespace: "bms", UID: "6f1c2b9e-0000-4000-8000-000000000001"},
		Spec: isov1.CrawlerVMSpec{
			RPS:          400,
			ErrorBudget:  isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}, Objective: "99.999"},
			Guest:        isov1.Guest{Image: "quay.io/org/crawler:1", Memory: resource.MustParse("2Gi")},
			CPUPlacement: isov1.CPUPlacementDedicated,
			Placement:    &isov1.Placement{Policy: isov1.PlacementPolicyPack},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func withRTNIC(deadline time.Duration) cvmOption {
	return func(c *isov1.CrawlerVM) {
		c.Spec.RTNIC = &isov1.RTNIC{NetworkName: "bms/rt-net", Deadline: metav1.Duration{Duration: deadline}, MinBandwidth: resource.MustParse("100M")}
	}
}

func withUserData(s string) cvmOption {
	return func(c *isov1.CrawlerVM) { c.Spec.Guest.CloudInitUserData = s }
}

func shared(c *isov1.CrawlerVM) { c.Spec.CPUPlacement = isov1.CPUPlacementShared }

func constrained(c *isov1.CrawlerVM) {
	c.Spec.Placement.NodeSelector = map[string]string{"isochron.io/rt": "true"}
	c.Spec.Placement.Tolerations = []corev1.Toleration{{Key: "isochron.io/rt", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
}

// guestDSCP has the guest mark its RT traffic (a network with AnnotationGuestDSCP).
func guestDSCP(in Input) Input {
	in.GuestDSCP = true
	return in
}

func input(c *isov1.CrawlerVM, b Binding) Input {
	s, err := sizing.Size(inventory.Demand(&c.Spec), model.DefaultParams())
	if err != nil {
		panic(err)
	}
	return Input{CrawlerVM: c, Sizing: s, Node: "rt-node-1", RTBinding: b, Agent: agentOf(c, "10.96.0.17")}
}

// agentOf is the agent of this release as the operator renders it for c, its probe
// Service at clusterIP.
func agentOf(c *isov1.CrawlerVM, clusterIP string) *Agent {
	return &Agent{Image: "isochron/rtprobe:v0.1.0", Gateways: []string{
		"http://" + c.Name + "-probe." + c.Namespace + ".svc:8080", "http://" + clusterIP + ":8080",
	}, Key: credential.Key([]byte("test master key"), string(c.UID))}
}

// The golden files are the VirtualMachines isochron applies (isochronctl render prints
// the same) and their guest Secrets, whose data is shown as stringData to be read.
func TestVMGolden(t *testing.T) {
	cases := map[string]Input{
		"dedicated":                  input(crawler(), ""),
		"dedicated-rtnic-bridge":     input(crawler(withRTNIC(5*time.Millisecond)), BindingBridge),
		"dedicated-rtnic-sriov":      guestDSCP(input(crawler(withRTNIC(20*time.Millisecond)), BindingSRIOV)),
		"rtnic-with-user-data":       input(crawler(withRTNIC(50*time.Millisecond), withUserData("#cloud-config\npackages: [chrony]\n")), BindingBridge),
		"user-data-passed-unchanged": input(crawler(withUserData("#cloud-config\npackages: [chrony]\n")), ""),
		"shared":                     input(crawler(shared), ""),
		"selector-and-tolerations":   input(crawler(constrained), ""),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			vm, err := VM(in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := YAML(vm)
			if err != nil {
				t.Fatal(err)
			}
			secret, err := GuestSecret(in)
			if err != nil {
				t.Fatal(err)
			}
			readable := secret.DeepCopy()
			readable.StringData = map[string]string{}
			for k, v := range readable.Data {
				readable.StringData[k] = string(v)
			}
			readable.Data = nil
			y, err := YAML(readable)
			if err != nil {
				t.Fatal(err)
			}
			got = append(append(got, "---\n"...), y...)
			path := filepath.Join("testdata", name+".yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/render -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("VM %s (-want +got):\n%s", name, diff)
			}
			if d := UnmigratableDisk(&vm.Spec.Template.Spec); d != "" {
				t.Errorf("disk %s cannot be live-migrated (UnmigratableDisk)", d)
			}
			disks := 0
			for _, v := range vm.Spec.Template.Spec.Volumes {
				if v.ContainerDisk != nil {
					disks++
				}
			}
			if disks != ContainerDisks {
				t.Errorf("%d containerDisk volumes, ContainerDisks (what placement counts a support container for each of) is %d", disks, ContainerDisks)
			}
		})
	}
}

func TestVMIsDeterministic(t *testing.T) {
	in := input(crawler(withRTNIC(5*time.Millisecond), constrained, withUserData("#!/bin/sh\necho hi\n")), BindingBridge)
	first, _ := VM(in)
	a, _ := YAML(first)
	for i := 0; i < 20; i++ {
		v, _ := VM(in)
		b, _ := YAML(v)
		if string(a) != string(b) {
			t.Fatalf("rendering %d differs:\n%s", i, cmp.Diff(string(a), string(b)))
		}
	}
}

// A crawler from the cluster has a UID: its VM is controlled by it and its template
// carries the hash of its inputs. One read from a file (isochronctl render) has none, and
// its VM carries neither, so that kubectl can apply it; the spec is the same.
func TestVMOwnerNeedsUID(t *testing.T) {
	fromCluster := crawler()
	fromFile := crawler(func(c *isov1.CrawlerVM) { c.UID = "" })
	cases := map[string]struct {
		cvm         *isov1.CrawlerVM
		owners      []metav1.OwnerReference
		annotations map[string]string
	}{
		"from the cluster, with a UID": {
			cvm: fromCluster,
			owners: []metav1.OwnerReference{{
				APIVersion: "isochron.io/v1alpha1", Kind: "CrawlerVM", Name: "tower-a", UID: "6f1c2b9e-0000-4000-8000-000000000001",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
			annotations: map[string]string{isov1.AnnotationVMInputs: VMInputsHash(input(fromCluster, "")), isov1.AnnotationUserDataHash: UserDataHash(fromCluster)},
		},
		"from a file, without a UID": {cvm: fromFile},
	}
	want, err := VM(input(fromCluster, ""))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			vm, err := VM(input(tc.cvm, ""))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.owners, vm.OwnerReferences); diff != "" {
				t.Errorf("ownerReferences (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.annotations, vm.Spec.Template.ObjectMeta.Annotations); diff != "" {
				t.Errorf("template annotations (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want.Spec.Template.Spec, vm.Spec.Template.Spec); diff != "" {
				t.Errorf("template spec (-with a UID +without):\n%s", diff)
			}
			y, err := YAML(vm)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(y), `uid: ""`) {
				t.Errorf("the VM has an empty uid:\n%s", y)
			}
		})
	}
}

// A VM's template changes by a move (its node) only in its affinity, which KubeVirt
// applies to the running VMI; any other input changes the hash and the whole VM is
// applied.
func TestPlanVMWrite(t *testing.T) {
	base := input(crawler(withRTNIC(5*time.Millisecond)), BindingBridge)
	applied := func(in Input) *kubevirtv1.VirtualMachine {
		vm, err := VM(in)
		if err != nil {
			t.Fatal(err)
		}
		return vm
	}
	moved := base
	moved.Node = "rt-node-2"
	bigger := input(crawler(withRTNIC(5*time.Millisecond), func(c *isov1.CrawlerVM) { c.Spec.RPS = 1000 }), BindingBridge)
	newAgent := base
	newAgent.Agent = &Agent{Image: "isochron/rtprobe:v0.3.0", Gateways: base.Agent.Gateways}
	pulled := base
	pulled.Agent = &Agent{Image: base.Agent.Image, Gateways: base.Agent.Gateways, PullSecret: "registry-creds"}
	if v := applied(pulled).Spec.Template.Spec.Volumes; !slices.ContainsFunc(v, func(v kubevirtv1.Volume) bool {
		return v.Name == VolumeAgent && v.ContainerDisk != nil && v.ContainerDisk.ImagePullSecret == "registry-creds"
	}) {
		t.Errorf("volumes %+v: want the agent disk pulled with registry-creds", v)
	}
	stopped := base
	stopped.RunStrategy = kubevirtv1.RunStrategyHalted
	noHash := applied(base)
	delete(noHash.Spec.Template.ObjectMeta.Annotations, isov1.AnnotationVMInputs)
	// inline is the template of the same inputs as a release before the guest Secret
	// rendered it: its user data inline, without the probe key.
	inline := applied(base)
	for i, v := range inline.Spec.Template.Spec.Volumes {
		if v.Name == VolumeCloudInit {
			inline.Spec.Template.Spec.Volumes[i].CloudInitNoCloud = &kubevirtv1.CloudInitNoCloudSource{UserData: "#!/bin/sh\n# isochron: probe agent\n"}
		}
	}
	cases := map[string]struct {
		vm      *kubevirtv1.VirtualMachine
		in      Input
		stopped bool
		want    VMWrite
	}{
		"rendered from the same inputs":                {vm: applied(base), in: base, want: WriteNothing},
		"moved to another node":                        {vm: applied(base), in: moved, want: WriteAffinity},
		"a bigger size":                                {vm: applied(base), in: bigger, want: WriteApply},
		"a new release's agent is no new input":        {vm: applied(base), in: newAgent, want: WriteNothing},
		"stopped by a person is no new input":          {vm: applied(base), in: stopped, want: WriteNothing},
		"a template without the hash":                  {vm: noHash, in: base, want: WriteApply},
		"another node and another size: a whole write": {vm: applied(base), in: func() Input { in := bigger; in.Node = "rt-node-2"; return in }(), want: WriteApply},
		// An earlier release's rendering reaches the next VMI, never the running one.
		"inline user data, a VMI runs":            {vm: inline, in: base, want: WriteNothing},
		"inline user data, no VMI":                {vm: inline, in: base, stopped: true, want: WriteApply},
		"a new release's agent, no VMI":           {vm: applied(base), in: newAgent, stopped: true, want: WriteApply},
		"a pull secret for the agent, a VMI runs": {vm: applied(base), in: pulled, want: WriteNothing},
		"a pull secret for the agent, no VMI":     {vm: applied(base), in: pulled, stopped: true, want: WriteApply},
		"the same rendering, no VMI":              {vm: applied(base), in: base, stopped: true, want: WriteNothing},
		"another gateway address is no change":    {vm: applied(base), in: func() Input { in := base; in.Agent = agentOf(base.CrawlerVM, "10.96.9.9"); return in }(), stopped: true, want: WriteNothing},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := PlanVMWrite(tc.vm, tc.in, tc.stopped); got != tc.want {
				t.Errorf("PlanVMWrite = %v, want %v", got, tc.want)
			}
		})
	}
	if node := PinnedNode(&applied(moved).Spec.Template.Spec); node != "rt-node-2" {
		t.Errorf("PinnedNode = %q, want rt-node-2", node)
	}
}

// A bare VMI of a release before isochron owned VMs is restarted when what it was
// rendered from changes, and only then: one of the same inputs (by its hash, or one that
// v0.1.0 rendered differently, with no agent and a DSCP script) is adopted running.
func TestCompare(t *testing.T) {
	base := func() *isov1.CrawlerVM {
		return crawler(withRTNIC(5*time.Millisecond), constrained, withUserData("#cloud-config\nruncmd: [crawler]\n"))
	}
	rendered := func(c *isov1.CrawlerVM, b Binding) *kubevirtv1.VirtualMachineInstance {
		in := input(c, b)
		v, err := VMI(in)
		if err != nil {
			t.Fatal(err)
		}
		return testcases.BareVMI(v, c, InputsHash(in))
	}
	// v010 is the VMI v0.1.0 rendered for c.
	v010 := func(c *isov1.CrawlerVM, b Binding) *kubevirtv1.VirtualMachineInstance {
		class := rtnet.DSCP{}
		if c.Spec.RTNIC != nil {
			class = rtnet.ForDeadline(c.Spec.RTNIC.Deadline.Duration, 0).DSCP
		}
		return testcases.RenderedByV010(rendered(c, b), c, MAC(c), class.Name, class.Value)
	}
	with := func(edit func(*isov1.CrawlerVM)) *isov1.CrawlerVM { c := base(); edit(c); return c }
	cases := map[string]struct {
		running *kubevirtv1.VirtualMachineInstance
		now     Input
		want    Fit
	}{
		"same inputs":     {running: rendered(base(), BindingBridge), now: input(base(), BindingBridge), want: Current},
		"another size":    {running: rendered(base(), BindingBridge), now: input(with(func(c *isov1.CrawlerVM) { c.Spec.RPS = 1000 }), BindingBridge), want: Outdated},
		"another binding": {running: rendered(base(), BindingBridge), now: input(base(), BindingSRIOV), want: Outdated},
		"another agent image (a new release) is no new input": {
			running: rendered(base(), BindingBridge),
			now: func() Input {
				in := input(base(), BindingBridge)
				in.Agent.Image = "isochron/rtprobe:v0.2.0"
				return in
			}(),
			want: Current,
		},
		"the user's cloud-init changed": {
			running: rendered(base(), BindingBridge),
			now:     input(with(func(c *isov1.CrawlerVM) { c.Spec.Guest.CloudInitUserData = "#cloud-config\n" }), BindingBridge),
			want:    Outdated,
		},
		"v0.1.0's VMI of the same inputs is adopted":             {running: v010(base(), BindingBridge), now: input(base(), BindingBridge), want: Adopt},
		"v0.1.0's shared VMI is adopted":                         {running: v010(crawler(shared), ""), now: input(crawler(shared), ""), want: Adopt},
		"v0.1.0's VMI without cloud-init is adopted":             {running: v010(crawler(), ""), now: input(crawler(), ""), want: Adopt},
		"v0.1.0's VMI with the user's data alone is adopted":     {running: v010(crawler(withUserData("#!/bin/sh\necho hi")), ""), now: input(crawler(withUserData("#!/bin/sh\necho hi")), ""), want: Adopt},
		"v0.1.0's VMI of an RT-NIC without user data is adopted": {running: v010(crawler(withRTNIC(20*time.Millisecond)), BindingSRIOV), now: input(crawler(withRTNIC(20*time.Millisecond)), BindingSRIOV), want: Adopt},
		"v0.1.0's VMI of another image is replaced": {
			running: v010(base(), BindingBridge), now: input(with(func(c *isov1.CrawlerVM) { c.Spec.Guest.Image = "quay.io/org/crawler:2" }), BindingBridge), want: Outdated,
		},
		"v0.1.0's VMI on another node is replaced": {
			running: v010(base(), BindingBridge), now: func() Input { in := input(base(), BindingBridge); in.Node = "elsewhere"; return in }(), want: Outdated,
		},
		"v0.1.0's VMI of another DSCP class is replaced": {
			running: v010(base(), BindingBridge), now: input(with(func(c *isov1.CrawlerVM) { c.Spec.RTNIC.Deadline.Duration = 50 * time.Millisecond }), BindingBridge), want: Outdated,
		},
		"v0.1.0's VMI of other user data is replaced": {
			running: v010(base(), BindingBridge), now: input(with(func(c *isov1.CrawlerVM) { c.Spec.Guest.CloudInitUserData = "" }), BindingBridge), want: Outdated,
		},
		"v0.1.0's VMI without the RT-NIC now asked for is replaced": {
			running: v010(with(func(c *isov1.CrawlerVM) { c.Spec.RTNIC = nil }), ""), now: input(base(), BindingBridge), want: Outdated,
		},
		"v0.1.0's VMI with tolerations no longer wanted is replaced": {
			running: v010(base(), BindingBridge), now: input(with(func(c *isov1.CrawlerVM) { c.Spec.Placement.Tolerations = nil }), BindingBridge), want: Outdated,
		},
		"v0.1.0's dedicated VMI now shared is replaced": {
			running: v010(crawler(), ""), now: input(crawler(shared), ""), want: Outdated,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Compare(tc.running, tc.now); got != tc.want {
				t.Errorf("Compare = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVMIErrors(t *testing.T) {
	cases := map[string]struct {
		in   Input
		want string
	}{
		"no node": {
			in:   Input{CrawlerVM: crawler()},
			want: "no node chosen",
		},
		"user data carrying our boundary": {
			in:   input(crawler(withRTNIC(5*time.Millisecond), withUserData("#!/bin/sh\n# "+mimeBoundary+"\n")), BindingBridge),
			want: "contains isochron's MIME boundary",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := VMI(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("VMI() error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The guest Secret holds the user data the guest gets, the user's own byte for byte with
// isochron's part (the agent, told the gateway and its key file, and the key), and the
// probe key alone for the probe pod; the VMI only names it. Without a UID (an offline
// render) it has no owner; without the agent's key, no key at all.
func TestGuestSecret(t *testing.T) {
	user := "#cloud-config\n" + strings.Repeat("#", 1024-len("#cloud-config\n")) // the largest the API accepts
	c := crawler(withRTNIC(5*time.Millisecond), withUserData(user))
	c.Name, c.Namespace = strings.Repeat("c", 57), strings.Repeat("n", 63)
	in := guestDSCP(input(c, BindingSRIOV))
	in.Agent = agentOf(c, "fd00:1234:5678:9abc:def0:1234:5678:9abc")
	key := credential.Encode(in.Agent.Key)
	s, err := GuestSecret(in)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != c.Name+"-guest" || s.Namespace != c.Namespace || s.Type != corev1.SecretTypeOpaque || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != c.UID {
		t.Errorf("Secret %s/%s type %s owners %+v", s.Namespace, s.Name, s.Type, s.OwnerReferences)
	}
	if got := string(s.Data[SecretKeyProbeKey]); got != key {
		t.Errorf("probe-key %q, want %q", got, key)
	}
	data := string(s.Data[SecretKeyUserData])
	if got := usersPart(data); got != user {
		t.Errorf("the user's part is not passed byte for byte: %d bytes, want %d", len(got), len(user))
	}
	for _, want := range []string{"\nk=" + key + "\n", "--key-file=" + AgentKeyFile, "(umask 077; echo $k >" + AgentKeyFile + ")", "--dscp=46 --dscp-mac=" + MAC(c)} {
		if !strings.Contains(data, want) {
			t.Errorf("user data lacks %q:\n%s", want, data)
		}
	}
	vmi, err := VMI(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vmi.Spec.Volumes {
		if v.CloudInitNoCloud != nil && (v.CloudInitNoCloud.UserData != "" || v.CloudInitNoCloud.UserDataSecretRef == nil || v.CloudInitNoCloud.UserDataSecretRef.Name != s.Name) {
			t.Errorf("the VMI's cloud-init %+v, want only a reference to Secret %s", v.CloudInitNoCloud, s.Name)
		}
	}
	t.Logf("user data: %d bytes (KubeVirt would refuse more than 2048 inline)", len(data))

	offline := input(crawler(func(c *isov1.CrawlerVM) { c.UID = "" }), "")
	offline.Agent.Key = nil
	s, err = GuestSecret(offline)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Data[SecretKeyProbeKey]; ok || len(s.OwnerReferences) != 0 || strings.Contains(string(s.Data[SecretKeyUserData]), "--key-file") {
		t.Errorf("offline Secret %+v: want no key, no owner", s)
	}
	none := input(crawler(), "")
	none.Agent = nil
	if s, err := GuestSecret(none); s != nil || err != nil {
		t.Errorf("without user data or agent: Secret %v, err %v; want none", s, err)
	}
}

func TestMACIsLocallyAdministeredUnicast(t *testing.T) {
	mac := MAC(crawler())
	if !strings.HasPrefix(mac, "02:") || len(mac) != 17 {
		t.Errorf("MAC() = %q", mac)
	}
}

func TestNetworkAllowed(t *testing.T) {
	network := func(name string) cvmOption {
		return func(c *isov1.CrawlerVM) { withRTNIC(5 * time.Millisecond)(c); c.Spec.RTNIC.NetworkName = name }
	}
	cases := map[string]struct {
		c      *isov1.CrawlerVM
		shared []string
		// refused is a part of the error, "" for none.
		refused string
	}{
		"no RT-NIC":                              {c: crawler()},
		"a bare name is the crawler's namespace": {c: crawler(network("rt-net"))},
		"its own namespace, named":               {c: crawler(network("bms/rt-net"))},
		"a shared namespace":                     {c: crawler(network("rt-shared/net")), shared: []string{"kube-system", "rt-shared"}},
		"another tenant's network": {c: crawler(network("other/rt-net")), shared: []string{"rt-shared"},
			refused: "spec.rtNIC.networkName: NetworkAttachmentDefinition other/rt-net is in namespace other, and a CrawlerVM may use only the networks of its own namespace (bms) and of the namespaces an administrator shares (rt-shared); create the network in bms, or have other added to the shared namespaces"},
		"nothing shared": {c: crawler(network("other/rt-net")), refused: "shares (none)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := NetworkAllowed(tc.c, tc.shared)
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Errorf("error = %v, want it to contain %q", err, tc.refused)
			}
		})
	}
}

func TestUnmigratableDisk(t *testing.T) {
	vm, err := VM(input(crawler(), ""))
	if err != nil {
		t.Fatal(err)
	}
	spec := &vm.Spec.Template.Spec
	if d := UnmigratableDisk(spec); d != "" {
		t.Fatalf("UnmigratableDisk = %q for this release's VM, want none", d)
	}
	for i := range spec.Domain.Devices.Disks {
		if spec.Domain.Devices.Disks[i].Name == VolumeAgent {
			spec.Domain.Devices.Disks[i].Disk.ReadOnly = true // as earlier releases rendered it
		}
	}
	if d := UnmigratableDisk(spec); d != VolumeAgent {
		t.Errorf("UnmigratableDisk = %q with a read-only agent disk, want %s", d, VolumeAgent)
	}
}

// The next VMI starts from the template once no VMI runs on: none, a stopped one, a crash
// (Failed), a guest's shutdown (Succeeded), a restart or cold move (being deleted).
func TestRestarting(t *testing.T) {
	vmi := func(phase kubevirtv1.VirtualMachineInstancePhase, deleting bool) *kubevirtv1.VirtualMachineInstance {
		v := &kubevirtv1.VirtualMachineInstance{Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: phase}}
		if deleting {
			v.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		}
		return v
	}
	cases := map[string]struct {
		vmi  *kubevirtv1.VirtualMachineInstance
		want bool
	}{
		"no VMI":                 {vmi: nil, want: true},
		"pending":                {vmi: vmi(kubevirtv1.Pending, false), want: false},
		"scheduled":              {vmi: vmi(kubevirtv1.Scheduled, false), want: false},
		"running":                {vmi: vmi(kubevirtv1.Running, false), want: false},
		"crashed (Failed)":       {vmi: vmi(kubevirtv1.Failed, false), want: true},
		"shut down (Succeeded)":  {vmi: vmi(kubevirtv1.Succeeded, false), want: true},
		"running, being deleted": {vmi: vmi(kubevirtv1.Running, true), want: true},
		"pending, being deleted": {vmi: vmi(kubevirtv1.Pending, true), want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Restarting(tc.vmi); got != tc.want {
				t.Errorf("Restarting = %v, want %v", got, tc.want)
			}
		})
	}
}

// A crawler that holds no reservation is pinned to no node; any other is pinned to its.
func TestParked(t *testing.T) {
	cases := map[string]struct {
		affinity *corev1.Affinity
		parked   bool
		pinned   string
	}{
		"pinned to a node":  {affinity: Affinity("rt-node-1"), pinned: "rt-node-1"},
		"pinned to no node": {affinity: Affinity(""), parked: true},
		"no affinity":       {affinity: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := &kubevirtv1.VirtualMachineInstanceSpec{Affinity: tc.affinity}
			if got := Parked(spec); got != tc.parked {
				t.Errorf("Parked = %v, want %v", got, tc.parked)
			}
			if got := PinnedNode(spec); got != tc.pinned {
				t.Errorf("PinnedNode = %q, want %q", got, tc.pinned)
			}
		})
	}
}
