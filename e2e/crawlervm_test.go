//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	resourcehelper "k8s.io/component-helpers/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/slo"
)

// Timeouts, generous for nested or software-emulated virtualisation.
const (
	placeTimeout  = 2 * time.Minute
	runTimeout    = 10 * time.Minute
	probeTimeout  = 10 * time.Minute
	deleteTimeout = 5 * time.Minute
)

func TestDedicatedCrawlerRunsOnExclusiveCPUs(t *testing.T) {
	ctx := context.Background()
	// 50 requests/s: 1 vCPU, plus the isolated emulator thread (status.sizing.hostCPUs).
	const hostCPUs = 2
	if why := noDedicatedNode(ctx, t, hostCPUs); why != "" {
		t.Skipf("no node can run a dedicated crawler (%d exclusive CPUs): %s", hostCPUs, why)
	}
	ns := testNamespace(t)
	// With nodes to move between (E2E_MOVE_NODES) the crawler runs on one of them and,
	// once probed, a drain moves it live to another (moveDedicatedLive).
	var opts []func(*isov1.CrawlerVM)
	sel, _, noMove := readyMoveNodes(ctx, t)
	if noMove == "" {
		opts = append(opts, onMoveNodes(sel))
	}
	cvm := crawler(ns, "tower", opts...)
	var second *isov1.CrawlerVM
	runCrawler(ctx, t, cvm, func(vmi *kubevirtv1.VirtualMachineInstance, launcher *corev1.Pod, sizing isov1.Sizing) {
		if cpu := vmi.Spec.Domain.CPU; cpu == nil || !cpu.DedicatedCPUPlacement || !cpu.IsolateEmulatorThread {
			t.Errorf("VMI spec.domain.cpu = %+v, want dedicated CPUs and an isolated emulator thread", cpu)
		}
		// The exclusive CPUs, read from the cgroups: the launcher's compute container
		// holds hostCPUs CPUs, none of them in the node's shared pool (virt-handler's).
		if launcher.Status.QOSClass != corev1.PodQOSGuaranteed {
			t.Errorf("virt-launcher pod %s has QoS %s, want Guaranteed (exclusive CPUs need it)", launcher.Name, launcher.Status.QOSClass)
		}
		exclusive := cpuSet(t, launcher.Namespace, launcher.Name, "compute")
		shared := cpuSet(t, kubevirtNS, handlerPod(ctx, t, launcher.Spec.NodeName).Name, "virt-handler")
		t.Logf("compute container cpuset %v, shared pool (virt-handler) %v", exclusive, shared)
		if len(exclusive) != int(sizing.HostCPUs) {
			t.Errorf("compute container has %d CPUs %v, status.sizing.hostCPUs = %d", len(exclusive), exclusive, sizing.HostCPUs)
		}
		if both := intersect(exclusive, shared); len(both) > 0 {
			t.Errorf("CPUs %v are in the crawler's cpuset %v and in the shared pool %v", both, exclusive, shared)
		}
		// virt-handler gives the vCPU threads their realtime policy after the VMI is
		// Running (one run read SCHED_OTHER right after Ready): wait for it, as long as
		// the threads are KVM's (under emulation it never comes, checkDomain says why).
		var q qemuProcess
		waitFor(t, 2*time.Minute, "the vCPU threads realtime", func() (bool, string, error) {
			q = readQEMU(t, launcher.Namespace, launcher.Name)
			vcpus, _ := q.vCPUs()
			for _, th := range vcpus {
				if strings.HasSuffix(th.Name, "/KVM") && th.Policy != 1 && th.Policy != 2 {
					return false, fmt.Sprintf("vCPU thread %q has scheduling policy %d", th.Name, th.Policy), nil
				}
			}
			return len(vcpus) > 0, fmt.Sprintf("%d vCPU threads", len(vcpus)), nil
		})
		checkDomain(t, readDomain(t, vmi, launcher.Name), q, exclusive, sizing, cvm.Spec.Guest.Memory.Value())
		checkVCPUGuard(ctx, t, cvm, launcher, q)
		second = secondDedicatedCrawler(ctx, t, ns, launcher.Spec.NodeName)
	}, func(vmi *kubevirtv1.VirtualMachineInstance, launcher *corev1.Pod) *corev1.Pod {
		if noMove != "" {
			t.Logf("not moved: %s", noMove)
			return launcher
		}
		// The second crawler gives its CPUs back before the first moves where it ran.
		waitGone(ctx, t, second, nil)
		return moveDedicatedLive(ctx, t, cvm, vmi)
	})
}

