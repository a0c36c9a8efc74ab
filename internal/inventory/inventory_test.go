package inventory

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/sizing"
)

func pod(node string, phase corev1.PodPhase, labels map[string]string, containers ...corev1.ResourceRequirements) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase},
	}
	for _, r := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Resources: r})
	}
	return p
}

func res(cpuReq, memReq, cpuLim, memLim string) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for name, v := range map[corev1.ResourceName][2]string{corev1.ResourceCPU: {cpuReq, cpuLim}, corev1.ResourceMemory: {memReq, memLim}} {
		if v[0] != "" {
			r.Requests[name] = resource.MustParse(v[0])
		}
		if v[1] != "" {
			r.Limits[name] = resource.MustParse(v[1])
		}
	}
	return r
}

// Held counts what kube-scheduler's NodeResourcesFit counts, less crawlers' launchers.
func TestHeld(t *testing.T) {
	launcher := map[string]string{isov1.LabelCrawlerVM: "a", kubevirtv1.AppLabel: "virt-launcher"}
	probe := map[string]string{isov1.LabelCrawlerVM: "a"} // a probe Job's pod carries the crawler's label too
	withInit := pod("n3", corev1.PodRunning, nil, res("500m", "1Gi", "", ""))
	withInit.Spec.InitContainers = []corev1.Container{{Resources: res("2", "512Mi", "", "")}} // init runs first: the larger request counts
	withOverhead := pod("n3", corev1.PodRunning, nil, res("1", "1Gi", "1", "1Gi"))
	withOverhead.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	hugepages := pod("n3", corev1.PodRunning, nil, corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), hugepages2Mi: resource.MustParse("2Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), hugepages2Mi: resource.MustParse("2Gi")},
	})
	pods := []corev1.Pod{
		pod("n1", corev1.PodRunning, nil, res("2", "1Gi", "2", "1Gi")),                              // Guaranteed, 2 whole CPUs
		pod("n1", corev1.PodRunning, nil, res("1", "1Gi", "1", "1Gi"), res("3", "1Gi", "3", "1Gi")), // two pinned containers
		pod("n1", corev1.PodRunning, nil, res("1500m", "1Gi", "1500m", "1Gi")),                      // Guaranteed, fractional: shared pool
		pod("n1", corev1.PodRunning, nil, res("2", "1Gi", "4", "1Gi")),                              // Burstable: shared, requests count
		pod("n1", corev1.PodRunning, nil, res("2", "1Gi", "2", "2Gi")),                              // memory request != limit: Burstable
		pod("n2", corev1.PodSucceeded, nil, res("4", "1Gi", "4", "1Gi")),                            // finished
		pod("", corev1.PodPending, nil, res("4", "1Gi", "4", "1Gi")),                                // not scheduled
		pod("n2", corev1.PodRunning, launcher, res("5", "1Gi", "5", "1Gi")),                         // a crawler's virt-launcher: its reservation counts
		pod("n2", corev1.PodRunning, probe, res("1", "256Mi", "1", "256Mi")),                        // a crawler's probe pod: counted
		pod("n2", corev1.PodPending, nil, res("250m", "", "", "")),                                  // bound, not started: counted
		withInit, withOverhead, hugepages,
	}
	const gi, mi = int64(1) << 30, int64(1) << 20
	want := map[string]placement.Held{
		"n1": {CPUMilli: 11500, ExclusiveMilli: 6000, MemoryBytes: 6 * gi},
		"n2": {CPUMilli: 1250, ExclusiveMilli: 1000, MemoryBytes: 256 * mi},
		"n3": {CPUMilli: 2000 + 1100 + 1000, ExclusiveMilli: 1000 + 1000, MemoryBytes: gi + gi + 64*mi + gi, HugepagesBytes: 2 * gi},
	}
	if diff := cmp.Diff(want, Held(pods)); diff != "" {
		t.Errorf("Held() (-want +got):\n%s", diff)
	}
}

