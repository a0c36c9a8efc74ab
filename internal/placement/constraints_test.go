package placement

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"isochron.io/isochron/internal/sizing"
)

func TestConstraint(t *testing.T) {
	rt := map[string]string{kubevirtv1.NodeSchedulable: "true", kubevirtv1.CPUManager: "true", kubevirtv1.RealtimeLabel: "true", "pool": "rt"}
	kv := map[string]string{kubevirtv1.NodeSchedulable: "true"}
	taint := corev1.Taint{Key: "rt", Value: "only", Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name   string
		node   Node
		req    Request
		want   misfit
		reason string
	}{
		{"fits", Node{Name: "a", Labels: rt}, Request{}, fitsNode, ""},
		{"refuted there", Node{Name: "a", Labels: rt}, Request{Avoid: []Avoid{{Node: "a", Why: "a probe refuted the crawler's SLO there"}}}, misfitAvoided, "a probe refuted the crawler's SLO there"},
		{"not the node a move asks for", Node{Name: "a", Labels: rt}, Request{MoveTo: map[string]string{corev1.LabelHostname: "b"}, Avoid: []Avoid{{Node: "a", Why: "the node it runs on"}}},
			misfitNotAskedFor, "not the node the move asks for (kubernetes.io/hostname=b)"},
		{"the node a move asks for", Node{Name: "a", Labels: map[string]string{kubevirtv1.NodeSchedulable: "true", kubevirtv1.CPUManager: "true", kubevirtv1.RealtimeLabel: "true", corev1.LabelHostname: "a"}},
			Request{MoveTo: map[string]string{corev1.LabelHostname: "a"}}, fitsNode, ""},
		{"asked for, cordoned", Node{Name: "a", Labels: map[string]string{corev1.LabelHostname: "a"}, Unschedulable: true},
			Request{MoveTo: map[string]string{corev1.LabelHostname: "a"}}, misfitCordoned, "node is cordoned"},
		{"cordoned", Node{Name: "a", Labels: rt, Unschedulable: true}, Request{}, misfitCordoned, "node is cordoned"},
		{"selector", Node{Name: "a", Labels: rt}, Request{NodeSelector: map[string]string{"pool": "other"}}, misfitSelector, "spec.placement.nodeSelector does not match"},
		{"taint", Node{Name: "a", Labels: rt, Taints: []corev1.Taint{taint}}, Request{}, misfitTaint, "taint rt=only:NoSchedule not tolerated by spec.placement.tolerations"},
		{"taint tolerated", Node{Name: "a", Labels: rt, Taints: []corev1.Taint{taint}},
			Request{Tolerations: []corev1.Toleration{{Key: "rt", Operator: corev1.TolerationOpExists}}}, fitsNode, ""},
		{"prefer-no-schedule ignored", Node{Name: "a", Labels: rt, Taints: []corev1.Taint{{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule}}}, Request{}, fitsNode, ""},
		{"no KubeVirt", Node{Name: "a", Labels: map[string]string{kubevirtv1.CPUManager: "true", kubevirtv1.RealtimeLabel: "true"}}, Request{}, misfitNoKubeVirt,
			"KubeVirt runs no VMs here (label kubevirt.io/schedulable=true: no ready virt-handler)"},
		{"KubeVirt's handler gone", Node{Name: "a", Labels: map[string]string{kubevirtv1.NodeSchedulable: "false"}}, Request{Demand: sizing.Demand{RPS: 1}}, misfitNoKubeVirt,
			"KubeVirt runs no VMs here (label kubevirt.io/schedulable=true: no ready virt-handler)"},
		{"no CPU Manager", Node{Name: "a", Labels: map[string]string{kubevirtv1.NodeSchedulable: "true", kubevirtv1.RealtimeLabel: "true"}}, Request{}, misfitNoCPUManager,
			"no static CPU Manager (label kubevirt.io/cpumanager=true) for cpuPlacement dedicated"},
		{"no realtime", Node{Name: "a", Labels: map[string]string{kubevirtv1.NodeSchedulable: "true", kubevirtv1.CPUManager: "true"}}, Request{}, misfitNoRealtime,
			"no realtime support (label kubevirt.io/realtime=true) for the realtime guest of cpuPlacement dedicated"},
		{"shared needs neither", Node{Name: "a", Labels: kv}, Request{Demand: sizing.Demand{RPS: 1}}, fitsNode, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Key = "bms/c"
			if req.Demand.RPS == 0 {
				req.Demand = sizing.Demand{RPS: 1, Dedicated: true}
			}
			p := NewPlanner([]Node{tc.node}, nil)
			d := p.newDecision(req)
			if got := constraint(d, &p.nodes[0]); got != tc.want {
				t.Fatalf("constraint = %d, want %d", got, tc.want)
			}
			if got := tc.want.reason(d, &p.nodes[0]); got != tc.reason {
				t.Errorf("reason = %q, want %q", got, tc.reason)
			}
			if p.allowed(d, 0) != (tc.want == fitsNode) {
				t.Errorf("allowed = %v, want %v", p.allowed(d, 0), tc.want == fitsNode)
			}
			// Admits, which picks the waiting crawlers a node can help, is the same rule.
			if got := Admits(&tc.node, req); got != (tc.want == fitsNode) {
				t.Errorf("Admits = %v, want %v", got, tc.want == fitsNode)
			}
		})
	}
}