// secondDedicatedCrawler places a second dedicated crawler while the first runs on node
// first. Where the first took the CPUs a second needs (a node VM of the local cluster has
// 3 allocatable, each crawler takes 2), it goes to another node that can hold it or is
// refused, naming what binds; where it fits beside the first, the test logs it. It
// deletes the second crawler and returns it.
func secondDedicatedCrawler(ctx context.Context, t *testing.T, ns, first string) *isov1.CrawlerVM {
	t.Helper()
	cvm := crawler(ns, "tower-2")
	if err := cl.Create(ctx, cvm); err != nil {
		t.Fatalf("creating the second CrawlerVM: %v", err)
	}
	var placed *metav1.Condition
	waitFor(t, placeTimeout, "the second crawler placed or refused", func() (bool, string, error) {
		placed = condition(ctx, t, cvm, isov1.ConditionPlaced)
		return placed != nil && placed.Status != metav1.ConditionUnknown && (placed.Status == metav1.ConditionFalse || cvm.Status.Placement != nil),
			fmt.Sprintf("Placed: %v", placed), nil
	})
	node := &corev1.Node{}
	if err := cl.Get(ctx, client.ObjectKey{Name: first}, node); err != nil {
		t.Fatal(err)
	}
	free := node.Status.Allocatable.Cpu().MilliValue() - 2000 // the first crawler's two CPUs
	switch {
	case placed.Status == metav1.ConditionTrue && cvm.Status.Placement.Node != first:
		t.Logf("the second dedicated crawler went to %s (the first runs on %s)", cvm.Status.Placement.Node, first)
	case placed.Status == metav1.ConditionTrue && free >= 2000:
		t.Logf("the second dedicated crawler fits beside the first on %s (%dm allocatable CPU left)", first, free)
	case placed.Status == metav1.ConditionTrue:
		t.Errorf("the second dedicated crawler was placed on %s beside the first, with %dm allocatable CPU left for its 2 exclusive CPUs", first, free)
	case !strings.Contains(placed.Message, first) || !strings.Contains(placed.Message, "exclusive CPUs"):
		t.Errorf("the second dedicated crawler was refused (%s: %s): want the message to name node %s and its exclusive CPUs", placed.Reason, placed.Message, first)
	default:
		t.Logf("the second dedicated crawler was refused: %s: %s", placed.Reason, placed.Message)
	}
	if err := cl.Delete(ctx, cvm); err != nil {
		t.Errorf("deleting the second CrawlerVM: %v", err)
	}
	return cvm
}

// checkVCPUGuard takes SCHED_FIFO away from the first vCPU thread of the dedicated
// crawler's QEMU, as KubeVirt 1.8.4 leaves it when a domain's start outlasts
// virt-handler's sync, and waits for the NIC agent's guard to give it back, with a
// VCPUsMadeRealtime Event on the crawler. The policy is taken from KubeVirt's virt-handler
// pod on the node (privileged, the host's PID namespace: the thread IDs the agent names);
// the compute container cannot, though QEMU runs as its user: QEMU holds a capability
// (CAP_NET_BIND_SERVICE) the container's processes do not, and the kernel then asks for
// CAP_SYS_NICE (cap_task_setscheduler). Under software emulation (no "CPU n/KVM"
// threads) there is nothing the guard guards.
func checkVCPUGuard(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM, launcher *corev1.Pod, q qemuProcess) {
	t.Helper()
	if e := vcpuEvent(ctx, t, cvm, time.Time{}, 0); e != nil {
		t.Logf("the NIC agent made the vCPUs realtime after KubeVirt's start: %s", e.Message)
	}
	vcpus, _ := q.vCPUs()
	if len(vcpus) == 0 || !strings.HasSuffix(vcpus[0].Name, "/KVM") {
		t.Logf("the NIC agent's vCPU guard is not checked: the vCPU threads are not KVM's (software emulation), and neither KubeVirt nor the guard makes them realtime")
		return
	}
	name := vcpus[0].Name
	domain := cvm.Namespace + "_" + cvm.Name
	script := `for d in /proc/[0-9]*; do if tr '\0' ' ' < $d/cmdline 2>/dev/null | grep -q -- "-name guest=` + domain + `,"; then p=${d#/proc/}; break; fi; done
[ -n "$p" ] || { echo "no QEMU runs ` + domain + `" >&2; exit 1; }
for t in /proc/$p/task/*; do if [ "$(cat $t/comm)" = "` + name + `" ]; then chrt --other -p 0 ${t##*/} && echo ${t##*/}; exit; fi; done
echo "QEMU $p has no thread ` + name + `" >&2; exit 1`
	handler := handlerPod(ctx, t, launcher.Spec.NodeName)
	start := time.Now()
	args := []string{"exec", "-n", kubevirtNS, handler.Name, "-c", "virt-handler", "--", "sh", "-c", script}
	out, err := exec.Command(kubectl, args...).Output()
	if err != nil {
		t.Fatalf("taking SCHED_FIFO from vCPU thread %q: kubectl %s: %v%s", name, strings.Join(args[:8], " "), err, stderrOf(err))
	}
	tid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("taking SCHED_FIFO from vCPU thread %q: the host's thread ID %q: %v", name, out, err)
	}
	t.Logf("vCPU thread %q (host TID %d) set to SCHED_OTHER", name, tid)
	waitFor(t, 2*time.Minute, "the NIC agent to make the vCPU realtime again", func() (bool, string, error) {
		for _, x := range readQEMU(t, launcher.Namespace, launcher.Name).Threads {
			if x.Name == name {
				return x.Policy == 1, fmt.Sprintf("thread %q has scheduling policy %d", x.Name, x.Policy), nil
			}
		}
		return false, "", fmt.Errorf("vCPU thread %q is gone", name)
	})
	t.Logf("vCPU thread %q SCHED_FIFO again %s after it was taken", name, time.Since(start).Round(time.Second))
	var e *corev1.Event
	waitFor(t, time.Minute, "the crawler's Event "+isov1.EventReasonVCPUsMadeRealtime, func() (bool, string, error) {
		e = vcpuEvent(ctx, t, cvm, start, tid)
		return e != nil, "none yet", nil
	})
	t.Logf("Event %s: %s", e.Reason, e.Message)
}

