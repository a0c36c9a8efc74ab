package kubevirt

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"isochron.io/isochron/test/kubevirt/crdgen"
)

const thirdparty = "../../config/thirdparty"

// wantCRDs must be present; the group of every CRD in a directory must match
// the directory's entry in dirGroups.
var wantCRDs = []string{
	"kubevirts.kubevirt.io",
	"virtualmachineinstances.kubevirt.io",
	"virtualmachines.kubevirt.io",
	"virtualmachineinstancemigrations.kubevirt.io",
	"virtualmachineinstancereplicasets.kubevirt.io",
	"virtualmachineinstancepresets.kubevirt.io",
	"network-attachment-definitions.k8s.cni.cncf.io",
}

var dirGroups = map[string]string{
	"kubevirt": "kubevirt.io", // suffix: also snapshot.kubevirt.io, pool.kubevirt.io, ...
	"multus":   "k8s.cni.cncf.io",
}

// TestThirdPartyCRDs decodes every document under config/thirdparty into an
// apiextensions.k8s.io/v1 CRD (strictly: unknown fields fail) and runs the
// API server's own CRD validation on it, so a file that kube-apiserver would
// reject fails here rather than in envtest/kind.
func TestThirdPartyCRDs(t *testing.T) {
	seen := map[string]bool{}
	files, err := filepath.Glob(filepath.Join(thirdparty, "*", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no YAML files under %s (err=%v); run make kubevirt-crds multus-crds", thirdparty, err)
	}
	for _, file := range files {
		dir := filepath.Base(filepath.Dir(file))
		group, ok := dirGroups[dir]
		if !ok {
			t.Errorf("%s: unexpected directory %q, add it to dirGroups", file, dir)
			continue
		}
		for _, doc := range documents(t, file) {
			var crd extv1.CustomResourceDefinition
			if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
				t.Errorf("%s: %v", file, err)
				continue
			}
			if crd.APIVersion != "apiextensions.k8s.io/v1" || crd.Kind != "CustomResourceDefinition" {
				t.Errorf("%s: got %s %s, want apiextensions.k8s.io/v1 CustomResourceDefinition", file, crd.APIVersion, crd.Kind)
				continue
			}
			if !strings.HasSuffix(crd.Spec.Group, group) {
				t.Errorf("%s: %s has group %q, want *%s", file, crd.Name, crd.Spec.Group, group)
			}
			seen[crd.Name] = true
			validate(t, file, &crd)
		}
	}
	for _, name := range wantCRDs {
		if !seen[name] {
			t.Errorf("CRD %s missing under %s", name, thirdparty)
		}
	}
}

// validate runs kube-apiserver's create-time CRD validation (structural
// schema, names, versions, ...), after the two things the API server does
// first: apply v1 defaults (e.g. spec.names.listKind) and, in the registry
// strategy's PrepareForCreate, set status.storedVersions to the storage version.
func validate(t *testing.T, file string, crd *extv1.CustomResourceDefinition) {
	t.Helper()
	crd = crd.DeepCopy()
	extv1.SetObjectDefaults_CustomResourceDefinition(crd)
	var internal apiextensions.CustomResourceDefinition
	if err := extv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, &internal, nil); err != nil {
		t.Errorf("%s: convert: %v", file, err)
		return
	}
	internal.Status = apiextensions.CustomResourceDefinitionStatus{}
	for _, v := range internal.Spec.Versions {
		if v.Storage {
			internal.Status.StoredVersions = []string{v.Name}
		}
	}
	for _, e := range extvalidation.ValidateCustomResourceDefinition(context.Background(), &internal) {
		t.Errorf("%s: %s: %v", file, crd.Name, e)
	}
}

// documents splits a (possibly multi-document) YAML file.
func documents(t *testing.T, file string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		// Skip documents that are only comments/whitespace (e.g. the header
		// before a leading "---").
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}

// TestKubeVirtCRDsUpToDate fails when config/thirdparty/kubevirt differs from
// what the pinned kubevirt.io/kubevirt generates (e.g. after a version bump
// without make kubevirt-crds).
func TestKubeVirtCRDsUpToDate(t *testing.T) {
	// Test binaries have no dependency build info; ask the go command.
	out, err := exec.Command("go", "list", "-m", "-f", "{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}", "kubevirt.io/kubevirt").Output()
	if err != nil {
		t.Fatalf("go list -m kubevirt.io/kubevirt: %v", err)
	}
	want, err := crdgen.Generate(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(thirdparty, "kubevirt")
	for name, content := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%v; run make kubevirt-crds", err)
			continue
		}
		if !bytes.Equal(got, content) {
			t.Errorf("%s is stale; run make kubevirt-crds", filepath.Join(dir, name))
		}
	}
	// Files we generated earlier but no longer would.
	existing, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range existing {
		if _, ok := want[filepath.Base(f)]; !ok {
			t.Errorf("%s is not generated any more; run make kubevirt-crds", f)
		}
	}
}
