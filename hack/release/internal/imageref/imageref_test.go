/*
Copyright 2026 The isochron Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package imageref

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

func TestRepository(t *testing.T) {
	for in, want := range map[string]string{
		"isochron/manager:v0.1.0":               "isochron/manager",
		"isochron/manager":                      "isochron/manager",
		"localhost:5000/isochron/manager":       "localhost:5000/isochron/manager",
		"localhost:5000/manager:v1@sha256:abcd": "localhost:5000/manager",
		"ghcr.io/isochron/rtprobe@sha256:abcd":  "ghcr.io/isochron/rtprobe",
	} {
		if diff := cmp.Diff(want, Repository(in)); diff != "" {
			t.Errorf("Repository(%q) (-want +got):\n%s", in, diff)
		}
	}
}

// What WriteDigests writes, ReadDigests reads; a file that is not REF@sha256:... is an
// error, a missing one pins nothing.
func TestDigests(t *testing.T) {
	file := filepath.Join(t.TempDir(), "dist", "digests.txt")
	d1, d2 := "sha256:"+strings.Repeat("1", 64), "sha256:"+strings.Repeat("2", 64)
	manager, rtprobe := Ref("localhost:5000/isochron", "manager", "v0.1.0"), Ref("localhost:5000/isochron", "rtprobe", "v0.1.0")
	if got, err := ReadDigests(file); err != nil || len(got) != 0 {
		t.Fatalf("ReadDigests of a missing file = %v, %v; want none", got, err)
	}
	if err := WriteDigests(file, []string{rtprobe + "@" + d2, manager + "@" + d1}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDigests(file)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"localhost:5000/isochron/manager:v0.1.0": d1, "localhost:5000/isochron/rtprobe:v0.1.0": d2}, got); diff != "" {
		t.Errorf("ReadDigests (-want +got):\n%s", diff)
	}
	if err := WriteDigests(file, []string{manager + "@sha256:abcd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDigests(file); err == nil || !strings.Contains(err.Error(), "is not REF@sha256:<64 hex digits>") {
		t.Errorf("ReadDigests of a short digest: %v, want an error", err)
	}
}

func TestEach(t *testing.T) {
	const in = `kind: Deployment
spec:
  template:
    spec:
      initContainers:
      - {name: init, image: "isochron/manager:v0.1.0"}
      containers:
      - name: manager
        image: isochron/manager:v0.1.0
        args: [--leader-elect, --probe-image=isochron/rtprobe:v0.1.0]
data:
  image: not-a-container
`
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(in), &doc); err != nil {
		t.Fatal(err)
	}
	var got []string
	Each(&doc, func(v *yaml.Node, prefix string) { got = append(got, prefix+"|"+strings.TrimPrefix(v.Value, prefix)) })
	want := []string{"|isochron/manager:v0.1.0", "|isochron/manager:v0.1.0", ProbeImageArg + "|isochron/rtprobe:v0.1.0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("images (-want +got):\n%s", diff)
	}
}
