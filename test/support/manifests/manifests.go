// Package manifests builds isochron's kustomizations (config/...) with the pinned
// kustomize the Makefile passes in KUSTOMIZE, as a user's `kubectl apply -k` would.
package manifests

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Build is `kustomize build` of dir (relative to the repository root), as objects.
func Build(t *testing.T, root, dir string) []*unstructured.Unstructured {
	t.Helper()
	kustomize := os.Getenv("KUSTOMIZE")
	if kustomize == "" {
		t.Fatal("KUSTOMIZE is not set: run these tests with `make test-integration`, which builds the pinned kustomize into bin/")
	}
	out, err := exec.Command(kustomize, "build", filepath.Join(root, dir)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kustomize build %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding kustomize build %s: %v", dir, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}
