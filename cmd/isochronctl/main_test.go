package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"isochron.io/isochron/internal/version"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func isochronctl(stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/isochronctl -update)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", name, diff)
	}
}

func TestRenderSamples(t *testing.T) {
	cases := map[string][]string{
		"samples-on-node.yaml": {"render", "-f", "../../config/samples", "--node", "rt-node-1"},
		"samples-placed.yaml":  {"render", "-f", "../../config/samples", "-f", "../../hack/demo/nodes.yaml"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errs := isochronctl("", args...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errs)
			}
			golden(t, name, out)
			// Same input, same bytes.
			if _, again, _ := isochronctl("", args...); again != out {
				t.Error("a second run printed different bytes")
			}
		})
	}
}

// A CrawlerVM from kubectl get -o yaml has a UID, and its VM is owned by it as the
// operator's would be; one from a file has none, and its VM has no owner reference (an
// empty uid would make kubectl apply fail) nor inputs hash.
func TestRenderOwnerNeedsUID(t *testing.T) {
	const crawler = `apiVersion: isochron.io/v1alpha1
kind: CrawlerVM
metadata: {name: tower-a, namespace: bms%s}
spec:
  rps: 10
  errorBudget: {tolerance: 10ms}
  guest: {image: img, memory: 1Gi}
`
	cases := map[string]struct {
		metadata string
		want     []string
		wantNot  []string
	}{
		"from the cluster": {
			metadata: ", uid: 6f1c2b9e-0000-4000-8000-000000000001",
			want:     []string{"ownerReferences:", "uid: 6f1c2b9e-0000-4000-8000-000000000001", "isochron.io/vm-inputs:"},
		},
		"from a file": {
			wantNot: []string{"ownerReferences:", "uid:", "isochron.io/vm-inputs:"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errs := isochronctl(fmt.Sprintf(crawler, tc.metadata), "render", "-f", "-", "--node", "rt-node-1")
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in:\n%s", w, out)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("%q in:\n%s", w, out)
				}
			}
		})
	}
}

func TestRenderExitCodes(t *testing.T) {
	const bad = `apiVersion: isochron.io/v1alpha1
kind: CrawlerVM
metadata: {name: bad, namespace: bms}
spec:
  rps: 0
  errorBudget: {tolerance: 10ms}
  guest: {image: img, memory: 1Gi}
`
	const tooBig = `apiVersion: isochron.io/v1alpha1
kind: CrawlerVM
metadata: {name: huge, namespace: bms}
spec:
  rps: 5000
  errorBudget: {tolerance: 10ms}
  guest: {image: img, memory: 1Gi}
---
apiVersion: v1
kind: Node
metadata: {name: small, labels: {kubevirt.io/schedulable: "true", kubevirt.io/cpumanager: "true", kubevirt.io/realtime: "true"}}
status: {allocatable: {cpu: "4", memory: 8Gi, hugepages-2Mi: 4Gi}}
`
	cases := map[string]struct {
		stdin  string
		args   []string
		code   int
		stderr string
	}{
		"no arguments":      {args: nil, code: exitInvalid, stderr: "Usage:"},
		"unknown command":   {args: []string{"deploy"}, code: exitInvalid, stderr: `unknown command "deploy"`},
		"no file":           {args: []string{"render"}, code: exitInvalid, stderr: "need -f FILE"},
		"missing file":      {args: []string{"render", "-f", "nope.yaml", "--node", "n"}, code: exitInvalid, stderr: "nope.yaml"},
		"invalid CrawlerVM": {stdin: bad, args: []string{"render", "-f", "-", "--node", "n"}, code: exitInvalid, stderr: "CrawlerVM bms/bad: spec.rps: Invalid value: 0"},
		"not YAML":          {stdin: "{{{", args: []string{"render", "-f", "-", "--node", "n"}, code: exitInvalid, stderr: "document 1"},
		"unsupported kind":  {stdin: "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", args: []string{"render", "-f", "-", "--node", "n"}, code: exitInvalid, stderr: "v1 Pod is not something isochronctl reads"},
		"no node, no Nodes": {stdin: strings.Replace(bad, "rps: 0", "rps: 10", 1), args: []string{"render", "-f", "-"}, code: exitInvalid, stderr: "pass --node NAME"},
		"nothing fits":      {stdin: tooBig, args: []string{"render", "-f", "-"}, code: exitNotPlaced, stderr: "CrawlerVM bms/huge: not placed: 0/1 nodes fit: small: needs 21 exclusive CPUs and 35m for KubeVirt's support containers, 4 free"},
		"help":              {args: []string{"--help"}, code: exitOK, stderr: "Usage:"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := isochronctl(tc.stdin, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, tc.code, tc.stderr)
			}
		})
	}
}