// vcpuEvent is the NIC agent's latest Event VCPUsMadeRealtime on cvm since start that
// names thread tid (any thread for 0), nil if there is none.
func vcpuEvent(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM, start time.Time, tid int) *corev1.Event {
	t.Helper()
	events := &corev1.EventList{}
	if err := cl.List(ctx, events, client.InNamespace(cvm.Namespace), client.MatchingFields{
		"involvedObject.name": cvm.Name, "reason": isov1.EventReasonVCPUsMadeRealtime,
	}); err != nil {
		t.Fatalf("listing the Events of crawler %s: %v", cvm.Name, err)
	}
	var last *corev1.Event
	for i, e := range events.Items {
		at := e.LastTimestamp.Time
		if at.IsZero() {
			at = e.EventTime.Time
		}
		if at.Before(start.Add(-time.Second)) || (tid != 0 && !strings.Contains(e.Message, fmt.Sprintf("TID %d,", tid))) {
			continue
		}
		last = &events.Items[i]
	}
	return last
}

// checkDomain checks what the running domain does with a dedicated crawler's CPUs and
// memory. From libvirt's domain XML (KubeVirt's pinning): each vCPU pinned to a CPU of
// its own in the exclusive set, the emulator pinned in it apart from the vCPUs, the
// memory backed by 2Mi pages. From QEMU's process: the hugetlb pages it maps hold the
// guest memory. From its threads, what KubeVirt's virt-handler applies itself: the vCPU
// threads run with SCHED_FIFO (realtime) and stay on their CPUs while every other thread
// is moved to the emulator's (its "housekeeping" cgroup). virt-handler finds vCPU threads
// by the name KVM gives them, "CPU n/KVM" (KubeVirt 1.8 pkg/hypervisor/kvm: realtime.go
// VcpuRegex, runtime.go configureHousekeepingCgroup); under software emulation they are
// "CPU n/TCG", so it applies neither: the test then logs what it reads and why.
func checkDomain(t *testing.T, d domain, q qemuProcess, exclusive []int, sizing isov1.Sizing, memory int64) {
	t.Helper()
	t.Logf("domain: vcpupin %v, emulatorpin %v, hugepages %q", d.VCPUPins, d.EmulatorPin, d.HugePageSize)
	if len(d.VCPUPins) != int(sizing.VCPUs) {
		t.Errorf("the domain pins %d vCPUs (%v), status.sizing.vCPUs = %d", len(d.VCPUPins), d.VCPUPins, sizing.VCPUs)
	}
	var pinned []int
	for vcpu, cpus := range d.VCPUPins {
		if len(cpus) != 1 || len(intersect(cpus, exclusive)) != 1 || len(intersect(cpus, pinned)) > 0 {
			t.Errorf("vCPU %d is pinned to CPUs %v: want one CPU of the exclusive set %v of its own", vcpu, cpus, exclusive)
		}
		pinned = append(pinned, cpus...)
	}
	if len(d.EmulatorPin) == 0 || len(intersect(d.EmulatorPin, exclusive)) != len(d.EmulatorPin) || len(intersect(d.EmulatorPin, pinned)) > 0 {
		t.Errorf("the emulator is pinned to CPUs %v: want CPUs of the exclusive set %v apart from the vCPUs' %v", d.EmulatorPin, exclusive, pinned)
	}
	if d.HugePageSize != "2048 KiB" {
		t.Errorf("the domain's memory is backed by pages of %q, want 2048 KiB", d.HugePageSize)
	}
	t.Logf("QEMU PID %d maps %d MiB of hugetlb pages", q.PID, q.HugeBytes>>20)
	if q.HugeBytes < memory {
		t.Errorf("QEMU maps %d MiB of hugetlb pages, want the guest's %d MiB", q.HugeBytes>>20, memory>>20)
	}

	vcpus, emulator := q.vCPUs()
	if len(vcpus) != int(sizing.VCPUs) {
		t.Errorf("QEMU runs %d vCPU threads %+v, status.sizing.vCPUs = %d", len(vcpus), vcpus, sizing.VCPUs)
	}
	var kvm bool
	var vcpuCPUs []int
	for _, th := range vcpus {
		t.Logf("vCPU thread %d %q: CPUs %v, scheduling policy %d", th.TID, th.Name, th.CPUs, th.Policy)
		kvm = strings.HasSuffix(th.Name, "/KVM")
		vcpuCPUs = append(vcpuCPUs, th.CPUs...)
	}
	for _, th := range emulator {
		t.Logf("thread %d %q: CPUs %v", th.TID, th.Name, th.CPUs)
	}
	if !kvm {
		t.Logf("the vCPU threads are QEMU's software emulation's (not \"CPU n/KVM\"): KubeVirt's virt-handler neither gives them SCHED_FIFO nor keeps them out of its housekeeping cgroup, so they run on the emulator's CPU; realtime vCPUs and their separation from the emulator need KVM (docs/dev/e2e.md)")
		return
	}
	for _, th := range vcpus {
		if len(th.CPUs) != 1 || len(intersect(th.CPUs, pinned)) != 1 {
			t.Errorf("vCPU thread %q may run on CPUs %v: want its pinned CPU of %v", th.Name, th.CPUs, pinned)
		}
		if th.Policy != 1 && th.Policy != 2 {
			t.Errorf("vCPU thread %q runs with scheduling policy %d: want SCHED_FIFO (1) or SCHED_RR (2)", th.Name, th.Policy)
		}
	}
	for _, th := range emulator {
		if len(intersect(th.CPUs, vcpuCPUs)) > 0 {
			t.Errorf("QEMU thread %d %q may run on CPUs %v: want the emulator's %v, apart from the vCPUs' %v", th.TID, th.Name, th.CPUs, d.EmulatorPin, vcpuCPUs)
		}
	}
}