func profile(name string, precedence int32, labels map[string]string) isov1.ContentionProfile {
	return isov1.ContentionProfile{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: isov1.ContentionProfileSpec{
			NodeSelector: metav1.LabelSelector{MatchLabels: labels},
			Precedence:   precedence,
			Host:         &isov1.HostProfile{SchedulerGranularity: &metav1.Duration{Duration: time.Duration(precedence+1) * time.Millisecond}},
		},
	}
}

func TestProfileFor(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"class": "rt", "zone": "a"}}}
	cases := map[string]struct {
		profiles []isov1.ContentionProfile
		want     string
	}{
		"none":                          {want: ""},
		"no selector matches":           {profiles: []isov1.ContentionProfile{profile("p", 0, map[string]string{"class": "gpu"})}, want: ""},
		"the highest precedence wins":   {profiles: []isov1.ContentionProfile{profile("b", 5, map[string]string{"class": "rt"}), profile("a", 1, map[string]string{"zone": "a"})}, want: "b"},
		"equal precedence: first name":  {profiles: []isov1.ContentionProfile{profile("z", 1, map[string]string{"class": "rt"}), profile("m", 1, map[string]string{"zone": "a"})}, want: "m"},
		"an empty selector selects all": {profiles: []isov1.ContentionProfile{profile("all", 0, nil)}, want: "all"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ""
			if p := ProfileFor(node, tc.profiles); p != nil {
				got = p.Name
			}
			if got != tc.want {
				t.Errorf("ProfileFor() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNodeTakesReservedCPUsFromCapacityMinusAllocatable(t *testing.T) {
	n := &corev1.Node{Status: corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("14"), "hugepages-2Mi": resource.MustParse("8Gi")},
	}}
	got := Node(n, nil, placement.Held{CPUMilli: 3000, ExclusiveMilli: 3000}, nil)
	if got.CapacityCPUs != 16 || got.CPUMilli != 14000 || got.Params.HostReservedCPUs != 2 || got.HugepagesBytes != 8<<30 || got.Held.ExclusiveMilli != 3000 {
		t.Errorf("Node() = %+v", got)
	}
	reserved := resource.MustParse("500m")
	p := profile("p", 0, nil)
	p.Spec.Host.ReservedCPUs = &reserved
	if got := Node(n, []isov1.ContentionProfile{p}, placement.Held{}, nil).Params; got.HostReservedCPUs != 0.5 || got.SchedulerGranularity != time.Millisecond {
		t.Errorf("a profile's reservedCPUs and granularity: got %+v", got)
	}
	if got := Node(n, nil, placement.Held{}, nil).Params; got.CPUPerRequest != 0 || got.SchedulerGranularity != 0 {
		t.Errorf("without a profile every other parameter stays unset for the model's defaults: %+v", got)
	}
}

func TestLauncherUnschedulable(t *testing.T) {
	pending := func(name string, conds ...corev1.PodCondition) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: conds}}
	}
	unsched := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/3 nodes are available: 1 Insufficient cpu."}
	bound := pending("bound", unsched)
	bound.Spec.NodeName = "rt-1"
	cases := []struct {
		name     string
		pods     []corev1.Pod
		wantName string
	}{
		{name: "none", pods: nil},
		{name: "pending, not judged yet", pods: []corev1.Pod{pending("a")}},
		{name: "scheduling gated", pods: []corev1.Pod{pending("a", corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated})}},
		{name: "unschedulable", pods: []corev1.Pod{pending("a"), pending("b", unsched)}, wantName: "b"},
		{name: "bound since", pods: []corev1.Pod{bound}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name, msg, ok := LauncherUnschedulable(tc.pods)
			if name != tc.wantName || ok != (tc.wantName != "") {
				t.Fatalf("got %q %v, want %q", name, ok, tc.wantName)
			}
			if ok && msg != unsched.Message {
				t.Errorf("message %q, want the scheduler's", msg)
			}
		})
	}
}

