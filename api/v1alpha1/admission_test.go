package v1alpha1

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// The NIC agents' admission policy (config/admission/nic_agent_node_bound.yaml) holds an
// agent to status.rtNIC by comparing every other field of CrawlerVMStatus: a field added
// to the status and missing there would be the agents' to write. Every field but rtNIC
// must appear in it.
func TestNICAgentPolicyComparesEveryOtherStatusField(t *testing.T) {
	policy, err := os.ReadFile("../../config/admission/nic_agent_node_bound.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st := reflect.TypeFor[CrawlerVMStatus]()
	for i := range st.NumField() {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		if name == "rtNIC" {
			continue
		}
		for _, want := range []string{"object.status." + name + " == oldObject.status." + name, "has(object.status." + name + ") == has(oldObject.status." + name + ")"} {
			if !strings.Contains(string(policy), want) {
				t.Errorf("status.%s: the policy does not compare it (%q): add it to the variable onlyRTNIC", name, want)
			}
		}
	}
}
