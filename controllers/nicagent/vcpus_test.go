package nicagent_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/controllers/nicagent"
	"isochron.io/isochron/internal/hostsched"
	"isochron.io/isochron/test/support/scale"
)

// kernel is the node's threads as the guard sees them: each domain's vCPU threads, the
// launcher pod and container its QEMU runs in (in, by domain; hostsched.VCPUs finds a
// QEMU only in the container it is asked for), the reads of each, and domains whose
// threads refuse SCHED_FIFO.
type kernel struct {
	mu      sync.Mutex
	domains map[string][]hostsched.Thread
	in      map[string]hostsched.Launcher
	reads   map[string]int
	refuse  map[string]bool
}

func (k *kernel) VCPUs(l hostsched.Launcher) ([]hostsched.Thread, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reads[l.Domain]++
	v, ok := k.domains[l.Domain]
	if !ok || k.in[l.Domain] != l {
		return nil, hostsched.ErrNoDomain
	}
	return append([]hostsched.Thread(nil), v...), nil
}

func (k *kernel) SetRealtime(tid int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for d, threads := range k.domains {
		for i := range threads {
			if threads[i].TID != tid {
				continue
			}
			if k.refuse[d] {
				return fmt.Errorf("sched_setattr(%d): operation not permitted", tid)
			}
			threads[i].Policy, threads[i].Priority = hostsched.PolicyFIFO, hostsched.RealtimePriority
			return nil
		}
	}
	return fmt.Errorf("no thread %d", tid)
}

func (k *kernel) policy(domain string, tid int) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, t := range k.domains[domain] {
		if t.TID == tid {
			return t.Policy
		}
	}
	return -1
}

func (k *kernel) readsOf(domain string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reads[domain]
}

// waitReads waits until the guard has read domain's threads n more times than before.
func (k *kernel) waitReads(t *testing.T, domain string, n int) {
	t.Helper()
	want := k.readsOf(domain) + n
	eventually(t, fmt.Sprintf("%d reads of %s", want, domain), func() (bool, string) {
		got := k.readsOf(domain)
		return got >= want, fmt.Sprintf("%d reads", got)
	})
}

// guard runs the vCPU guard of node until the test ends.
func guard(t *testing.T, node string, k *kernel, clk *clocktesting.FakeClock) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: nicagent.CacheOptions(node), Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	g := &nicagent.VCPUGuard{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor(isov1.NICAgent), Node: node, Threads: k,
		Clock: clk, Grace: 30 * time.Second, Every: 50 * time.Millisecond}
	if err := g.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// placeCrawler creates a crawler placed on node, dedicated (hostCPUs > 0) or shared.
