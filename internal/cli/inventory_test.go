package cli

import (
	"context"
	"strings"
	"testing"
)

// The CLI counts KubeVirt's VFIO memory for an RT-NIC on an SR-IOV network in its input,
// as the operator does, and none for a bridge network or a missing one.
func TestRequestsCountVFIOForSRIOVNetworks(t *testing.T) {
	input := `apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: rt-sriov, namespace: bms}
spec: {config: '{"cniVersion":"0.3.1","type":"sriov"}'}
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: rt-bridge, namespace: bms}
spec: {config: '{"cniVersion":"0.3.1","type":"bridge","bridge":"br-rt"}'}
` + crawlerYAML("on-sriov", "rt-sriov") + crawlerYAML("on-bridge", "rt-bridge") + crawlerYAML("on-missing", "rt-missing")
	inv, err := Load(context.Background(), []string{"-"}, strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"bms/on-sriov": true, "bms/on-bridge": false, "bms/on-missing": false}
	for _, r := range inv.Requests() {
		if r.Demand.VFIO != want[r.Key] {
			t.Errorf("%s: VFIO %v, want %v", r.Key, r.Demand.VFIO, want[r.Key])
		}
	}
}

func crawlerYAML(name, network string) string {
	return `---
apiVersion: isochron.io/v1alpha1
kind: CrawlerVM
metadata: {name: ` + name + `, namespace: bms}
spec:
  rps: 100
  errorBudget: {tolerance: 10ms}
  guest: {image: img, memory: 1Gi}
  rtNIC: {networkName: ` + network + `, deadline: 5ms, minBandwidth: 100M}
`
}
