package policies

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers/nicagent"
	"isochron.io/isochron/internal/inventory"
)

// The policy launcher-labels (config/admission/launcher_identity.yaml) keeps to KubeVirt
// the pods inventory.CrawlerLauncher takes for a crawler's virt-launcher (whose CPUs and
// memory placement counts through the crawler's reservation, not as the pod's own):
// another user's write that makes a pod one (a create, or labels added) is refused
// exactly when CrawlerLauncher says the pod is one and was not; KubeVirt's always passes.
func TestLauncherLabelsPolicyIsCrawlerLauncher(t *testing.T) {
	p := policyOf(t, "launcher_identity.yaml", "launcher-labels")
	labels := map[string]map[string]string{
		"none":                      nil,
		"KubeVirt's launcher label": {kubevirtv1.AppLabel: "virt-launcher"},
		"a crawler's label":         {isov1.LabelCrawlerVM: "tower-a"},
		"both":                      {kubevirtv1.AppLabel: "virt-launcher", isov1.LabelCrawlerVM: "tower-a"},
		"both, the crawler's empty": {kubevirtv1.AppLabel: "virt-launcher", isov1.LabelCrawlerVM: ""},
		"both and others":           {kubevirtv1.AppLabel: "virt-launcher", isov1.LabelCrawlerVM: "tower-a", "app": "x"},
		"another KubeVirt app":      {kubevirtv1.AppLabel: "virt-handler", isov1.LabelCrawlerVM: "tower-a"},
	}
	pod := func(l map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "p", Labels: l},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	}
	for before, old := range labels {
		for after, now := range labels {
			for _, u := range []*user.DefaultInfo{tenant, kubevirt} {
				t.Run(before+" to "+after+"/"+u.Name, func(t *testing.T) {
					made := inventory.CrawlerLauncher(pod(now)) && !inventory.CrawlerLauncher(pod(old))
					for _, r := range []request{
						{op: admission.Update, object: pod(now), oldObject: pod(old)},
						{op: admission.Create, object: pod(now)},
					} {
						if r.op == admission.Create && before != "none" {
							continue
						}
						r.resource, r.kind, r.user = pods, podKind, u
						admitted, message := p.judge(t, r)
						if want := !made || u == kubevirt; admitted != want {
							t.Errorf("%s by %s: admitted %t (%s), want %t: CrawlerLauncher says the pod is a crawler's launcher %t, was %t",
								r.op, u.Name, admitted, message, want, inventory.CrawlerLauncher(pod(now)), inventory.CrawlerLauncher(pod(old)))
						}
					}
				})
			}
		}
	}
}

// The policy realtime-priority (config/admission/launcher_identity.yaml) keeps to
// KubeVirt the PriorityClass render.VMI gives every crawler's VMI (and so its launcher
// pod): another user's pod of that class is refused, KubeVirt's admitted, a pod of
// another class or of none admitted.
func TestRealtimePriorityPolicyGuardsTheRenderedClass(t *testing.T) {
	p := policyOf(t, "launcher_identity.yaml", "realtime-priority")
	class := renderedVMI(t).Spec.PriorityClassName
	if class == "" {
		t.Fatal("render.VMI gives the VMI no PriorityClass")
	}
	for name, tc := range map[string]struct {
		class string
		user  *user.DefaultInfo
		want  bool
	}{
		"the crawlers' class, by a tenant": {class: class, user: tenant, want: false},
		"the crawlers' class, by KubeVirt": {class: class, user: kubevirt, want: true},
		"another class, by a tenant":       {class: "high", user: tenant, want: true},
		"no class, by a tenant":            {user: tenant, want: true},
		"the crawlers' class, by isochron": {class: class, user: manager, want: false},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "p"},
				Spec: corev1.PodSpec{PriorityClassName: tc.class, Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
			admitted, message := p.judge(t, request{op: admission.Create, resource: pods, kind: podKind, object: pod, user: tc.user})
			if admitted != tc.want {
				t.Errorf("a pod of class %q by %s: admitted %t (%s), want %t (render.VMI's class is %q)", tc.class, tc.user.Name, admitted, message, tc.want, class)
			}
		})
	}
}

