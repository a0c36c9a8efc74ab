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
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"isochron.io/isochron/hack/release/internal/imageref"
)

// rewrite sets, in every document of the YAML stream in, the image of each container
// (containers, initContainers, ephemeralContainers) and each --probe-image= argument
// (imageref.Each) to refs[its repository]. It fails on an image refs does not
// name, and on an entry of refs no image used.
func rewrite(in []byte, refs map[string]string) ([]byte, error) {
	used := map[string]bool{}
	var unknown []string
	replace := func(v *yaml.Node, prefix string) {
		image := strings.TrimPrefix(v.Value, prefix)
		ref, ok := refs[imageref.Repository(image)]
		if !ok {
			unknown = append(unknown, image)
			return
		}
		used[imageref.Repository(image)] = true
		v.Value, v.Style = prefix+ref, 0
	}

	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	dec := yaml.NewDecoder(bytes.NewReader(in))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the kustomize build: %w", err)
		}
		imageref.Each(&doc, replace)
		if err := enc.Encode(&doc); err != nil {
			return nil, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("images not of the release (no -image names their repository): %s", strings.Join(unknown, ", "))
	}
	var unused []string
	for src := range refs {
		if !used[src] {
			unused = append(unused, src)
		}
	}
	if len(unused) > 0 {
		sort.Strings(unused)
		return nil, fmt.Errorf("no image of the build is of %s: does config/ still name it so?", strings.Join(unused, ", "))
	}
	return out.Bytes(), nil
}
