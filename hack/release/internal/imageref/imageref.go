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

// Package imageref is how the release tools name isochron's images, in one place: a
// release's reference REGISTRY/NAME:VERSION, the repository of a reference, the digests
// make docker-push records (dist/digests.txt: REF@sha256:... a line), and where a
// manifest of config/ names an image (each container's image, and the manager's
// --probe-image argument). imagepush writes the digests; installer and chart read them,
// and replace the images of config/'s builds.
package imageref

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ProbeImageArg is the manager's argument that names the rtprobe image its probe Jobs
// and agent disks run (and the admission policy isochron-manager-probe-image admits).
const ProbeImageArg = "--probe-image="

// Ref is the reference of image name of a release: REGISTRY/NAME:VERSION.
func Ref(registry, name, version string) string {
	return registry + "/" + name + ":" + version
}

// Repository is image without its digest and tag: isochron/manager of
// isochron/manager:v0.1.0, localhost:5000/manager of localhost:5000/manager@sha256:...
func Repository(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// ReadDigests reads the REF@DIGEST lines of file (what make docker-push wrote) into a map
// from REF to DIGEST. No file (an empty name, or one that does not exist) pins nothing.
func ReadDigests(file string) (map[string]string, error) {
	digests := map[string]string{}
	if file == "" {
		return digests, nil
	}
	data, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return digests, nil
	}
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Fields(string(data)) {
		ref, d, ok := strings.Cut(line, "@")
		if !ok || !strings.HasPrefix(d, "sha256:") || len(d) != len("sha256:")+64 {
			return nil, fmt.Errorf("%s: %q is not REF@sha256:<64 hex digits>", file, line)
		}
		digests[ref] = d
	}
	return digests, nil
}

// WriteDigests replaces file with pinned, REF@DIGEST references, one a line in order.
func WriteDigests(file string, pinned []string) error {
	pinned = append([]string(nil), pinned...)
	sort.Strings(pinned)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(pinned, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// containerLists are the keys of a pod spec's lists of containers.
var containerLists = map[string]bool{"containers": true, "initContainers": true, "ephemeralContainers": true}

// Each calls f on every node under n that names an image: the image of every container
// (containers, initContainers, ephemeralContainers; prefix ""), and every item of a list
// that is the manager's --probe-image= argument (prefix ProbeImageArg). The image is
// strings.TrimPrefix(v.Value, prefix); f may replace v.
func Each(n *yaml.Node, f func(v *yaml.Node, prefix string)) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if containerLists[k.Value] && v.Kind == yaml.SequenceNode {
				for _, c := range v.Content {
					if im := value(c, "image"); im != nil && im.Kind == yaml.ScalarNode {
						f(im, "")
					}
				}
			}
			Each(v, f)
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			if item.Kind == yaml.ScalarNode && strings.HasPrefix(item.Value, ProbeImageArg) {
				f(item, ProbeImageArg)
				continue
			}
			Each(item, f)
		}
	case yaml.DocumentNode:
		for _, c := range n.Content {
			Each(c, f)
		}
	}
}

// value is the value of key in mapping n, or nil.
func value(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
