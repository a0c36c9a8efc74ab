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

// Command chart writes isochron's Helm chart from the kustomize builds of config/default
// and config/monitoring (make helm-chart, hack/make/release.mk), so that the chart and
// dist/install.yaml come from one source:
//
//	chart -registry ghcr.io/isochron -version v0.1.0 -digests dist/digests.txt \
//	  -image isochron/manager=manager ... -default default.yaml -monitoring monitoring.yaml \
//	  -out dist/chart/isochron
//
// Each object is copied as it is, except what the chart's values set (values.yaml says
// each): the images (-image SOURCE=NAME: every image of repository SOURCE, and the
// manager's --probe-image, becomes REGISTRY/NAME:TAG), the manager's and the NIC agent's
// imagePullSecrets, the NIC agent's nodeSelector, monitoring on or off, and the
// ServiceAccount of Prometheus the monitoring RBAC binds. The CRDs go to crds/ (Helm
// installs them and never deletes them); the objects labelled
// app.kubernetes.io/component=api or =settings are kept by helm uninstall.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"isochron.io/isochron/hack/release/internal/imageref"
)

// images is the repeated -image SOURCE=NAME flag.
type images map[string]string

func (m images) String() string { return fmt.Sprint(map[string]string(m)) }

func (m images) Set(s string) error {
	src, name, ok := strings.Cut(s, "=")
	if !ok || src == "" || name == "" {
		return fmt.Errorf("want SOURCE=NAME (isochron/manager=manager), got %q", s)
	}
	m[src] = name
	return nil
}

func main() {
	imgs := images{}
	flag.Var(imgs, "image", "SOURCE=NAME: every image of repository SOURCE becomes the chart's image NAME (repeat for each).")
	registry := flag.String("registry", "", "The registry the chart's images are in by default (values image.registry).")
	version := flag.String("version", "", "The release: the chart's appVersion and default image tag; the chart's version without its leading v.")
	digestsFile := flag.String("digests", "", "REGISTRY/NAME:VERSION@sha256:... lines (make docker-push): the default image.digests; a missing file pins nothing.")
	defaultBuild := flag.String("default", "", "The kustomize build of config/default.")
	monitoringBuild := flag.String("monitoring", "", "The kustomize build of config/monitoring.")
	out := flag.String("out", "", "The chart's directory, replaced whole.")
	flag.Parse()
	if len(imgs) == 0 || *registry == "" || *version == "" || *defaultBuild == "" || *monitoringBuild == "" || *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: chart -registry R -version V -image SOURCE=NAME... [-digests FILE] -default FILE -monitoring FILE -out DIR")
		os.Exit(2)
	}
	if err := run(imgs, *registry, *version, *digestsFile, *defaultBuild, *monitoringBuild, *out); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run(imgs images, registry, version, digestsFile, defaultBuild, monitoringBuild, out string) error {
	def, err := os.ReadFile(defaultBuild)
	if err != nil {
		return err
	}
	mon, err := os.ReadFile(monitoringBuild)
	if err != nil {
		return err
	}
	digests, err := readDigests(digestsFile, imgs, registry, version)
	if err != nil {
		return err
	}
	files, err := generate(source{
		defaultBuild: def, monitoringBuild: mon,
		images: imgs, registry: registry, version: version, digests: digests,
	})
	if err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		f := filepath.Join(out, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, files[p], 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "chart: wrote %s (%d files)\n", out, len(files))
	return nil
}

// readDigests returns, by the chart's image names (the values of imgs), the digests file
// holds for REGISTRY/NAME:VERSION (what make docker-push pushed for this release).
func readDigests(file string, imgs images, registry, version string) (map[string]string, error) {
	all, err := imageref.ReadDigests(file)
	if err != nil {
		return nil, err
	}
	digests := map[string]string{}
	for _, name := range imgs {
		if d, ok := all[imageref.Ref(registry, name, version)]; ok {
			digests[name] = d
		}
	}
	return digests, nil
}
