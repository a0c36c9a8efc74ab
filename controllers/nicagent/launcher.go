package nicagent

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/hostsched"
)

// computeContainer is the container of a virt-launcher pod that runs libvirt and QEMU.
const computeContainer = "compute"

// LauncherOf is what proves a QEMU on node is crawler c's (hostsched.Launcher), read from
// what KubeVirt and the kubelet report, never from anything a process says of itself:
//
//   - the crawler's VMI (vmi, nil when none is cached) asks for what the guard gives:
//     dedicated CPUs and realtime (spec.domain.cpu). KubeVirt itself makes such a VMI's
//     vCPUs SCHED_FIFO; the guard only finishes what KubeVirt left undone, on CPUs the
//     kubelet gave the VMI alone. A VMI's spec is immutable (KubeVirt's admission);
//   - the VMI's launcher pod on node is the one KubeVirt names in status.activePods (an
//     administrator's admission policy keeps anyone but KubeVirt from writing it:
//     config/admission), a pod on node that the VMI controls;
//   - its compute container runs, with the ID the kubelet reports in the pod's status
//     (pods/status: only the kubelet writes it).
//
// pods are the pods on node. The reason says what is missing when ok is false.
func LauncherOf(c *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance, pods []corev1.Pod, node string) (l hostsched.Launcher, reason string, ok bool) {
	switch {
	case vmi == nil:
		return l, "no VMI on this node", false
	case vmi.Namespace != c.Namespace || vmi.Name != vmiName(c):
		return l, fmt.Sprintf("VMI %s/%s is not the crawler's", vmi.Namespace, vmi.Name), false
	case vmi.Spec.Domain.CPU == nil || !vmi.Spec.Domain.CPU.DedicatedCPUPlacement || vmi.Spec.Domain.CPU.Realtime == nil:
		return l, fmt.Sprintf("VMI %s asks for no dedicated realtime vCPUs (spec.domain.cpu)", vmi.Name), false
	}
	var uids []string
	for uid, on := range vmi.Status.ActivePods {
		if on == node {
			uids = append(uids, string(uid))
		}
	}
	if len(uids) != 1 {
		return l, fmt.Sprintf("VMI %s reports %d launcher pods on node %s (status.activePods), not one", vmi.Name, len(uids), node), false
	}
	i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return string(p.UID) == uids[0] })
	if i < 0 {
		return l, fmt.Sprintf("launcher pod %s of VMI %s is not on node %s", uids[0], vmi.Name, node), false
	}
	pod := &pods[i]
	if pod.Spec.NodeName != node || pod.Namespace != vmi.Namespace || !metav1.IsControlledBy(pod, vmi) {
		return l, fmt.Sprintf("pod %s/%s is not a launcher of VMI %s on node %s", pod.Namespace, pod.Name, vmi.Name, node), false
	}
	j := slices.IndexFunc(pod.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool { return s.Name == computeContainer })
	if j < 0 || pod.Status.ContainerStatuses[j].State.Running == nil || pod.Status.ContainerStatuses[j].ContainerID == "" {
		return l, fmt.Sprintf("the %s container of launcher pod %s does not run", computeContainer, pod.Name), false
	}
	return hostsched.Launcher{Domain: Domain(c), PodUID: string(pod.UID), ContainerID: pod.Status.ContainerStatuses[j].ContainerID}, "", true
}

// vmiName is the name of the crawler's VMI: its VM's, the crawler's own.
func vmiName(c *isov1.CrawlerVM) string { return c.Name }
