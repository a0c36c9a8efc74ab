package policies

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/sizing"
	"isochron.io/isochron/internal/slo"
	"isochron.io/isochron/probes/credential"
)

// What the manager writes, as the Go code renders it (render.VM, render.GuestSecret,
// slo.Job, slo.Service), is admitted by every policy of config/admission that judges it
// (manager-writes, manager-probe-image, manager-secrets, vm-ownership), written by the
// manager's ServiceAccount, for crawlers across the API's range; and the probe pods the
// Job controller creates from slo.Job's template pass the policies on pods
// (launcher-labels, realtime-priority), which take them for no crawler's launcher, as
// inventory.CrawlerLauncher does not. The probe image is the one the manager's
// Deployment names (config/manager, --probe-image), the policies' parameter.
//
// Left out, for they are rendered inside controllers/ where no test can reach them: the
// migrations, PodDisruptionBudgets, start revisions and the probe master key the manager
// writes (test/deploy's manager writes some of them on a real API server).
func TestPoliciesAdmitWhatTheManagerRenders(t *testing.T) {
	policies := allPolicies(t)
	deployment := managerDeployment(t)
	probeImage := managerArg(t, deployment, "--probe-image=")
	master := []byte("the manager's probe master key")
	for name, v := range crawlerVariants() {
		t.Run(name, func(t *testing.T) {
			cvm := v.cvm
			opts := slo.Options{Image: probeImage, Grace: 5 * time.Minute, TTL: time.Hour, CPU: slo.DefaultCPU,
				NameKey: credential.NameKey(master), PullSecret: v.pullSecret}
			in := renderInput(t, v)
			in.Agent = &render.Agent{Image: probeImage, Gateways: slo.GatewayURLs(cvm, "10.96.0.10"),
				Key: credential.Key(master, string(cvm.UID)), PullSecret: v.pullSecret}
			vm, err := render.VM(in)
			if err != nil {
				t.Fatal(err)
			}
			secret, err := render.GuestSecret(in)
			if err != nil || secret == nil {
				t.Fatalf("render.GuestSecret: %v, %v", secret, err)
			}
			run := slo.Run{Trigger: isov1.TriggerStart, Generation: cvm.Generation, VMIUID: "vmi-uid", Node: in.Node}
			var target slo.Target
			if cvm.Spec.RTNIC != nil {
				target = slo.Target{Network: slo.NetworkRefOf("bms", "rt-net", nil), IP: "192.168.50.10"}
			}
			job := slo.Job(cvm, run, target, opts)
			writes := map[string]request{
				"its VM":            {resource: gvr("kubevirt.io", "v1", "virtualmachines"), kind: gvk("kubevirt.io", "v1", "VirtualMachine"), object: custom(t, vm)},
				"its guest Secret":  {resource: gvr("", "v1", "secrets"), kind: gvk("", "v1", "Secret"), object: secret},
				"its probe Job":     {resource: gvr("batch", "v1", "jobs"), kind: gvk("batch", "v1", "Job"), object: job},
				"its probe Service": {resource: gvr("", "v1", "services"), kind: gvk("", "v1", "Service"), object: slo.Service(cvm)},
			}
			for what, r := range writes {
				r.user, r.params = manager, deployment
				for _, op := range []admission.Operation{admission.Create, admission.Update} {
					r.op = op
					if op == admission.Update {
						r.oldObject = r.object
					}
					judgeAll(t, policies, what+" "+string(op), r)
				}
			}
			// The probe image is what manager-probe-image holds them to: the same writes with
			// another image are refused (it finds the agent disk by render's volume name).
			other := "example.com/miner:latest"
			otherVM, otherJob := vm.DeepCopy(), job.DeepCopy()
			agentDisks := 0
			for i := range otherVM.Spec.Template.Spec.Volumes {
				if v := &otherVM.Spec.Template.Spec.Volumes[i]; v.Name == render.VolumeAgent && v.ContainerDisk != nil {
					v.ContainerDisk.Image, agentDisks = other, agentDisks+1
				}
			}
			if agentDisks != 1 {
				t.Fatalf("render.VM gives the VM %d agent disks (volume %s), want 1", agentDisks, render.VolumeAgent)
			}
			for i := range otherJob.Spec.Template.Spec.Containers {
				otherJob.Spec.Template.Spec.Containers[i].Image = other
			}
			probeImagePolicy := policyOf(t, "manager_writes.yaml", "manager-probe-image")
			for what, r := range map[string]request{
				"its VM with another agent disk": {resource: writes["its VM"].resource, kind: writes["its VM"].kind, object: custom(t, otherVM)},
				"its probe Job of another image": {resource: writes["its probe Job"].resource, kind: writes["its probe Job"].kind, object: otherJob},
			} {
				r.op, r.user, r.params = admission.Create, manager, deployment
				if admitted, _ := probeImagePolicy.judge(t, r); admitted {
					t.Errorf("%s: admitted by manager-probe-image, which holds the manager to --probe-image %s", what, probeImage)
				}
			}

			// The Job controller creates the probe pods from the Job's template.
			pod := &corev1.Pod{ObjectMeta: *job.Spec.Template.ObjectMeta.DeepCopy(), Spec: *job.Spec.Template.Spec.DeepCopy()}
			pod.Namespace, pod.Name = job.Namespace, job.Name+"-x7k2p"
			if inventory.CrawlerLauncher(pod) {
				t.Errorf("inventory.CrawlerLauncher takes the probe pod for a crawler's launcher: its labels %v", pod.Labels)
			}
			jobController := &user.DefaultInfo{Name: "system:serviceaccount:kube-system:job-controller", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system"}}
			judgeAll(t, policies, "its probe pod", request{op: admission.Create, resource: pods, kind: podKind, object: pod, user: jobController})
		})
	}
}

// judgeAll fails the test where a policy that judges r refuses it.
func judgeAll(t *testing.T, policies []*policy, what string, r request) {
	t.Helper()
	judged := 0
	for _, p := range policies {
		if !p.sees(r) {
			continue
		}
		judged++
		req := r
		req.params = nil
		if pk := p.vap.Spec.ParamKind; pk != nil {
			if r.params == nil || r.params.GetObjectKind().GroupVersionKind().Kind != pk.Kind {
				t.Errorf("%s: the policy %s judges it with a %s, which the test does not give", what, p.vap.Name, pk.Kind)
				continue
			}
			req.params = r.params
		}
		if admitted, message := p.judge(t, req); !admitted {
			t.Errorf("%s, as the Go code renders it, refused by the policy %s: %s", what, p.vap.Name, message)
		}
	}
	if judged == 0 {
		t.Errorf("%s: no policy judges it; the test pins nothing", what)
	}
}

// allPolicies are every ValidatingAdmissionPolicy of config/admission.
func allPolicies(t *testing.T) []*policy {
	t.Helper()
	var out []*policy
	entries, err := os.ReadDir("../../config/admission")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "kustomization.yaml" || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		for _, name := range policyNames(t, e.Name()) {
			out = append(out, policyOf(t, e.Name(), name))
		}
	}
	return out
}