func TestResidentCarriesTheNICAgentsClass(t *testing.T) {
	ms := func(n int) metav1.Duration { return metav1.Duration{Duration: time.Duration(n) * time.Millisecond} }
	crawler := func(status *isov1.RTNICStatus) *isov1.CrawlerVM {
		return &isov1.CrawlerVM{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "a"},
			Spec:       isov1.CrawlerVMSpec{RPS: 100, RTNIC: &isov1.RTNIC{NetworkName: "rt-net", Deadline: ms(10), MinBandwidth: resource.MustParse("10M")}},
			Status: isov1.CrawlerVMStatus{
				Sizing:    &isov1.Sizing{VCPUs: 1, HostCPUs: 2, CPURequest: resource.MustParse("2"), Memory: resource.MustParse("1Gi")},
				Placement: &isov1.PlacementStatus{Node: "n1"},
				RTNIC:     status,
			},
		}
	}
	cases := map[string]struct {
		status *isov1.RTNICStatus
		want   int
	}{
		"no feedback yet":                       {nil, 0},
		"raised one class":                      {&isov1.RTNICStatus{Class: "EF", Raise: 1, Deadline: ms(10)}, 1},
		"raised for a deadline no longer asked": {&isov1.RTNICStatus{Class: "EF", Raise: 1, Deadline: ms(50)}, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, ok := Resident(crawler(tc.status))
			if !ok || r.Workload.NIC == nil || r.Workload.NIC.Raise != tc.want {
				t.Fatalf("Resident = %+v (%v), want NIC raised %d", r.Workload.NIC, ok, tc.want)
			}
		})
	}
}

