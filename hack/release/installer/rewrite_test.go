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
	"strings"
	"testing"
)

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: isochron-controller-manager
spec:
  template:
    spec:
      initContainers:
      - name: init
        image: isochron/manager:v0.1.0
      containers:
      - name: manager
        image: "isochron/manager:v0.1.0"
        args:
        - --leader-elect
        - --probe-image=isochron/rtprobe:v0.1.0
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: untouched
data:
  image: not-a-container
`

func TestRewrite(t *testing.T) {
	const pinned = "reg.example/manager:v1@sha256:0000000000000000000000000000000000000000000000000000000000000000"
	for name, tc := range map[string]struct {
		in      string
		refs    map[string]string
		want    []string // lines the output must hold
		wantErr string
	}{
		"containers, init containers and the probe image argument": {
			in:   deployment,
			refs: map[string]string{"isochron/manager": pinned, "isochron/rtprobe": "reg.example/rtprobe:v1"},
			want: []string{"image: " + pinned, "- --probe-image=reg.example/rtprobe:v1", "- --leader-elect", "image: not-a-container"},
		},
		"an image no -image names": {
			in:      deployment,
			refs:    map[string]string{"isochron/manager": pinned},
			wantErr: "isochron/rtprobe:v0.1.0",
		},
		"an -image that names no image": {
			in:      deployment,
			refs:    map[string]string{"isochron/manager": pinned, "isochron/rtprobe": "r", "isochron/gone": "g"},
			wantErr: "isochron/gone",
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := rewrite([]byte(tc.in), tc.refs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("rewrite() error = %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range tc.want {
				if !strings.Contains(string(got), line) {
					t.Errorf("output lacks %q:\n%s", line, got)
				}
			}
			if n := strings.Count(string(got), "image: "+pinned); n != 2 {
				t.Errorf("manager image set %d times, want 2 (container, init container):\n%s", n, got)
			}
			if !strings.Contains(string(got), "\n---\n") {
				t.Errorf("documents not separated:\n%s", got)
			}
		})
	}
}