// The plans of the samples on the demo's nodes, and of a tricky input: a v1 List of Nodes
// as kubectl prints them (a tainted control plane, a cordoned node, a node without the
// CPU Manager), a ContentionProfile that halves the size of the crawlers on its class,
// and a crawler no node can hold; and the samples again with a node calibrated by probes.
func TestPlanGolden(t *testing.T) {
	samples := []string{"plan", "-f", "../../config/samples", "-f", "../../hack/demo/nodes.yaml"}
	tricky := []string{"plan", "-f", "testdata/plan-tricky"}
	calibrated := append(append([]string(nil), samples...), "-f", "testdata/plan-calibrated")
	cases := map[string]struct {
		args []string
		code int
	}{
		"plan-samples.txt":  {args: samples, code: exitOK},
		"plan-samples.json": {args: append(samples, "-o", "json"), code: exitOK},
		"plan-tricky.txt":   {args: tricky, code: exitNotPlaced},
		"plan-tricky.json":  {args: append(tricky, "-o", "json"), code: exitNotPlaced},
		// rt-node-2's NodeCalibration (correction 3, from three namespaces) moves tower-a
		// to rt-node-1; rt-node-1's, from two namespaces, corrects nothing and says so.
		"plan-calibrated.txt": {args: calibrated, code: exitOK},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errs := isochronctl("", tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, errs)
			}
			golden(t, name, out)
			if _, again, _ := isochronctl("", tc.args...); again != out {
				t.Error("a second run printed different bytes")
			}
		})
	}
}

func TestPlanExitCodes(t *testing.T) {
	const node = `apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubevirt.io/schedulable: "true", kubevirt.io/cpumanager: "true", kubevirt.io/realtime: "true"}}
status: {allocatable: {cpu: "14", memory: 60Gi, hugepages-2Mi: 16Gi}, capacity: {cpu: "16"}}
`
	const crawler = `apiVersion: isochron.io/v1alpha1
kind: CrawlerVM
metadata: {name: a, namespace: bms}
spec:
  rps: 400
  errorBudget: {tolerance: 10ms}
  guest: {image: img, memory: 1Gi}
`
	cases := map[string]struct {
		stdin  string
		args   []string
		code   int
		stderr string
	}{
		"placed":            {stdin: crawler + "---\n" + node, args: []string{"plan", "-f", "-"}, code: exitOK},
		"placed, json":      {stdin: crawler + "---\n" + node, args: []string{"plan", "-f", "-", "-o", "json"}, code: exitOK},
		"no crawlers":       {stdin: node, args: []string{"plan", "-f", "-"}, code: exitOK},
		"not placed":        {stdin: strings.Replace(crawler, "rps: 400", "rps: 5000", 1) + "---\n" + node, args: []string{"plan", "-f", "-"}, code: exitNotPlaced, stderr: "1 of 1 crawlers not placed (reasons in the plan): bms/a"},
		"no file":           {args: []string{"plan"}, code: exitInvalid, stderr: "need -f PATH"},
		"stray argument":    {args: []string{"plan", "-f", "x.yaml", "extra"}, code: exitInvalid, stderr: "need -f PATH"},
		"missing file":      {args: []string{"plan", "-f", "nope.yaml"}, code: exitInvalid, stderr: "nope.yaml"},
		"unknown flag":      {args: []string{"plan", "--node", "n1"}, code: exitInvalid, stderr: "flag provided but not defined"},
		"output yaml":       {stdin: crawler + "---\n" + node, args: []string{"plan", "-f", "-", "-o", "yaml"}, code: exitInvalid, stderr: "-o yaml: the output format is table or json"},
		"no Nodes":          {stdin: crawler, args: []string{"plan", "-f", "-"}, code: exitInvalid, stderr: "no Node in the input"},
		"crawler twice":     {stdin: crawler + "---\n" + crawler + "---\n" + node, args: []string{"plan", "-f", "-"}, code: exitInvalid, stderr: "CrawlerVM bms/a appears more than once"},
		"invalid CrawlerVM": {stdin: strings.Replace(crawler, "rps: 400", "rps: 0", 1) + "---\n" + node, args: []string{"plan", "-f", "-"}, code: exitInvalid, stderr: "CrawlerVM bms/a: spec.rps: Invalid value: 0"},
		"invalid profile":   {stdin: node + "---\napiVersion: isochron.io/v1alpha1\nkind: ContentionProfile\nmetadata: {name: p}\nspec: {nodeSelector: {}, crawler: {peakFactor1s: \"0.5\"}}\n", args: []string{"plan", "-f", "-"}, code: exitInvalid, stderr: "crawler.peakFactor1s must be a decimal from 1 to 100"},
		"unsupported kind":  {stdin: "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", args: []string{"plan", "-f", "-"}, code: exitInvalid, stderr: "v1 Pod is not something isochronctl reads"},
		"help lists plan":   {args: []string{"--help"}, code: exitOK, stderr: "isochronctl plan -f PATH"},
		"plan help":         {args: []string{"plan", "-h"}, code: exitOK, stderr: "output format: table or json"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := isochronctl(tc.stdin, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, tc.code, tc.stderr)
			}
		})
	}
}

