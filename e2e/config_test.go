package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The providers' configuration cannot run here (kind needs a privileged Docker); these
// tests keep it valid: every YAML document parses, and the settings isochron depends on
// are where kind, KubeVirt and GitHub Actions read them.

// yamlFiles returns the YAML files under the repository-relative dirs.
func yamlFiles(t *testing.T, dirs ...string) []string {
	t.Helper()
	var files []string
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join("..", dir), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ext := filepath.Ext(path); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("listing %s: %v", dir, err)
		}
	}
	return files
}

// documents splits a file into its YAML documents, each converted to a JSON-shaped map.
func documents(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []map[string]any
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var m map[string]any
		if err := yaml.UnmarshalStrict(doc, &m); err != nil {
			t.Fatalf("%s: invalid YAML: %v", path, err)
		}
		if m != nil {
			docs = append(docs, m)
		}
	}
}

func TestProviderYAMLIsValid(t *testing.T) {
	files := yamlFiles(t, "e2e", ".github")
	if len(files) == 0 {
		t.Fatal("no YAML under e2e and .github")
	}
	for _, f := range files {
		t.Run(strings.TrimPrefix(f, "../"), func(t *testing.T) {
			if len(documents(t, f)) == 0 {
				t.Errorf("%s holds no YAML document", f)
			}
		})
	}
}

// field walks m along path (map keys, or list indexes given as ints).
func field(m any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			mm, ok := m.(map[string]any)
			if !ok {
				return nil
			}
			m = mm[k]
		case int:
			l, ok := m.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			m = l[k]
		}
	}
	return m
}

func TestKindConfigHasStaticCPUManager(t *testing.T) {
	docs := documents(t, "kind/kind-config.yaml")
	if len(docs) != 1 || docs[0]["kind"] != "Cluster" {
		t.Fatalf("kind-config.yaml: want one kind Cluster document, got %v", docs)
	}
	// The kubelet's configuration is the cluster's (kubeadm join ignores a worker's own).
	patches, _ := docs[0]["kubeadmConfigPatches"].([]any)
	var kubelet map[string]any
	for _, p := range patches {
		s, _ := p.(string)
		var m map[string]any
		if err := yaml.UnmarshalStrict([]byte(s), &m); err != nil {
			t.Fatalf("kubeadmConfigPatches holds invalid YAML: %v", err)
		}
		if m["kind"] == "KubeletConfiguration" {
			kubelet = m
		}
	}
	if kubelet == nil {
		t.Fatal("no cluster-wide KubeletConfiguration patch")
	}
	for key, want := range map[string]any{"cpuManagerPolicy": "static", "reservedSystemCPUs": "0"} {
		if got := kubelet[key]; got != want {
			t.Errorf("KubeletConfiguration %s = %v, want %v", key, got, want)
		}
	}
	// Two workers for the tests between nodes, labelled as make e2e-kind selects them
	// (E2E_MOVE_NODES) and as realtime VMIs require.
	nodes, _ := docs[0]["nodes"].([]any)
	var workers int
	for i, n := range nodes {
		if field(n, "role") != "worker" {
			continue
		}
		workers++
		for key, want := range map[string]any{"kubevirt.io/realtime": "true", "isochron.io/e2e-node": "kind"} {
			if got := field(n, "labels", key); got != want {
				t.Errorf("node %d: label %s = %v, want %v", i, key, got, want)
			}
		}
	}
	if workers != 2 {
		t.Errorf("kind-config.yaml: %d workers, want 2", workers)
	}
}

func TestKubeVirtCRHasFeatureGates(t *testing.T) {
	docs := documents(t, "kind/kubevirt/kubevirt-cr.yaml")
	if len(docs) != 1 || docs[0]["kind"] != "KubeVirt" {
		t.Fatalf("kubevirt-cr.yaml: want one KubeVirt document")
	}
	gates, _ := field(docs[0], "spec", "configuration", "developerConfiguration", "featureGates").([]any)
	have := map[any]bool{}
	for _, g := range gates {
		have[g] = true
	}
	// CPUManager: virt-handler labels nodes kubevirt.io/cpumanager=true only with it, and
	// virt-controller requires the label of every dedicated-CPU VMI (DEVELOPERS.md).
	for _, want := range []string{"CPUManager"} {
		if !have[want] {
			t.Errorf("kubevirt-cr.yaml: feature gate %s missing (have %v)", want, gates)
		}
	}
}

func TestWorkflowRunsE2EKind(t *testing.T) {
	docs := documents(t, "../.github/workflows/e2e-kind.yaml")
	if len(docs) != 1 {
		t.Fatalf("e2e-kind.yaml: want one document, got %d", len(docs))
	}
	// sigs.k8s.io/yaml reads the key `on` as YAML 1.1's boolean true.
	if docs[0]["on"] == nil && docs[0]["true"] == nil {
		t.Error("e2e-kind.yaml: no triggers (on:)")
	}
	jobs, _ := docs[0]["jobs"].(map[string]any)
	var runs bool
	for _, j := range jobs {
		steps, _ := field(j, "steps").([]any)
		for _, s := range steps {
			if run, _ := field(s, "run").(string); strings.Contains(run, "make e2e-kind") {
				runs = true
			}
		}
	}
	if !runs {
		t.Error("e2e-kind.yaml: no step runs make e2e-kind")
	}
}