// policyNames are the names of the ValidatingAdmissionPolicies of config/admission/file.
func policyNames(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open("../../config/admission/" + file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var obj metav1.PartialObjectMetadata
		if err := dec.Decode(&obj); err != nil {
			return names
		}
		if obj.Kind == "ValidatingAdmissionPolicy" {
			names = append(names, obj.Name)
		}
	}
}

// managerDeployment is the manager's Deployment as config/manager writes it, as the
// admission policies' parameter (manager-probe-image reads its --probe-image).
func managerDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	f, err := os.Open("../../config/manager/manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		d := &appsv1.Deployment{}
		if err := dec.Decode(d); err != nil {
			t.Fatalf("config/manager/manager.yaml holds no Deployment: %v", err)
		}
		if d.Kind == "Deployment" {
			return d
		}
	}
}

// managerArg is the value of the manager container's argument prefix (--probe-image=).
func managerArg(t *testing.T, d *appsv1.Deployment, prefix string) string {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, prefix); ok && c.Name == "manager" {
				return v
			}
		}
	}
	t.Fatalf("the manager's Deployment has no argument %s", prefix)
	return ""
}

// crawlerVariant is a crawler across the API's range, as the manager renders it.
type crawlerVariant struct {
	cvm        *isov1.CrawlerVM
	binding    render.Binding
	pullSecret string // the manager's --probe-image-pull-secret
}