// A size goes into status.sizing and comes back as the same reservation, VFIO memory
// and support containers included: the ledger rebuilt from status counts what the decision counted.
func TestSizingStatusRoundTrips(t *testing.T) {
	const gi = int64(1) << 30
	for name, r := range map[string]sizing.Result{
		"dedicated":              {VCPUs: 2, HostCPUs: 3, CPURequestMilli: 2000, MemoryBytes: gi, HugepagesBytes: gi},
		"shared":                 {VCPUs: 1, CPURequestMilli: 150, MemoryBytes: gi},
		"dedicated with SR-IOV":  {VCPUs: 2, HostCPUs: 3, CPURequestMilli: 2000, MemoryBytes: gi, HugepagesBytes: gi, VFIOBytes: sizing.VFIOOverheadBytes},
		"shared with SR-IOV too": {VCPUs: 1, CPURequestMilli: 150, MemoryBytes: gi, VFIOBytes: sizing.VFIOOverheadBytes},
		"dedicated with support": {VCPUs: 2, HostCPUs: 3, CPURequestMilli: 2000, MemoryBytes: gi, HugepagesBytes: gi, SupportCPUMilli: 35, SupportMemoryBytes: 140_000_000},
		"shared with support":    {VCPUs: 1, CPURequestMilli: 150, MemoryBytes: gi, SupportCPUMilli: 7, SupportMemoryBytes: 37_000_000},
	} {
		t.Run(name, func(t *testing.T) {
			c := &isov1.CrawlerVM{
				ObjectMeta: metav1.ObjectMeta{Namespace: "bms", Name: "a"},
				Spec:       isov1.CrawlerVMSpec{RPS: 100},
				Status:     isov1.CrawlerVMStatus{Sizing: SizingStatus(r), Placement: &isov1.PlacementStatus{Node: "n1"}},
			}
			res, ok := Resident(c)
			if !ok {
				t.Fatal("not resident")
			}
			if diff := cmp.Diff(r, res.Sizing); diff != "" {
				t.Errorf("Resident(SizingStatus(r)).Sizing (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLauncherRejected(t *testing.T) {
	pod := func(name, vmi, node string, phase corev1.PodPhase, reason string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kubevirtv1.CreatedByLabel: vmi}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase, Reason: reason, Message: "m"}}
	}
	cases := map[string]struct {
		pods []corev1.Pod
		want string // the pod found, "" for none
	}{
		"the CPU Manager cannot pin it":  {pods: []corev1.Pod{pod("a", "v1", "n1", corev1.PodFailed, "TopologyAffinityError")}, want: "a"},
		"out of CPU at admission":        {pods: []corev1.Pod{pod("a", "v1", "n1", corev1.PodFailed, "OutOfcpu")}, want: "a"},
		"evicted under node pressure":    {pods: []corev1.Pod{pod("a", "v1", "n1", corev1.PodFailed, "Evicted")}, want: "a"},
		"a guest that failed is no node": {pods: []corev1.Pod{pod("a", "v1", "n1", corev1.PodFailed, "")}},
		"a running launcher":             {pods: []corev1.Pod{pod("a", "v1", "n1", corev1.PodRunning, "")}},
		"another VMI's":                  {pods: []corev1.Pod{pod("a", "v0", "n1", corev1.PodFailed, "OutOfcpu")}},
		"never bound":                    {pods: []corev1.Pod{pod("a", "v1", "", corev1.PodFailed, "OutOfcpu")}},
	}
	for name, tc := range cases {
		got, node, _, _, ok := LauncherRejected(tc.pods, "v1", "v2")
		if got != tc.want || ok != (tc.want != "") || (ok && node != "n1") {
			t.Errorf("%s: LauncherRejected = %q on %q, %v; want %q", name, got, node, ok, tc.want)
		}
	}
}

func TestUnschedulableNode(t *testing.T) {
	since := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	pending := func(msg string, tolerations ...corev1.Toleration) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-a"},
			Spec: corev1.PodSpec{Tolerations: tolerations},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: msg, LastTransitionTime: metav1.NewTime(since)}}}}
	}
	node := func(cordoned bool, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rt-1"}, Spec: corev1.NodeSpec{Unschedulable: cordoned, Taints: taints}}
	}
	maint := corev1.Taint{Key: "maintenance", Value: "yes", Effect: corev1.TaintEffectNoSchedule}
	prefer := corev1.Taint{Key: "soon", Effect: corev1.TaintEffectPreferNoSchedule}
	bound := pending("")
	bound.Spec.NodeName = "rt-1"
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		node *corev1.Node
		want string // "" for not the node's reason
	}{
		{"cordoned", []corev1.Pod{pending("0/3 nodes are available: 1 node(s) were unschedulable")}, node(true), "node rt-1 is cordoned"},
		{"an untolerated taint", []corev1.Pod{pending("untolerated taint")}, node(false, prefer, maint), "has the taint maintenance=yes:NoSchedule"},
		{"a tolerated taint, and nothing else of the node's", []corev1.Pod{pending("didn't match pod affinity rules",
			corev1.Toleration{Key: "maintenance", Operator: corev1.TolerationOpExists})}, node(false, maint), ""},
		{"its CPUs taken (a preemptor)", []corev1.Pod{pending("0/3 nodes are available: 1 Insufficient cpu")}, node(false), "no longer has what the reservation counted on"},
		{"only a PreferNoSchedule taint", []corev1.Pod{pending("volume node affinity conflict")}, node(false, prefer), ""},
		{"the node is gone (the lost-node path's)", []corev1.Pod{pending("")}, nil, ""},
		{"a pod already bound", []corev1.Pod{bound}, node(true), ""},
		{"no pod", nil, node(true), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, why, at, ok := UnschedulableNode(tc.pods, tc.node)
			if ok != (tc.want != "") || !strings.Contains(why, tc.want) {
				t.Fatalf("UnschedulableNode = %q, %q, %v; want %v and %q", pod, why, ok, tc.want != "", tc.want)
			}
			if ok && (pod != "virt-launcher-a" || !at.Equal(since)) {
				t.Errorf("pod %q since %v; want virt-launcher-a since %v", pod, at, since)
			}
		})
	}
}
