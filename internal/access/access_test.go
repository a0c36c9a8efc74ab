package access

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/placement"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		data map[string]string
		err  string
	}{
		{"empty", map[string]string{}, ""},
		{"every kind", map[string]string{"tolerations": "example.com/gpu, *", "tolerations.team-a": "team-a/dedicated", "nodeSelector.team-a": "pool=a, rt=yes"}, ""},
		{"unknown key", map[string]string{"toleration": "x"}, `key "toleration": unknown`},
		{"not a namespace", map[string]string{"tolerations.Team_A": "x"}, "is not a namespace name"},
		{"not a taint key", map[string]string{"tolerations": "bad key"}, "is not a taint key"},
		{"a selector for everyone", map[string]string{"nodeSelector": "a=b"}, "a node selector is a namespace's"},
		{"not a label", map[string]string{"nodeSelector.team-a": "pool"}, "is not a label"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.data)
			if (err != nil) != (tc.err != "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("Parse: %v; want %q", err, tc.err)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	rules, err := Parse(map[string]string{"tolerations": "shared/maintenance", "tolerations.team-a": "team-a/dedicated", "tolerations.ops": "*", "nodeSelector.team-b": "pool=b"})
	if err != nil {
		t.Fatal(err)
	}
	tol := func(key string) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	}
	for _, tc := range []struct {
		name, ns string
		p        *isov1.Placement
		err      string // "" for allowed
	}{
		{"no placement", "team-a", nil, ""},
		{"a key every namespace may tolerate", "team-b", &isov1.Placement{Tolerations: []corev1.Toleration{tol("shared/maintenance")}}, ""},
		{"its own key", "team-a", &isov1.Placement{Tolerations: []corev1.Toleration{tol("team-a/dedicated")}}, ""},
		{"another namespace's key", "team-b", &isov1.Placement{Tolerations: []corev1.Toleration{tol("shared/maintenance"), tol("team-a/dedicated")}},
			`spec.placement.tolerations[1] tolerates taint key "team-a/dedicated", and namespace team-b may tolerate only the taint keys shared/maintenance`},
		{"every taint", "team-a", &isov1.Placement{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
			"spec.placement.tolerations[0] tolerates every taint (no key)"},
		{"every taint, where the administrator allows it", "ops", &isov1.Placement{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}, ""},
		{"a namespace the ConfigMap does not name", "team-c", &isov1.Placement{Tolerations: []corev1.Toleration{tol("team-a/dedicated")}}, "namespace team-c may tolerate only the taint keys shared/maintenance"},
		{"the namespace's selector, said again", "team-b", &isov1.Placement{NodeSelector: map[string]string{"pool": "b", "zone": "1"}}, ""},
		{"against the namespace's selector", "team-b", &isov1.Placement{NodeSelector: map[string]string{"pool": "a"}},
			`spec.placement.nodeSelector[pool] is "a", and namespace team-b's crawlers run only on nodes labelled pool=b`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := rules.Check(tc.ns, tc.p)
			if (err != nil) != (tc.err != "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("Check: %v; want %q", err, tc.err)
			}
		})
	}
	if err := (Rules{}).Check("any", &isov1.Placement{Tolerations: []corev1.Toleration{tol("x")}}); err == nil || !strings.Contains(err.Error(), "may tolerate only no taint") {
		t.Errorf("no rules: %v; want every toleration refused", err)
	}
}

func TestApplyNeverWidens(t *testing.T) {
	rules, err := Parse(map[string]string{"tolerations.team-a": "team-a/dedicated", "nodeSelector.team-a": "pool=a"})
	if err != nil {
		t.Fatal(err)
	}
	mine := corev1.Toleration{Key: "team-a/dedicated", Operator: corev1.TolerationOpExists}
	req := placement.Request{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}, mine}, NodeSelector: map[string]string{"zone": "1"}}
	rules.Apply("team-a", &req)
	want := placement.Request{Tolerations: []corev1.Toleration{mine}, NodeSelector: map[string]string{"zone": "1", "pool": "a"}}
	if d := cmp.Diff(want, req); d != "" {
		t.Errorf("Apply (-want +got):\n%s", d)
	}
	other := placement.Request{Tolerations: []corev1.Toleration{mine}}
	rules.Apply("team-b", &other)
	if len(other.Tolerations) != 0 || other.NodeSelector != nil {
		t.Errorf("another namespace's request: %+v; want no toleration and no selector", other)
	}
	against := placement.Request{NodeSelector: map[string]string{"pool": "b"}}
	rules.Apply("team-a", &against)
	if against.NodeSelector["pool"] == "a" || against.NodeSelector["pool"] == "b" {
		t.Errorf("a selector against the namespace's: %v; want one no node carries", against.NodeSelector)
	}
}
