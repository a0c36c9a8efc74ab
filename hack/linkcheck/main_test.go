package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSlug(t *testing.T) {
	tests := map[string]struct{ heading, want string }{
		"words":                {"Drains hand the crawlers to isochron", "drains-hand-the-crawlers-to-isochron"},
		"code span":            {"H: own vCPU headroom (`vcpu-headroom`)", "h-own-vcpu-headroom-vcpu-headroom"},
		"punctuation dropped":  {"Figures (this machine: 2 vCPUs, 23 Nov 2026)", "figures-this-machine-2-vcpus-23-nov-2026"},
		"link keeps its text":  {"See [the model](contention-model.md)", "see-the-model"},
		"hyphens and digits":   {"slo-burn-rate", "slo-burn-rate"},
		"underscore kept":      {"runbook_url", "runbook_url"},
		"thousands separator":  {"10,000 crawlers on 1,000 nodes", "10000-crawlers-on-1000-nodes"},
		"non-ASCII letters":    {"Straße × 2", "straße--2"},
		"html tags dropped":    {"<code>plan</code> output", "plan-output"},
		"repeated spaces kept": {"a  b", "a--b"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := slug(tc.heading); got != tc.want {
				t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
			}
		})
	}
}

func TestChecker(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/ops.md", "# Ops\n\n## Alerts\n\n### slo-burn-rate\n\n## Alerts\n")
	write("internal/slo/slo.go", "package slo\n")
	write("README.md", strings.Join([]string{
		"[ok](docs/ops.md#slo-burn-rate) [dup](docs/ops.md#alerts-1) [self](#isochron)",
		"[gone](docs/missing.md) [bad anchor](docs/ops.md#nope) [out](../shared/x.md)",
		"See docs/ops.md#alerts and `internal/slo.Judge` and `internal/nowhere`; docs/ops.md, \"Alerts\"; docs/ops.md, \"Pages\".",
		"```sh",
		"cat docs/missing-in-code.md",
		"```",
		"# isochron",
		"A pattern in code, `^[a-z]([-a-z0-9]*[a-z0-9])?$`, is no link; [`ops`](docs/ops.md#slo-burn-rate) is one, [x](docs/gone.md).",
	}, "\n"))
	write("config/prometheus/rules.yaml", "        runbook_url: https://x/blob/main/docs/ops.md#slo-burn-rate\n"+
		"        runbook_url: https://x/blob/main/docs/ops.md#gone\n"+
		"        runbook_url: docs/ops.md#slo-burn-rate\n")

	c := &checker{root: root, anchors: map[string]map[string]bool{}}
	if err := c.document("README.md"); err != nil {
		t.Fatal(err)
	}
	if err := c.rules("config/prometheus/rules.yaml", "https://x/blob/main/"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`README.md:2: "docs/missing.md": no such file or folder docs/missing.md`,
		`README.md:2: "docs/ops.md#nope": no heading with anchor #nope in docs/ops.md`,
		`README.md:2: "../shared/x.md": points outside the repository`,
		`README.md:3: "internal/nowhere": no such file or folder internal/nowhere`,
		`README.md:3: "docs/ops.md, \"Pages\"": no heading that begins so in docs/ops.md`,
		`README.md:8: "docs/gone.md": no such file or folder docs/gone.md`,
		`config/prometheus/rules.yaml:2: "https://x/blob/main/docs/ops.md#gone": no heading with anchor #gone in docs/ops.md`,
		`config/prometheus/rules.yaml:3: "docs/ops.md#slo-burn-rate": a runbook_url must start with https://x/blob/main/ and name a document of this repository`,
	}
	if diff := cmp.Diff(want, c.problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}