func placeCrawler(t *testing.T, ns, name, node string, hostCPUs int32) {
	t.Helper()
	ctx := context.Background()
	c := scale.Crawler(ns, name, 50, hostCPUs == 0)
	if err := env.Client.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	c.Status.Sizing = &isov1.Sizing{VCPUs: 1, HostCPUs: hostCPUs, CPURequest: resource.MustParse("2"), Memory: resource.MustParse("1Gi")}
	c.Status.Placement = &isov1.PlacementStatus{Node: node}
	if err := env.Client.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// runVMI starts crawler ns/name's VMI on node as KubeVirt runs it (dedicated realtime
// vCPUs, its launcher pod there, the pod's compute container running) and records in k
// that its QEMU runs in that container. The pod is the launcher KubeVirt reports in the
// VMI's status.activePods unless reported says otherwise.
func runVMI(t *testing.T, k *kernel, ns, name, node string) (vmi *kubevirtv1.VirtualMachineInstance, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	vmi = &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{kubevirtv1.NodeNameLabel: node}},
		Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{
			CPU:       &kubevirtv1.CPU{Cores: 1, DedicatedCPUPlacement: true, IsolateEmulatorThread: true, Realtime: &kubevirtv1.Realtime{}},
			Resources: kubevirtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
		}},
	}
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	pod = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "virt-launcher-" + name,
			Labels: map[string]string{kubevirtv1.AppLabel: "virt-launcher", kubevirtv1.CreatedByLabel: string(vmi.UID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: vmi.Name, UID: vmi.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "compute", Image: "virt-launcher"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	ctr := "containerd://" + strings.ReplaceAll(string(pod.UID), "-", "")
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "compute", ContainerID: ctr, Image: "virt-launcher",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	vmi.Status.ActivePods = map[types.UID]string{pod.UID: node}
	vmi.Status.NodeName = node
	if err := env.Client.Update(ctx, vmi); err != nil { // a VMI has no status subresource
		t.Fatal(err)
	}
	k.mu.Lock()
	k.in[ns+"_"+name] = hostsched.Launcher{Domain: ns + "_" + name, PodUID: string(pod.UID), ContainerID: ctr}
	k.mu.Unlock()
	return vmi, pod
}

// The guard gives SCHED_FIFO back to a dedicated crawler's vCPU thread seen without it for
// its grace, says so on the crawler, and touches nothing else: a shared crawler's
// threads, a crawler on another node, a thread within its grace, a QEMU of the crawler's
// name that runs in a pod another tenant made to look like its launcher.
func TestVCPUGuardMakesDedicatedVCPUsRealtime(t *testing.T) {
	const ns, node = "vcpu-guard", "guard-a"
	setup(t, ns, []string{node, "guard-b"}, nil)
	other := func(tid int) hostsched.Thread {
		return hostsched.Thread{TID: tid, Name: fmt.Sprintf("CPU %d/KVM", tid%10)}
	}
	fifo := hostsched.Thread{TID: 110, Name: "CPU 0/KVM", Policy: hostsched.PolicyFIFO, Priority: 1}
	k := &kernel{reads: map[string]int{}, refuse: map[string]bool{ns + "_refusing": true}, in: map[string]hostsched.Launcher{},
		domains: map[string][]hostsched.Thread{
			ns + "_tower":    {fifo, other(111)},
			ns + "_shared":   {other(121)},
			ns + "_away":     {other(131)},
			ns + "_refusing": {other(141)},
			ns + "_forged":   {other(151)},
		}}
	placeCrawler(t, ns, "tower", node, 2)
	placeCrawler(t, ns, "shared", node, 0)
	placeCrawler(t, ns, "away", "guard-b", 2)
	placeCrawler(t, ns, "refusing", node, 2)
	placeCrawler(t, ns, "starting", node, 2)
	placeCrawler(t, ns, "forged", node, 2)
	runVMI(t, k, ns, "tower", node)
	runVMI(t, k, ns, "refusing", node)
	runVMI(t, k, ns, "away", "guard-b")
	runVMI(t, k, ns, "starting", node)
	k.mu.Lock()
	delete(k.in, ns+"_starting") // its launcher runs, its QEMU does not yet
	k.mu.Unlock()
	// forged: its VMI and launcher run, but the process named like its QEMU, with a
	// thread "CPU 1/KVM", runs in a pod a tenant made on the node with the launcher's
	// labels, owner and container name.
	vmi, _ := runVMI(t, k, ns, "forged", node)
	impostor := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "virt-launcher-forged-x", // listed after the launcher
			Labels:          map[string]string{kubevirtv1.AppLabel: "virt-launcher", kubevirtv1.CreatedByLabel: string(vmi.UID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: vmi.Name, UID: vmi.UID}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "compute", Image: "busybox"}}},
	}
	if err := env.Client.Create(context.Background(), impostor); err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	k.in[ns+"_forged"] = hostsched.Launcher{Domain: ns + "_forged", PodUID: string(impostor.UID), ContainerID: "containerd://impostor"}
	k.mu.Unlock()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	guard(t, node, k, clk)

	// Within the grace nothing changes, however often the guard looks.
	k.waitReads(t, ns+"_tower", 3)
	clk.Step(29 * time.Second)
	k.waitReads(t, ns+"_tower", 3)
	if p := k.policy(ns+"_tower", 111); p != hostsched.PolicyOther {
		t.Fatalf("thread 111 has policy %d within its grace: want SCHED_OTHER still (KubeVirt's own start sets it)", p)
	}
	clk.Step(time.Second)
	eventually(t, "thread 111 SCHED_FIFO", func() (bool, string) {
		p := k.policy(ns+"_tower", 111)
		return p == hostsched.PolicyFIFO, fmt.Sprintf("policy %d", p)
	})
	eventually(t, "the crawler's Event "+isov1.EventReasonVCPUsMadeRealtime, func() (bool, string) {
		return hasEvent(ns, "tower", isov1.EventReasonVCPUsMadeRealtime, func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "CPU 1/KVM (TID 111, SCHED_OTHER priority 0)") &&
				strings.Contains(e.Message, "for 30s") && strings.Contains(e.Message, "node "+node) && !strings.Contains(e.Message, "TID 110")
		})
	})
	eventually(t, "the refusing crawler's Event "+isov1.EventReasonVCPUsNotRealtime, func() (bool, string) {
		return hasEvent(ns, "refusing", isov1.EventReasonVCPUsNotRealtime, func(e corev1.Event) bool {
			return strings.Contains(e.Message, "TID 141") && strings.Contains(e.Message, "operation not permitted") && strings.Contains(e.Message, "CAP_SYS_NICE")
		})
	})
	k.waitReads(t, ns+"_tower", 3)
	clk.Step(time.Hour)
	k.waitReads(t, ns+"_tower", 3)
	if p := k.policy(ns+"_shared", 121); p != hostsched.PolicyOther {
		t.Errorf("a shared crawler's vCPU thread has policy %d: the guard is for dedicated crawlers only", p)
	}
	if n := k.readsOf(ns + "_shared"); n != 0 {
		t.Errorf("the guard read a shared crawler's threads %d times", n)
	}
	if n := k.readsOf(ns + "_away"); n != 0 {
		t.Errorf("the guard read the threads of a crawler on another node %d times", n)
	}
	if n := k.readsOf(ns + "_starting"); n == 0 {
		t.Error("the guard never looked for the starting crawler's QEMU")
	}
	if n := k.readsOf(ns + "_forged"); n == 0 {
		t.Error("the guard never looked for the forged crawler's QEMU in its launcher")
	}
	if p := k.policy(ns+"_forged", 151); p != hostsched.PolicyOther {
		t.Errorf("the thread of a QEMU in a pod that is not the crawler's launcher has policy %d: the guard must leave it SCHED_OTHER", p)
	}
	if ok, _ := hasEvent(ns, "tower", isov1.EventReasonVCPUsNotRealtime, nil); ok {
		t.Error("an Event VCPUsNotRealtime on a crawler whose vCPU was made realtime")
	}

	// A thread that loses its policy later (a migration's target, a restart) is seen
	// again and gets it back after its own grace.
	k.mu.Lock()
	k.domains[ns+"_tower"][1].Policy, k.domains[ns+"_tower"][1].Priority = hostsched.PolicyOther, 0
	k.mu.Unlock()
	k.waitReads(t, ns+"_tower", 3)
	if p := k.policy(ns+"_tower", 111); p != hostsched.PolicyOther {
		t.Fatalf("thread 111 was given SCHED_FIFO at once: its grace starts when it is seen")
	}
	clk.Step(30 * time.Second)
	eventually(t, "thread 111 SCHED_FIFO again", func() (bool, string) {
		p := k.policy(ns+"_tower", 111)
		return p == hostsched.PolicyFIFO, fmt.Sprintf("policy %d", p)
	})
}
