package inventory

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
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

func TestHeldExclusiveMilli(t *testing.T) {
	pods := []corev1.Pod{
		pod("n1", corev1.PodRunning, nil, res("2", "1Gi", "2", "1Gi")),                                          // Guaranteed, 2 whole CPUs
		pod("n1", corev1.PodRunning, nil, res("1", "1Gi", "1", "1Gi"), res("3", "1Gi", "3", "1Gi")),             // two pinned containers
		pod("n1", corev1.PodRunning, nil, res("1500m", "1Gi", "1500m", "1Gi")),                                  // Guaranteed, fractional: shared pool
		pod("n1", corev1.PodRunning, nil, res("2", "1Gi", "4", "1Gi")),                                          // Burstable
		pod("n1", corev1.PodRunning, nil, res("2", "1Gi", "2", "2Gi")),                                          // memory request != limit: Burstable
		pod("n2", corev1.PodSucceeded, nil, res("4", "1Gi", "4", "1Gi")),                                        // finished
		pod("", corev1.PodPending, nil, res("4", "1Gi", "4", "1Gi")),                                            // not scheduled
		pod("n2", corev1.PodRunning, map[string]string{isov1.LabelCrawlerVM: "a"}, res("5", "1Gi", "5", "1Gi")), // a crawler's virt-launcher
		pod("n2", corev1.PodRunning, nil, res("1", "256Mi", "1", "256Mi")),
	}
	want := map[string]int64{"n1": 6000, "n2": 1000}
	if diff := cmp.Diff(want, HeldExclusiveMilli(pods)); diff != "" {
		t.Errorf("HeldExclusiveMilli() (-want +got):\n%s", diff)
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
	got := Node(n, nil, 3000, nil)
	if got.CapacityCPUs != 16 || got.CPUMilli != 14000 || got.Params.HostReservedCPUs != 2 || got.HugepagesBytes != 8<<30 || got.HeldExclusiveMilli != 3000 {
		t.Errorf("Node() = %+v", got)
	}
	reserved := resource.MustParse("500m")
	p := profile("p", 0, nil)
	p.Spec.Host.ReservedCPUs = &reserved
	if got := Node(n, []isov1.ContentionProfile{p}, 0, nil).Params; got.HostReservedCPUs != 0.5 || got.SchedulerGranularity != time.Millisecond {
		t.Errorf("a profile's reservedCPUs and granularity: got %+v", got)
	}
	if got := Node(n, nil, 0, nil).Params; got.CPUPerRequest != 0 || got.SchedulerGranularity != 0 {
		t.Errorf("without a profile every other parameter stays unset for the model's defaults: %+v", got)
	}
}
