package nicagent_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers/nicagent"
	"isochron.io/isochron/internal/hostsched"
)

// realtimeVMI is the VMI of crawler ns/name as KubeVirt runs it on node: dedicated
// realtime vCPUs, its launcher pod podUID active there.
func realtimeVMI(ns, name, node string, podUID types.UID) *kubevirtv1.VirtualMachineInstance {
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("vmi-" + name),
			Labels: map[string]string{kubevirtv1.NodeNameLabel: node}},
	}
	vmi.Spec.Domain.CPU = &kubevirtv1.CPU{Cores: 1, DedicatedCPUPlacement: true, IsolateEmulatorThread: true, Realtime: &kubevirtv1.Realtime{}}
	vmi.Status.ActivePods = map[types.UID]string{podUID: node}
	return vmi
}

// launcherPod is vmi's virt-launcher pod on node, its compute container running as ctr.
func launcherPod(vmi *kubevirtv1.VirtualMachineInstance, uid types.UID, node, ctr string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: "virt-launcher-" + vmi.Name + "-" + string(uid), UID: uid,
			Labels: map[string]string{kubevirtv1.AppLabel: "virt-launcher", kubevirtv1.CreatedByLabel: string(vmi.UID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: vmi.Name, UID: vmi.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: "volumecontainerdisk", ContainerID: "containerd://disk", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "compute", ContainerID: ctr, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		}},
	}
}

func TestLauncherOf(t *testing.T) {
	const ns, name, node = "bms", "tower", "rt-1"
	crawler := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	genuine := hostsched.Launcher{Domain: ns + "_" + name, PodUID: "pod-1", ContainerID: "containerd://abc"}
	for tcName, tc := range map[string]struct {
		vmi    func(*kubevirtv1.VirtualMachineInstance) *kubevirtv1.VirtualMachineInstance
		pods   func(vmi *kubevirtv1.VirtualMachineInstance, pods []corev1.Pod) []corev1.Pod
		want   hostsched.Launcher
		reason string
	}{
		"the launcher KubeVirt reports, on this node": {want: genuine},
		"no VMI": {
			vmi:    func(*kubevirtv1.VirtualMachineInstance) *kubevirtv1.VirtualMachineInstance { return nil },
			reason: "no VMI",
		},
		"another crawler's VMI": {
			vmi: func(v *kubevirtv1.VirtualMachineInstance) *kubevirtv1.VirtualMachineInstance {
				v.Name = "other"
				return v
			},
			reason: "not the crawler's",
		},
		"a VMI that asks for no realtime: KubeVirt keeps its vCPUs SCHED_OTHER, so does the guard": {
			vmi: func(v *kubevirtv1.VirtualMachineInstance) *kubevirtv1.VirtualMachineInstance {
				v.Spec.Domain.CPU.Realtime = nil
				return v
			},
			reason: "no dedicated realtime vCPUs",
		},
		"a VMI on shared CPUs": {
			vmi: func(v *kubevirtv1.VirtualMachineInstance) *kubevirtv1.VirtualMachineInstance {
				v.Spec.Domain.CPU.DedicatedCPUPlacement = false
				return v
			},
			reason: "no dedicated realtime vCPUs",
		},
		"its launcher on another node (a migration's source or target elsewhere)": {
			vmi: func(v *kubevirtv1.VirtualMachineInstance) *kubevirtv1.VirtualMachineInstance {
				v.Status.ActivePods = map[types.UID]string{"pod-1": "rt-2"}
				return v
			},
			reason: "0 launcher pods on node rt-1",
		},
		"a pod that claims the VMI's labels and owner, not the one KubeVirt reports": {
			pods: func(v *kubevirtv1.VirtualMachineInstance, pods []corev1.Pod) []corev1.Pod {
				forged := launcherPod(v, "pod-forged", node, "containerd://evil")
				return []corev1.Pod{forged}
			},
			reason: "launcher pod pod-1 of VMI tower is not on node rt-1",
		},
		"the pod KubeVirt reports is not controlled by the VMI": {
			pods: func(v *kubevirtv1.VirtualMachineInstance, pods []corev1.Pod) []corev1.Pod {
				pods[0].OwnerReferences = nil
				return pods
			},
			reason: "is not a launcher of VMI tower",
		},
		"the pod runs on another node": {
			pods: func(v *kubevirtv1.VirtualMachineInstance, pods []corev1.Pod) []corev1.Pod {
				pods[0].Spec.NodeName = "rt-2"
				return pods
			},
			reason: "is not a launcher of VMI tower",
		},
		"its compute container does not run yet": {
			pods: func(v *kubevirtv1.VirtualMachineInstance, pods []corev1.Pod) []corev1.Pod {
				pods[0].Status.ContainerStatuses[1].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}
				return pods
			},
			reason: "the compute container of launcher pod",
		},
		"no compute container": {
			pods: func(v *kubevirtv1.VirtualMachineInstance, pods []corev1.Pod) []corev1.Pod {
				pods[0].Status.ContainerStatuses = pods[0].Status.ContainerStatuses[:1]
				return pods
			},
			reason: "the compute container of launcher pod",
		},
	} {
		t.Run(tcName, func(t *testing.T) {
			vmi := realtimeVMI(ns, name, node, "pod-1")
			pods := []corev1.Pod{launcherPod(vmi, "pod-1", node, "containerd://abc")}
			if tc.vmi != nil {
				vmi = tc.vmi(vmi)
			}
			if tc.pods != nil && vmi != nil {
				pods = tc.pods(vmi, pods)
			}
			got, reason, ok := nicagent.LauncherOf(crawler, vmi, pods, node)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("LauncherOf (-want +got):\n%s", diff)
			}
			if ok != (tc.reason == "") || !strings.Contains(reason, tc.reason) {
				t.Errorf("LauncherOf = %v, %q; want reason containing %q", ok, reason, tc.reason)
			}
		})
	}
}
