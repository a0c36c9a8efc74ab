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

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDockerfileOfRTProbe(t *testing.T) {
	r, err := parseDockerfile("../../../build/rtprobe.Dockerfile", map[string]string{"VERSION": "v9.9.9"})
	if err != nil {
		t.Fatal(err)
	}
	want := []copyFile{{src: "rtprobe", dest: "/rtprobe"}, {src: "agent.img", dest: "/disk/agent.img", uid: 107, gid: 107}}
	if diff := cmp.Diff(want, r.copies, cmp.AllowUnexported(copyFile{})); diff != "" {
		t.Errorf("copies (-want +got):\n%s", diff)
	}
	if r.user != "65532:65532" || !cmp.Equal(r.entrypoint, []string{"/rtprobe"}) {
		t.Errorf("user %q, entrypoint %q", r.user, r.entrypoint)
	}
	if got := r.labels["org.opencontainers.image.version"]; got != "v9.9.9" {
		t.Errorf("version label %q, want the ARG's value v9.9.9", got)
	}
}

func TestParseDockerfileRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ dockerfile, wantErr string }{
		"a base image":         {"FROM alpine\nCOPY a /a\nENTRYPOINT [\"/a\"]\n", "FROM scratch"},
		"a shell":              {"FROM scratch\nRUN true\n", "not supported"},
		"an ARG without value": {"FROM scratch\nARG OTHER\n", "no value given"},
		"a directory copied":   {"FROM scratch\nCOPY bin/ /bin/\nENTRYPOINT [\"/a\"]\n", "one file"},
		"a shell entrypoint":   {"FROM scratch\nCOPY a /a\nENTRYPOINT /a\n", "exec form"},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "x.Dockerfile")
			if err := os.WriteFile(file, []byte(tc.dockerfile), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := parseDockerfile(file, map[string]string{"VERSION": "v1"})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseDockerfile() error = %v, want one with %q", err, tc.wantErr)
			}
		})
	}
}
