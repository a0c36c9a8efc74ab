package cli

import (
	"context"
	"strings"
	"testing"
)

// A CrawlerVM exported with `kubectl get -o yaml` carries the operator's status; the CLI
// decides from scratch, so render and plan agree whatever status came along.
func TestLoadDropsStatus(t *testing.T) {
	const exported = `apiVersion: isochron.io/v1alpha1
kind: CrawlerVM
metadata: {name: a, namespace: bms}
spec:
  rps: 100
  errorBudget: {tolerance: 10ms}
  guest: {image: img, memory: 1Gi}
status:
  placement: {node: elsewhere}
  sizing: {vcpus: 9, hostCPUs: 10, cpuRequest: "9", memory: 1Gi}
`
	inv, err := Load(context.Background(), []string{"-"}, strings.NewReader(exported))
	if err != nil {
		t.Fatal(err)
	}
	if got := inv.CrawlerVMs[0].Status; got.Placement != nil || got.Sizing != nil {
		t.Errorf("status kept: %+v", got)
	}
}