// The policy launcher-identity (config/admission/launcher_identity.yaml) keeps
// status.activePods of a VMI KubeVirt's, which is what nicagent.LauncherOf trusts to
// name the pod whose QEMU threads the NIC agent raises to SCHED_FIFO: every write of a
// VMI by another user that changes whom LauncherOf names on the node is refused, and
// one that leaves status.activePods alone is admitted; KubeVirt's writes pass.
//
// Left out: a change of the VMI's spec, which KubeVirt's own admission refuses (a VMI's
// spec is immutable), not this policy.
func TestLauncherIdentityPolicyGuardsLauncherOf(t *testing.T) {
	p := policyOf(t, "launcher_identity.yaml", "launcher-identity")
	const node = "rt-1"
	cvm := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "tower-a"}}
	vmi := renderedVMI(t)
	vmi.Namespace, vmi.Name, vmi.UID = cvm.Namespace, cvm.Name, "vmi-uid"
	vmi.Status = kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Running, ActivePods: map[types.UID]string{"launcher": node}}
	launcherPod := func(uid types.UID) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: "virt-launcher-" + string(uid), UID: uid,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: vmi.Name, UID: vmi.UID, Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "compute", ContainerID: "containerd://" + string(uid),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
		}
	}
	// The VMI's launcher, and another pod it controls on the node (a migration's target).
	podsOnNode := []corev1.Pod{launcherPod("launcher"), launcherPod("other")}
	if _, reason, ok := nicagent.LauncherOf(cvm, vmi, podsOnNode, node); !ok {
		t.Fatalf("LauncherOf names no launcher of the test's VMI: %s", reason)
	}
	writes := map[string]func(*kubevirtv1.VirtualMachineInstance){
		"a label added":                 func(v *kubevirtv1.VirtualMachineInstance) { v.Labels = map[string]string{"team": "a"} },
		"its phase":                     func(v *kubevirtv1.VirtualMachineInstance) { v.Status.Phase = kubevirtv1.Succeeded },
		"another pod named":             func(v *kubevirtv1.VirtualMachineInstance) { v.Status.ActivePods = map[types.UID]string{"other": node} },
		"another pod named besides":     func(v *kubevirtv1.VirtualMachineInstance) { v.Status.ActivePods["other"] = node },
		"no pod named":                  func(v *kubevirtv1.VirtualMachineInstance) { v.Status.ActivePods = nil },
		"its launcher on another node":  func(v *kubevirtv1.VirtualMachineInstance) { v.Status.ActivePods["launcher"] = "rt-2" },
		"a pod on another node besides": func(v *kubevirtv1.VirtualMachineInstance) { v.Status.ActivePods["elsewhere"] = "rt-2" },
	}
	vmis := schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}
	vmiKind := schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachineInstance"}
	for name, write := range writes {
		for _, u := range []*user.DefaultInfo{tenant, kubevirt} {
			for _, sub := range []string{"", "status"} {
				t.Run(name+"/"+u.Name+"/"+sub, func(t *testing.T) {
					after := vmi.DeepCopy()
					write(after)
					l0, _, ok0 := nicagent.LauncherOf(cvm, vmi, podsOnNode, node)
					l1, _, ok1 := nicagent.LauncherOf(cvm, after, podsOnNode, node)
					renamed := l0 != l1 || ok0 != ok1
					admitted, message := p.judge(t, request{op: admission.Update, resource: vmis, kind: vmiKind, subresource: sub,
						object: custom(t, after), oldObject: custom(t, vmi), user: u})
					switch {
					case u == kubevirt && !admitted:
						t.Errorf("KubeVirt's write refused: %s", message)
					case u == tenant && renamed && admitted:
						t.Errorf("a tenant's write that makes LauncherOf name %+v (ok %t), not %+v, is admitted", l1, ok1, l0)
					case u == tenant && sameActivePods(vmi, after) && !admitted:
						t.Errorf("a tenant's write that leaves status.activePods alone is refused: %s", message)
					}
				})
			}
		}
	}
	t.Run("a VMI created naming its launcher, by a tenant", func(t *testing.T) {
		if admitted, _ := p.judge(t, request{op: admission.Create, resource: vmis, kind: vmiKind, object: custom(t, vmi), user: tenant}); admitted {
			t.Error("admitted: a tenant's VMI would name a pod LauncherOf trusts")
		}
	})
}

func sameActivePods(a, b *kubevirtv1.VirtualMachineInstance) bool {
	if len(a.Status.ActivePods) != len(b.Status.ActivePods) {
		return false
	}
	for uid, n := range a.Status.ActivePods {
		if b.Status.ActivePods[uid] != n {
			return false
		}
	}
	return true
}