func TestSharedCrawlerRunsOnTheSharedPool(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	cvm := crawler(ns, "kiosk", func(c *isov1.CrawlerVM) {
		c.Spec.RPS = 5
		c.Spec.CPUPlacement = isov1.CPUPlacementShared
	})
	runCrawler(ctx, t, cvm, func(vmi *kubevirtv1.VirtualMachineInstance, launcher *corev1.Pod, sizing isov1.Sizing) {
		if cpu := vmi.Spec.Domain.CPU; cpu != nil && (cpu.DedicatedCPUPlacement || cpu.Realtime != nil) {
			t.Errorf("VMI spec.domain.cpu = %+v, want neither dedicated CPUs nor realtime for a shared crawler", cpu)
		}
		if sizing.HostCPUs != 0 {
			t.Errorf("status.sizing.hostCPUs = %d, want 0 for a shared crawler", sizing.HostCPUs)
		}
		// Read from the cgroups: the compute container runs on exactly the node's shared
		// pool, the cpuset of virt-handler (never on a CPU the CPU Manager gave away).
		got := cpuSet(t, launcher.Namespace, launcher.Name, "compute")
		pool := cpuSet(t, kubevirtNS, handlerPod(ctx, t, launcher.Spec.NodeName).Name, "virt-handler")
		t.Logf("compute container cpuset %v, shared pool (virt-handler) %v", got, pool)
		if !slices.Equal(got, pool) {
			t.Errorf("compute container cpuset %v, want the shared pool %v", got, pool)
		}
	}, func(vmi *kubevirtv1.VirtualMachineInstance, launcher *corev1.Pod) *corev1.Pod {
		// A user's view of it and requests to it, through kubectl isochron.
		checkPlugin(ctx, t, cvm, vmi)
		return launcher
	})
}

