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
)

// probeImageArg is the manager's argument that names the rtprobe image its probe Jobs
// and agent disks run (and the admission policy isochron-manager-probe-image admits).
const probeImageArg = "--probe-image="

// rewrite sets, in every document of the YAML stream in, the image of each container
// (containers, initContainers, ephemeralContainers) and each --probe-image= argument to refs[its repository]. It fails on an image refs does not
// name, and on an entry of refs no image used.
func rewrite(in []byte, refs map[string]string) ([]byte, error) {
	used := map[string]bool{}
	var unknown []string
	replace := func(image string) (string, bool) {
		ref, ok := refs[repository(image)]
		if !ok {
			unknown = append(unknown, image)
			return image, false
		}
		used[repository(image)] = true
		return ref, true
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
		walk(&doc, replace)
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

// containerLists are the keys of a pod spec's lists of containers.
var containerLists = map[string]bool{"containers": true, "initContainers": true, "ephemeralContainers": true}

// walk calls replace on the image of every container, and every --probe-image= item of
// a list, under n, and sets what it returns.
func walk(n *yaml.Node, replace func(string) (string, bool)) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if containerLists[k.Value] && v.Kind == yaml.SequenceNode {
				for _, c := range v.Content {
					setImage(c, replace)
				}
			}
			walk(v, replace)
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			if image, ok := strings.CutPrefix(item.Value, probeImageArg); ok && item.Kind == yaml.ScalarNode {
				if ref, ok := replace(image); ok {
					item.Value, item.Style = probeImageArg+ref, 0
				}
				continue
			}
			walk(item, replace)
		}
	case yaml.DocumentNode:
		for _, c := range n.Content {
			walk(c, replace)
		}
	}
}

// setImage replaces the image of container c.
func setImage(c *yaml.Node, replace func(string) (string, bool)) {
	if c.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(c.Content); i += 2 {
		if k, v := c.Content[i], c.Content[i+1]; k.Value == "image" && v.Kind == yaml.ScalarNode {
			if ref, ok := replace(v.Value); ok {
				v.Value, v.Style = ref, 0
			}
		}
	}
}

// repository is image without its digest and tag: isochron/manager of
// isochron/manager:v0.1.0, localhost:5000/manager of localhost:5000/manager@sha256:...
func repository(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}