// planJSON is the -o json contract as the README documents it, written out here rather
// than taken from internal/cli so that a change there cannot change it unnoticed.
type planJSON struct {
	Crawlers []struct {
		Namespace        string  `json:"namespace"`
		Name             string  `json:"name"`
		Placed           bool    `json:"placed"`
		Node             string  `json:"node"`
		VCPUs            int32   `json:"vcpus"`
		HostCPUs         int32   `json:"hostCPUs"`
		PredictedErrorMs float64 `json:"predictedErrorMs"`
		ToleranceMs      float64 `json:"toleranceMs"`
		Reason           string  `json:"reason"`
	} `json:"crawlers"`
	Nodes []struct {
		Name                  string   `json:"name"`
		CPUAllocatable        float64  `json:"cpuAllocatable"`
		CPUUsed               float64  `json:"cpuUsed"`
		Crawlers              []string `json:"crawlers"`
		WorstPredictedErrorMs float64  `json:"worstPredictedErrorMs"`
	} `json:"nodes"`
}

func TestPlanJSONContract(t *testing.T) {
	code, out, errs := isochronctl("", "plan", "-f", "testdata/plan-tricky", "-o", "json")
	if code != exitNotPlaced {
		t.Fatalf("exit %d: %s", code, errs)
	}

	// Every key of the contract, and no other, on every object.
	var raw struct {
		Crawlers []map[string]json.RawMessage `json:"crawlers"`
		Nodes    []map[string]json.RawMessage `json:"nodes"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("top level: %v", err)
	}
	keysOf := func(m map[string]json.RawMessage) []string {
		ks := make([]string, 0, len(m))
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	wantCrawlerKeys := []string{"hostCPUs", "name", "namespace", "node", "placed", "predictedErrorMs", "reason", "toleranceMs", "vcpus"}
	for i, c := range raw.Crawlers {
		if diff := cmp.Diff(wantCrawlerKeys, keysOf(c)); diff != "" {
			t.Errorf("crawlers[%d] keys (-want +got):\n%s", i, diff)
		}
	}
	wantNodeKeys := []string{"cpuAllocatable", "cpuUsed", "crawlers", "name", "worstPredictedErrorMs"}
	for i, n := range raw.Nodes {
		if diff := cmp.Diff(wantNodeKeys, keysOf(n)); diff != "" {
			t.Errorf("nodes[%d] keys (-want +got):\n%s", i, diff)
		}
		if string(n["crawlers"]) == "null" {
			t.Errorf("nodes[%d].crawlers is null, want []", i)
		}
	}

	// And the documented types, strictly.
	var plan planJSON
	dec = json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&plan); err != nil {
		t.Fatalf("decoding into the documented struct: %v", err)
	}
	if len(plan.Crawlers) != 5 || len(plan.Nodes) != 5 {
		t.Fatalf("%d crawlers and %d nodes, want 5 and 5 (every input node, even empty)", len(plan.Crawlers), len(plan.Nodes))
	}
	onNode := map[string]string{}
	for _, n := range plan.Nodes {
		if !sort.StringsAreSorted(n.Crawlers) {
			t.Errorf("node %s: crawlers %v not sorted", n.Name, n.Crawlers)
		}
		for _, c := range n.Crawlers {
			onNode[c] = n.Name
		}
	}
	for _, c := range plan.Crawlers {
		key := c.Namespace + "/" + c.Name
		switch {
		case c.Placed && (c.Reason != "" || c.PredictedErrorMs <= 0 || c.PredictedErrorMs > c.ToleranceMs || onNode[key] != c.Node):
			t.Errorf("placed crawler %s: %+v, listed on node %q", key, c, onNode[key])
		case !c.Placed && (c.Reason == "" || c.Node != "" || c.PredictedErrorMs != 0 || c.VCPUs == 0 || onNode[key] != ""):
			t.Errorf("unplaced crawler %s: %+v", key, c)
		}
	}
}

func TestVersion(t *testing.T) {
	tests := map[string]struct {
		args       []string
		code       int
		wantStdout string
	}{
		"prints the build": {args: []string{"version"}, code: exitOK, wantStdout: "isochronctl " + version.Get().String() + "\n"},
		"no arguments":     {args: []string{"version", "extra"}, code: exitInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := isochronctl("", tc.args...)
			if code != tc.code || stdout != tc.wantStdout {
				t.Errorf("isochronctl %s: exit %d, stdout %q (stderr %q); want exit %d, stdout %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.wantStdout)
			}
		})
	}
}