// runCrawler creates cvm and checks the life of a placeable crawler: Placed, its VMI
// Running on the placed node and Ready, checkCPUs on the running VMI and its launcher,
// a probe Job whose result sets SLOConfirmed, afterProbe (if not nil: it returns the
// crawler's launcher pod then), and deletion removing everything.
func runCrawler(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM, checkCPUs func(*kubevirtv1.VirtualMachineInstance, *corev1.Pod, isov1.Sizing),
	afterProbe func(*kubevirtv1.VirtualMachineInstance, *corev1.Pod) *corev1.Pod) {
	t.Helper()
	if err := cl.Create(ctx, cvm); err != nil {
		t.Fatalf("creating CrawlerVM: %v", err)
	}
	waitFor(t, placeTimeout, "Placed=True", func() (bool, string, error) {
		c := condition(ctx, t, cvm, isov1.ConditionPlaced)
		return c != nil && c.Status == metav1.ConditionTrue && cvm.Status.Placement != nil && cvm.Status.Sizing != nil,
			fmt.Sprintf("Placed: %v", c), nil
	})
	node, sizing := cvm.Status.Placement.Node, *cvm.Status.Sizing
	t.Logf("placed on %s: %d vCPUs, %d exclusive host CPUs, CPU request %s", node, sizing.VCPUs, sizing.HostCPUs, sizing.CPURequest.String())

	vmi := &kubevirtv1.VirtualMachineInstance{}
	waitFor(t, runTimeout, "VMI Running and Ready=True", func() (bool, string, error) {
		if err := cl.Get(ctx, client.ObjectKey{Namespace: cvm.Namespace, Name: cvm.Name}, vmi); err != nil {
			return false, err.Error(), client.IgnoreNotFound(err)
		}
		c := condition(ctx, t, cvm, isov1.ConditionReady)
		return vmi.Status.Phase == kubevirtv1.Running && c != nil && c.Status == metav1.ConditionTrue,
			fmt.Sprintf("VMI phase %s, Ready: %v", vmi.Status.Phase, c), nil
	})
	if vmi.Status.NodeName != node {
		t.Errorf("VMI runs on %s, the CrawlerVM was placed on %s", vmi.Status.NodeName, node)
	}
	launcher := launcherPod(ctx, t, vmi)
	if launcher.Spec.NodeName != node {
		t.Errorf("virt-launcher pod %s runs on %s, want %s", launcher.Name, launcher.Spec.NodeName, node)
	}
	checkCPUs(vmi, launcher, sizing)
	checkCounted(t, cvm, launcher)

	// A probe Job runs, the agent in the guest crawls its window, and the result sets
	// SLOConfirmed. Timing under software emulation means nothing, so the verdict may go
	// either way; what must hold is the path: intervals counted at the gateway, and a
	// verdict judged from them, Confirmed or Refuted.
	// With the agent, a probe that ran before the guest booted counts nothing (NoTraffic)
	// and is tried again after its backoff: wait for one that judged.
	waitFor(t, probeTimeout, "SLOConfirmed set from a probe", func() (bool, string, error) {
		c := condition(ctx, t, cvm, isov1.ConditionSLOConfirmed)
		lp := cvm.Status.LastProbe
		done := c != nil && c.Status != metav1.ConditionUnknown && lp != nil
		if guestRunsAgent && done && lp.Reason == isov1.ReasonNoTraffic {
			done = false
		}
		return done, fmt.Sprintf("SLOConfirmed: %v, lastProbe: %+v", c, lp), nil
	})
	lp := cvm.Status.LastProbe
	t.Logf("probe Job %s: verdict %s, reason %s, %s", lp.Job, lp.Verdict, lp.Reason, lp.Message)
	if lp.Job == "" || lp.Verdict == "" {
		t.Errorf("status.lastProbe = %+v, want the Job's name and a verdict", lp)
	}
	if guestRunsAgent {
		if lp.Verdict != isov1.VerdictConfirmed && lp.Verdict != isov1.VerdictRefuted {
			t.Errorf("verdict %s (%s: %s), want Confirmed or Refuted: the agent's crawl measured", lp.Verdict, lp.Reason, lp.Message)
		}
		// Every request of the agent carried the crawler's token: none was foreign (some
		// would be if the guest's key, from the guest Secret's user data, and the probe
		// pod's, from its probe-key, differed).
		if lp.ForeignRequests != 0 {
			t.Errorf("status.lastProbe.foreignRequests = %d, want 0: the agent's requests carry the crawler's probe credential", lp.ForeignRequests)
		}
		if ie := lp.IntervalError; ie == nil || ie.Intervals == 0 {
			t.Errorf("status.lastProbe.intervalError = %+v, want intervals counted from the agent's requests", ie)
		} else {
			t.Logf("the agent's crawl: %d intervals, p50 %s, at the objective %s", ie.Intervals, ie.P50.Duration, ie.AtObjective.Duration)
		}
		// A judged probe is a sample of the model on its node (docs/contention-model.md).
		cal := &isov1.NodeCalibration{}
		if err := cl.Get(ctx, client.ObjectKey{Name: node}, cal); err != nil {
			t.Errorf("NodeCalibration %s: %v", node, err)
		} else if !slices.ContainsFunc(cal.Status.Samples, func(s isov1.CalibrationSample) bool { return s.Job == lp.Job }) {
			t.Errorf("NodeCalibration %s holds no sample of probe Job %s: %+v", node, lp.Job, cal.Status.Samples)
		} else {
			s := cal.Status.Samples[0]
			t.Logf("NodeCalibration %s: sample of %s, measured %s, predicted %s, ratio %s", node, s.Job, s.Measured.Duration, s.Predicted.Duration, s.Ratio)
		}
	}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: cvm.Namespace, Name: slo.ServiceName(cvm)}, &corev1.Service{}); err != nil {
		t.Errorf("probe Service %s: %v", slo.ServiceName(cvm), err)
	}
	if afterProbe != nil {
		launcher = afterProbe(vmi, launcher)
	}

	// Deleting the CrawlerVM removes everything it created.
	deleteAndWaitGone(ctx, t, cvm, launcher)
}

