package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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
metadata: {name: small, labels: {kubevirt.io/cpumanager: "true"}}
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
		"nothing fits":      {stdin: tooBig, args: []string{"render", "-f", "-"}, code: exitNotPlaced, stderr: "CrawlerVM bms/huge: not placed: 0/1 nodes fit: small: needs 21 exclusive CPUs, 4 free"},
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
