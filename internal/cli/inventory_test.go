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

// The CLI counts the support containers the KubeVirt resource in its input sizes, as
// the operator does, KubeVirt's defaults without one; a second KubeVirt is refused.
func TestRequestsCountKubeVirtsSupportContainers(t *testing.T) {
	const kv = `apiVersion: kubevirt.io/v1
kind: KubeVirt
metadata: {name: kubevirt, namespace: kubevirt}
spec:
  configuration:
    virtualMachineOptions: {disableSerialConsoleLog: {}}
    supportContainerResources:
    - type: container-disk
      resources: {limits: {cpu: 300m}}
`
	for name, tc := range map[string]struct {
		input     string
		cpu, mem  int64
		wantError string
	}{
		"no KubeVirt resource": {input: crawlerYAML("a", "rt"), cpu: 35, mem: 140_000_000},
		"its configuration":    {input: kv + crawlerYAML("a", "rt"), cpu: 600, mem: 80_000_000},
		"two":                  {input: kv + "---\n" + strings.Replace(kv, "name: kubevirt,", "name: other,", 1), wantError: "the input already has KubeVirt kubevirt/kubevirt"},
	} {
		t.Run(name, func(t *testing.T) {
			inv, err := Load(context.Background(), []string{"-"}, strings.NewReader(tc.input))
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("Load: %v, want an error saying %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range inv.Requests() {
				if s := r.Demand.Support; s.CPUMilli != tc.cpu || s.MemoryBytes != tc.mem {
					t.Errorf("%s: support containers %+v, want %dm and %d bytes", r.Key, s, tc.cpu, tc.mem)
				}
			}
		})
	}
}