// checkCounted checks that what placement holds of the node for the crawler (its
// reservation as status.sizing records it, support containers included) is what
// kube-scheduler counts of its running launcher pod (component-helpers' PodRequests, the
// scheduler's NodeResourcesFit function): CPU, memory and 2Mi hugepages.
func checkCounted(t *testing.T, cvm *isov1.CrawlerVM, launcher *corev1.Pod) {
	t.Helper()
	res, ok := inventory.Resident(cvm)
	if !ok {
		t.Errorf("CrawlerVM %s holds no reservation", cvm.Name)
		return
	}
	s, req := res.Sizing, resourcehelper.PodRequests(launcher, resourcehelper.PodResourcesOptions{})
	hp := req[corev1.ResourceHugePagesPrefix+"2Mi"]
	t.Logf("placement holds %dm CPU (support containers %dm), %d bytes of memory (support containers %d), %d of hugepages; kube-scheduler counts the launcher's %dm, %d, %d",
		s.PodCPUMilli(), s.SupportCPUMilli, s.PodMemoryBytes(), s.SupportMemoryBytes, s.HugepagesBytes, req.Cpu().MilliValue(), req.Memory().Value(), hp.Value())
	if s.PodCPUMilli() != req.Cpu().MilliValue() || s.PodMemoryBytes() != req.Memory().Value() || s.HugepagesBytes != hp.Value() {
		for _, c := range append(launcher.Spec.InitContainers, launcher.Spec.Containers...) {
			t.Logf("launcher container %s requests %v", c.Name, c.Resources.Requests)
		}
		t.Errorf("placement counts the crawler otherwise than kube-scheduler counts its launcher pod %s", launcher.Name)
	}
}

// noDedicatedNode says why no node could run a dedicated crawler of hostCPUs exclusive
// CPUs ("" if one can): it needs KubeVirt's labels for the static CPU Manager and
// realtime, and that many allocatable CPUs (the kubelet keeps its reserved CPUs out).
func noDedicatedNode(ctx context.Context, t *testing.T, hostCPUs int64) string {
	t.Helper()
	nodes := &corev1.NodeList{}
	if err := cl.List(ctx, nodes); err != nil {
		t.Fatalf("listing nodes: %v", err)
	}
	var why []string
	for _, n := range nodes.Items {
		var lacks []string
		for _, l := range []string{kubevirtv1.CPUManager, kubevirtv1.RealtimeLabel} {
			if n.Labels[l] != "true" {
				lacks = append(lacks, "label "+l+"=true")
			}
		}
		if cpu := n.Status.Allocatable[corev1.ResourceCPU]; cpu.MilliValue() < hostCPUs*1000 {
			lacks = append(lacks, fmt.Sprintf("CPUs (%s allocatable)", cpu.String()))
		}
		if len(lacks) == 0 {
			return ""
		}
		why = append(why, n.Name+" lacks "+strings.Join(lacks, ", "))
	}
	return strings.Join(why, "; ")
}

func intersect(a, b []int) []int {
	var both []int
	for _, x := range a {
		for _, y := range b {
			if x == y {
				both = append(both, x)
			}
		}
	}
	return both
}