func crawler(opts ...func(*isov1.CrawlerVM)) *isov1.CrawlerVM {
	c := &isov1.CrawlerVM{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "tower-a", UID: types.UID("0b7f6d1e-0000-4000-8000-000000000001"), Generation: 3},
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

func withRTNIC(c *isov1.CrawlerVM) {
	c.Spec.RTNIC = &isov1.RTNIC{NetworkName: "bms/rt-net", Deadline: metav1.Duration{Duration: 5 * time.Millisecond}, MinBandwidth: resource.MustParse("100M")}
}

func crawlerVariants() map[string]crawlerVariant {
	return map[string]crawlerVariant{
		"dedicated":                         {cvm: crawler()},
		"shared":                            {cvm: crawler(func(c *isov1.CrawlerVM) { c.Spec.CPUPlacement = isov1.CPUPlacementShared })},
		"RT-NIC on a bridge":                {cvm: crawler(withRTNIC), binding: render.BindingBridge},
		"RT-NIC on SR-IOV":                  {cvm: crawler(withRTNIC), binding: render.BindingSRIOV},
		"its own user data":                 {cvm: crawler(func(c *isov1.CrawlerVM) { c.Spec.Guest.CloudInitUserData = "#!/bin/sh\necho crawler\n" })},
		"probed with the crawler's traffic": {cvm: crawler(withRTNIC, func(c *isov1.CrawlerVM) { c.Spec.Probe = &isov1.Probe{Traffic: isov1.ProbeTrafficCrawler} })},
		"a private probe image":             {cvm: crawler(withRTNIC), pullSecret: "regcred"},
	}
}

// renderInput is what the manager renders variant v's VM from, but the agent.
func renderInput(t *testing.T, v crawlerVariant) render.Input {
	t.Helper()
	d := inventory.Demand(&v.cvm.Spec)
	d.VFIO = v.binding == render.BindingSRIOV
	s, err := sizing.Size(d, model.DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	return render.Input{CrawlerVM: v.cvm, Sizing: s, Node: "rt-1", RTBinding: v.binding}
}

// renderedVMI is a dedicated crawler's VMI, as render.VMI renders it.
func renderedVMI(t *testing.T) *kubevirtv1.VirtualMachineInstance {
	t.Helper()
	in := renderInput(t, crawlerVariant{cvm: crawler()})
	in.Agent = &render.Agent{Image: "isochron/rtprobe:v0.1.0", Gateways: []string{"http://10.96.0.10:8080"}}
	vmi, err := render.VMI(in)
	if err != nil {
		t.Fatal(err)
	}
	return vmi
}

func gvr(group, version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}

func gvk(group, version, kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: group, Version: version, Kind: kind}
}

// The probe master key LoadProbeMasterKey creates (controllers, with the manager's
// default Secret name, in config/default's namespace) is a Secret manager-secrets lets
// the manager write.
func TestManagerSecretsAdmitsTheProbeMasterKey(t *testing.T) {
	p := policyOf(t, "manager_secrets.yaml", "manager-secrets")
	var created *corev1.Secret
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if s, ok := obj.(*corev1.Secret); ok {
				created = s.DeepCopy()
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	if _, err := controllers.LoadProbeMasterKey(context.Background(), c, "isochron-system", controllers.DefaultProbeMasterKeySecret); err != nil {
		t.Fatal(err)
	}
	if created == nil {
		t.Fatal("LoadProbeMasterKey created no Secret")
	}
	if admitted, message := p.judge(t, request{op: admission.Create, resource: gvr("", "v1", "secrets"), kind: gvk("", "v1", "Secret"),
		object: created, user: manager}); !admitted {
		t.Errorf("the probe master key %s/%s refused: %s", created.Namespace, created.Name, message)
	}
}

// The policy vm-ownership (config/admission/vm_ownership.yaml) guards the VMs render.VM
// renders (it knows them by the labels render gives them): another user's change of
// such a VM's spec or of isochron's labels, or a VM made with them, is refused; an
// annotation passes, and so do KubeVirt's writes (virtctl stop) and the manager's.
func TestVMOwnershipGuardsTheRenderedVM(t *testing.T) {
	p := policyOf(t, "vm_ownership.yaml", "vm-ownership")
	in := renderInput(t, crawlerVariant{cvm: crawler(withRTNIC)})
	vm, err := render.VM(in)
	if err != nil {
		t.Fatal(err)
	}
	vms, vmKind := gvr("kubevirt.io", "v1", "virtualmachines"), gvk("kubevirt.io", "v1", "VirtualMachine")
	for name, tc := range map[string]struct {
		write func(*kubevirtv1.VirtualMachine)
		user  *user.DefaultInfo
		want  bool
	}{
		"its template's node, by a tenant":        {write: func(v *kubevirtv1.VirtualMachine) { v.Spec.Template.Spec.Affinity = nil }, user: tenant},
		"its CPUs, by a tenant":                   {write: func(v *kubevirtv1.VirtualMachine) { v.Spec.Template.Spec.Domain.CPU.Cores++ }, user: tenant},
		"isochron's label taken off, by a tenant": {write: func(v *kubevirtv1.VirtualMachine) { delete(v.Labels, isov1.LabelManagedBy) }, user: tenant},
		"another crawler's label, by a tenant":    {write: func(v *kubevirtv1.VirtualMachine) { v.Labels[isov1.LabelCrawlerVM] = "other" }, user: tenant},
		"an annotation, by a tenant":              {write: func(v *kubevirtv1.VirtualMachine) { v.Annotations = map[string]string{"team": "a"} }, user: tenant, want: true},
		"stopped, by KubeVirt (virtctl stop)": {write: func(v *kubevirtv1.VirtualMachine) {
			v.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyHalted)
		}, user: kubevirt, want: true},
		"its template, by the manager": {write: func(v *kubevirtv1.VirtualMachine) { v.Spec.Template.Spec.Affinity = nil }, user: manager, want: true},
	} {
		t.Run(name, func(t *testing.T) {
			after := vm.DeepCopy()
			tc.write(after)
			admitted, message := p.judge(t, request{op: admission.Update, resource: vms, kind: vmKind, object: custom(t, after), oldObject: custom(t, vm), user: tc.user})
			if admitted != tc.want {
				t.Errorf("admitted %t (%s), want %t; render.VM labels the VM %v", admitted, message, tc.want, vm.Labels)
			}
		})
	}
	t.Run("a VM made with render's labels, by a tenant", func(t *testing.T) {
		if admitted, _ := p.judge(t, request{op: admission.Create, resource: vms, kind: vmKind, object: custom(t, vm), user: tenant}); admitted {
			t.Error("admitted: isochron would take a tenant's VM for its crawler's")
		}
	})
}
