package policies

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/render"
)

// The policy rt-network-tenancy (config/admission/rt_network_tenancy.yaml) and
// render.NetworkAllowed (internal/render), which the manager runs on every crawler with
// the namespaces render.SharedNamespaces reads from the same key of the ConfigMap
// isochron-networks (--shared-network-namespaces; Ready=False, RTNetworkNotAllowed),
// refuse the same crawlers with the same words: every administrator's list below,
// against every crawler's RT network, in two namespaces.
//
// Left out on purpose: a write that leaves the spec alone, which the policy admits (its
// match condition) and the manager still reports; and lists render.SharedNamespaces
// refuses, with which the manager does not start.
func TestRTNetworkTenancyPolicyIsNetworkAllowed(t *testing.T) {
	p := policyOf(t, "rt_network_tenancy.yaml", "rt-network-tenancy")
	settings := map[string]map[string]string{
		"no key":                     nil,
		"an empty list":              {isov1.NetworksSharedNamespaces: ""},
		"tenant-b shared":            {isov1.NetworksSharedNamespaces: "tenant-b"},
		"two, with spaces and a gap": {isov1.NetworksSharedNamespaces: " rt-shared , , tenant-b ,"},
		"rt-shared only":             {isov1.NetworksSharedNamespaces: "rt-shared"},
	}
	networks := map[string]string{
		"no RT-NIC":                  "",
		"its namespace's, bare name": "rt-net",
		"bms's, by namespace":        "bms/rt-net",
		"tenant-b's":                 "tenant-b/rt-net",
		"rt-shared's":                "rt-shared/rt-net",
	}
	for sName, data := range settings {
		shared, err := render.SharedNamespaces(data[isov1.NetworksSharedNamespaces])
		if err != nil {
			t.Fatalf("%s: render.SharedNamespaces: %v", sName, err)
		}
		params := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "isochron-system", Name: isov1.NetworksConfigMap}, Data: data}
		for nName, network := range networks {
			for _, ns := range []string{"bms", "tenant-b"} {
				t.Run(sName+"/"+nName+"/"+ns, func(t *testing.T) {
					cvm := &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tower-a"}, Spec: isov1.CrawlerVMSpec{RPS: 100}}
					if network != "" {
						cvm.Spec.RTNIC = &isov1.RTNIC{NetworkName: network}
					}
					goErr := render.NetworkAllowed(cvm, shared)
					admitted, message := p.judge(t, request{op: admission.Create, resource: crawlervms, kind: crawlerKind,
						object: custom(t, cvm), user: tenant, params: params})
					switch {
					case admitted && goErr != nil:
						t.Errorf("the policy admits what the manager refuses: %v", goErr)
					case !admitted && goErr == nil:
						t.Errorf("the policy refuses what the manager admits: %s", message)
					case !admitted && message != goErr.Error():
						t.Errorf("the policy and the manager say it differently:\n  policy:  %s\n  manager: %v", message, goErr)
					}
				})
			}
		}
	}
}