func TestUnplaceableCrawlerIsReportedAndCreatesNothing(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	cvm := crawler(ns, "nowhere", func(c *isov1.CrawlerVM) {
		c.Spec.Placement = &isov1.Placement{NodeSelector: map[string]string{"isochron.io/e2e": "no-such-node"}}
	})
	if err := cl.Create(ctx, cvm); err != nil {
		t.Fatalf("creating CrawlerVM: %v", err)
	}
	waitFor(t, placeTimeout, "Placed=False and Stalled=True", func() (bool, string, error) {
		placed := condition(ctx, t, cvm, isov1.ConditionPlaced)
		stalled := meta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionStalled)
		ok := placed != nil && placed.Status == metav1.ConditionFalse && stalled != nil && stalled.Status == metav1.ConditionTrue
		return ok, fmt.Sprintf("Placed: %v, Stalled: %v", placed, stalled), nil
	})
	t.Logf("Placed=False: %s", meta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionPlaced).Message)
	if cvm.Status.Placement != nil {
		t.Errorf("status.placement = %+v, want none", cvm.Status.Placement)
	}
	// Nothing is created, now or a little later.
	for i := 0; i < 8; i++ {
		if left := leftovers(ctx, t, cvm); len(left) > 0 {
			t.Fatalf("an unplaceable crawler created %v", left)
		}
		time.Sleep(2 * time.Second)
	}
}

// crawler builds a small dedicated CrawlerVM named name in ns.
func crawler(ns, name string, opts ...func(*isov1.CrawlerVM)) *isov1.CrawlerVM {
	c := &isov1.CrawlerVM{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: isov1.CrawlerVMSpec{
			RPS: 50,
			// A 90% objective: its sample floor (10 intervals) is met by a one-minute probe
			// at any of the tests' rates, so a probe counts enough to judge.
			ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}, Objective: "90"},
			Guest:       isov1.Guest{Image: guestImage, Memory: resource.MustParse("256Mi")},
			// A minute: the agent asks for a window every 5 s.
			Probe: &isov1.Probe{Duration: &metav1.Duration{Duration: time.Minute}},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// testNamespace creates a namespace for t, saves artifacts if t failed, and deletes it.
func testNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + rand.String(6)}}
	if err := cl.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			saveArtifacts(t.Name(), ns.Name)
		}
		if !keep {
			_ = cl.Delete(context.Background(), ns)
		}
	})
	return ns.Name
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string, error)) {
	t.Helper()
	if err := poll(context.Background(), timeout, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// condition re-reads cvm and returns its condition of type typ.
func condition(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM, typ string) *metav1.Condition {
	t.Helper()
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cvm), cvm); err != nil {
		t.Fatalf("reading CrawlerVM: %v", err)
	}
	return meta.FindStatusCondition(cvm.Status.Conditions, typ)
}

// deleteAndWaitGone deletes cvm and waits until everything isochron created for it, and
// its VMI's virt-launcher pod, is gone.
func deleteAndWaitGone(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM, launcher *corev1.Pod) {
	t.Helper()
	if err := cl.Delete(ctx, cvm); err != nil {
		t.Fatalf("deleting CrawlerVM: %v", err)
	}
	waitGone(ctx, t, cvm, launcher)
}

// waitGone waits until everything isochron created for the deleted cvm, and its VMI's
// virt-launcher pod (nil: every virt-launcher pod of the crawler), is gone.
func waitGone(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM, launcher *corev1.Pod) {
	t.Helper()
	waitFor(t, deleteTimeout, "everything of "+cvm.Name+" deleted", func() (bool, string, error) {
		left := leftovers(ctx, t, cvm)
		if launcher != nil {
			if err := cl.Get(ctx, client.ObjectKeyFromObject(launcher), &corev1.Pod{}); err == nil {
				left = append(left, "pod/"+launcher.Name)
			}
		} else {
			pods := &corev1.PodList{}
			if err := cl.List(ctx, pods, client.InNamespace(cvm.Namespace), client.MatchingLabels{isov1.LabelCrawlerVM: cvm.Name, kubevirtv1.AppLabel: "virt-launcher"}); err != nil {
				return false, "", err
			}
			for _, p := range pods.Items {
				left = append(left, "pod/"+p.Name)
			}
		}
		return len(left) == 0, fmt.Sprintf("still there: %v", left), nil
	})
}

