package policies

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/access"
)

// The policy node-access (config/admission/node_access.yaml) and access.Rules.Check
// (internal/access), which the manager runs on every crawler with the rules
// access.Parse reads from the same ConfigMap isochron-node-access (Placed=False,
// NodeAccessNotAllowed, for what was applied before the policy or without it), refuse
// the same crawlers, each for the same field: every administrator's setting below,
// against every crawler's placement, in two namespaces.
//
// Left out on purpose: a write that leaves the spec alone, which the policy admits (its
// match condition) and the manager still reports; and settings access.Parse refuses,
// with which the manager does not start.
func TestNodeAccessPolicyIsAccessCheck(t *testing.T) {
	p := policyOf(t, "node_access.yaml", "node-access")
	settings := map[string]map[string]string{
		"no keys":                            nil,
		"an empty list":                      {access.KeyTolerations: ""},
		"every namespace tolerates two keys": {access.KeyTolerations: " example.com/gpu , isochron.io/rt,"},
		"bms tolerates its own taint":        {access.KeyTolerations + ".bms": "bms.example.com/dedicated"},
		"bms tolerates every taint":          {access.KeyTolerations + ".bms": access.AnyTaint},
		"every namespace tolerates every taint, bms its key too": {
			access.KeyTolerations: access.AnyTaint, access.KeyTolerations + ".bms": "bms.example.com/dedicated"},
		"bms is kept to its pool": {access.KeyNodeSelector + ".bms": "pool=bms"},
		"bms is kept to a pool and zone, with its taint": {
			access.KeyNodeSelector + ".bms": "pool=bms, zone=a", access.KeyTolerations + ".bms": "bms.example.com/dedicated"},
	}
	tolerate := func(keys ...string) *isov1.Placement {
		p := &isov1.Placement{}
		for _, k := range keys {
			p.Tolerations = append(p.Tolerations, corev1.Toleration{Key: k, Operator: corev1.TolerationOpExists})
		}
		return p
	}
	placements := map[string]*isov1.Placement{
		"no placement":                      nil,
		"no toleration":                     {},
		"a key every namespace may have":    tolerate("isochron.io/rt"),
		"bms's key":                         tolerate("bms.example.com/dedicated"),
		"every taint (no key)":              tolerate(""),
		"an allowed key and another":        tolerate("isochron.io/rt", "example.com/other"),
		"bms's pool":                        {NodeSelector: map[string]string{"pool": "bms"}},
		"another pool":                      {NodeSelector: map[string]string{"pool": "other"}},
		"bms's pool in another zone":        {NodeSelector: map[string]string{"pool": "bms", "zone": "b"}},
		"a label the namespace says naught": {NodeSelector: map[string]string{"disk": "ssd"}},
		"every taint, on another pool":      {NodeSelector: map[string]string{"pool": "other"}, Tolerations: tolerate("").Tolerations},
	}
	for sName, data := range settings {
		rules, err := access.Parse(data)
		if err != nil {
			t.Fatalf("%s: access.Parse: %v", sName, err)
		}
		params := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "isochron-system", Name: isov1.NodeAccessConfigMap}, Data: data}
		for pName, placement := range placements {
			for _, ns := range []string{"bms", "tenant-b"} {
				t.Run(sName+"/"+pName+"/"+ns, func(t *testing.T) {
					cvm := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tower-a"}, Spec: isov1.CrawlerVMSpec{RPS: 100, Placement: placement}}
					goErr := rules.Check(ns, placement)
					admitted, message := p.judge(t, request{op: admission.Create, resource: crawlervms, kind: crawlerKind,
						object: custom(t, cvm), user: tenant, params: params})
					switch {
					case admitted && goErr != nil:
						t.Errorf("the policy admits what the manager refuses: %v", goErr)
					case !admitted && goErr == nil:
						t.Errorf("the policy refuses what the manager admits: %s", message)
					case !admitted && placementField(message) != placementField(goErr.Error()):
						t.Errorf("the policy refuses %s, the manager %s:\n  policy:  %s\n  manager: %v",
							placementField(message), placementField(goErr.Error()), message, goErr)
					}
				})
			}
		}
	}
}

// placementField is the field of spec.placement a refusal names first.
func placementField(message string) string {
	for _, f := range []string{"spec.placement.tolerations", "spec.placement.nodeSelector"} {
		if strings.HasPrefix(message, f) {
			return f
		}
	}
	return "no field of spec.placement"
}