// leftovers lists what isochron created for cvm and still exists: its VM and VMI, probe
// Jobs, probe Service and guest Secret.
func leftovers(ctx context.Context, t *testing.T, cvm *isov1.CrawlerVM) []string {
	t.Helper()
	var left []string
	vms := &kubevirtv1.VirtualMachineList{}
	if err := cl.List(ctx, vms, client.InNamespace(cvm.Namespace), client.MatchingLabels{isov1.LabelCrawlerVM: cvm.Name}); err != nil {
		t.Fatalf("listing VMs: %v", err)
	}
	for _, v := range vms.Items {
		left = append(left, "vm/"+v.Name)
	}
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	if err := cl.List(ctx, vmis, client.InNamespace(cvm.Namespace), client.MatchingLabels{isov1.LabelCrawlerVM: cvm.Name}); err != nil {
		t.Fatalf("listing VMIs: %v", err)
	}
	for _, v := range vmis.Items {
		left = append(left, "vmi/"+v.Name)
	}
	jobs := &batchv1.JobList{}
	if err := cl.List(ctx, jobs, client.InNamespace(cvm.Namespace), client.MatchingLabels(slo.Selector(cvm))); err != nil {
		t.Fatalf("listing Jobs: %v", err)
	}
	for _, j := range jobs.Items {
		left = append(left, "job/"+j.Name)
	}
	err := cl.Get(ctx, client.ObjectKey{Namespace: cvm.Namespace, Name: slo.ServiceName(cvm)}, &corev1.Service{})
	switch {
	case err == nil:
		left = append(left, "service/"+slo.ServiceName(cvm))
	case !apierrors.IsNotFound(err):
		t.Fatalf("reading the probe Service: %v", err)
	}
	err = cl.Get(ctx, client.ObjectKey{Namespace: cvm.Namespace, Name: render.GuestSecretName(cvm)}, &corev1.Secret{})
	switch {
	case err == nil:
		left = append(left, "secret/"+render.GuestSecretName(cvm))
	case !apierrors.IsNotFound(err):
		t.Fatalf("reading the guest Secret: %v", err)
	}
	return left
}

// launcherPod returns the running virt-launcher pod of vmi.
func launcherPod(ctx context.Context, t *testing.T, vmi *kubevirtv1.VirtualMachineInstance) *corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := cl.List(ctx, pods, client.InNamespace(vmi.Namespace), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
		t.Fatalf("listing virt-launcher pods: %v", err)
	}
	for i := range pods.Items {
		if pods.Items[i].Status.Phase == corev1.PodRunning {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no running virt-launcher pod of VMI %s (label %s=%s)", vmi.Name, kubevirtv1.CreatedByLabel, vmi.UID)
	return nil
}

// handlerPod returns the virt-handler pod on node: BestEffort/Burstable, so its cpuset
// is the node's shared pool.
func handlerPod(ctx context.Context, t *testing.T, node string) *corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := cl.List(ctx, pods, client.InNamespace(kubevirtNS), client.MatchingLabels{kubevirtv1.AppLabel: "virt-handler"}); err != nil {
		t.Fatalf("listing virt-handler pods: %v", err)
	}
	for i := range pods.Items {
		if pods.Items[i].Spec.NodeName == node {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no virt-handler pod on node %s in namespace %s", node, kubevirtNS)
	return nil
}

// cpuSet reads the CPUs a container may run on from inside it: its own cgroup's cpuset
// (v2, else v1), found by the path /proc/self/cgroup gives (a privileged container may
// see the host's cgroup tree, whose root holds every CPU: virt-handler on a node booted
// by systemd), else the kernel's Cpus_allowed_list of the reading process.
func cpuSet(t *testing.T, ns, pod, container string) []int {
	t.Helper()
	// KubeVirt moves a dedicated VMI's non-vCPU threads into a child cgroup of the compute
	// container, "housekeeping", holding the emulator's CPU; a process exec'd into the
	// container may join it: its parent is the container's. Under a cgroup namespace (the
	// node VMs' cgroup v2) the container's own cgroup is "/", so housekeeping is
	// "/housekeeping" and the container's is /sys/fs/cgroup itself.
	script := `if grep -q '^0::' /proc/self/cgroup; then p=$(sed -n 's/^0:://p' /proc/self/cgroup); p=${p%/}; p=${p%/housekeeping}
f=/sys/fs/cgroup$p/cpuset.cpus.effective; if [ -r "$f" ]; then cat "$f"; exit; fi; fi
p=$(sed -n 's/^[0-9]*:cpuset://p' /proc/self/cgroup)
if [ -n "$p" ] && [ -r "/sys/fs/cgroup/cpuset$p/cpuset.effective_cpus" ]; then cat "/sys/fs/cgroup/cpuset$p/cpuset.effective_cpus"; exit; fi
sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status`
	args := []string{"exec", "-n", ns, pod, "-c", container, "--", "sh", "-c", script}
	out, err := exec.Command(kubectl, args...).Output()
	if err != nil {
		t.Fatalf("kubectl %s: %v%s", strings.Join(args[:6], " "), err, stderrOf(err))
	}
	cpus, err := parseCPUList(strings.TrimSpace(string(out)))
	if err != nil || len(cpus) == 0 {
		t.Fatalf("cpuset of %s/%s container %s: %q: %v", ns, pod, container, out, err)
	}
	return cpus
}
