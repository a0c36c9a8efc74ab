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
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// The release make builds the chart and the manifests of (make helm-chart
// build-installer), its images pinned by digests.
const (
	registry = "registry.example/isochron"
	version  = "v0.0.0-chart-test"
)

// kubeVersion is what the chart is rendered and linted for: the lowest its kubeVersion
// admits (Helm's library, built without the version of its client-go, says v1.20).
var kubeVersion = &chartutil.KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30"}

var digests = map[string]string{
	"manager":   "sha256:" + strings.Repeat("1", 64),
	"nic-agent": "sha256:" + strings.Repeat("2", 64),
	"rtprobe":   "sha256:" + strings.Repeat("3", 64),
}

// dist is where make wrote the chart (chart/isochron), install.yaml and monitoring.yaml.
var dist string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		tmp, err := os.MkdirTemp("", "isochron-chart-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(tmp)
		dist = tmp
		var lines []string
		for n, d := range digests {
			lines = append(lines, registry+"/"+n+":"+version+"@"+d)
		}
		if err := os.WriteFile(filepath.Join(dist, "digests.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		mk := os.Getenv("MAKE")
		if mk == "" {
			mk = "make"
		}
		cmd := exec.Command(mk, "-C", "../../..", "--no-print-directory", "build-installer", "helm-chart",
			"DIST="+dist, "REGISTRY="+registry, "VERSION="+version)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "%s\nmake build-installer helm-chart: %v\n", out, err)
			return 1
		}
		return m.Run()
	}())
}

// obj is an object of a manifest.
type obj = map[string]any

func TestChartIsTheInstaller(t *testing.T) {
	install := readObjects(t, filepath.Join(dist, "install.yaml"))
	monitoring := readObjects(t, filepath.Join(dist, "monitoring.yaml"))
	for name, tc := range map[string]struct {
		values map[string]any
		want   []obj
	}{
		"default values: install.yaml": {
			want: install,
		},
		"monitoring.enabled: install.yaml and monitoring.yaml": {
			values: map[string]any{"monitoring": map[string]any{"enabled": true}},
			want:   slices.Concat(install, monitoring),
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := render(t, tc.values)
			wantByKey, gotByKey := byKey(t, tc.want), byKey(t, got)
			if diff := cmp.Diff(keys(wantByKey), keys(gotByKey)); diff != "" {
				t.Fatalf("objects by kind/namespace/name (-manifests +chart):\n%s", diff)
			}
			for k, g := range gotByKey {
				checkHelmMetadata(t, k, g, wantByKey[k])
				if diff := cmp.Diff(wantByKey[k], normalise(g)); diff != "" {
					t.Errorf("%s (-manifests +chart, Helm's labels and annotations removed):\n%s", k, diff)
				}
			}
		})
	}
}

// checkHelmMetadata checks the labels and annotations the chart adds to an object of
// the manifests: Helm's, and resource-policy keep on the API and the settings, as make
// undeploy leaves them (CRDs are kept by Helm itself).
func checkHelmMetadata(t *testing.T, key string, got, want obj) {
	t.Helper()
	wantLabels, _ := dig(want, "metadata", "labels").(obj)
	labels, _ := dig(got, "metadata", "labels").(obj)
	crd := got["kind"] == "CustomResourceDefinition"
	if wantLabels["app.kubernetes.io/managed-by"] == "kustomize" && labels["app.kubernetes.io/managed-by"] != "Helm" {
		t.Errorf("%s: label app.kubernetes.io/managed-by = %v, want Helm", key, labels["app.kubernetes.io/managed-by"])
	}
	if wantChart := "isochron-" + strings.TrimPrefix(version, "v"); !crd && labels["helm.sh/chart"] != wantChart {
		t.Errorf("%s: label helm.sh/chart = %v, want %s", key, labels["helm.sh/chart"], wantChart)
	}
	component, _ := wantLabels["app.kubernetes.io/component"].(string)
	keep := dig(got, "metadata", "annotations", "helm.sh/resource-policy") == "keep"
	if wantKeep := !crd && (component == "api" || component == "settings"); keep != wantKeep {
		t.Errorf("%s (component %q): helm.sh/resource-policy keep is %v, want %v", key, component, keep, wantKeep)
	}
}

// normalise removes from an object of the chart what the chart adds to the manifests'.
func normalise(o obj) obj {
	meta := o["metadata"].(obj)
	if labels, ok := meta["labels"].(obj); ok {
		delete(labels, "helm.sh/chart")
		if labels["app.kubernetes.io/managed-by"] == "Helm" {
			labels["app.kubernetes.io/managed-by"] = "kustomize"
		}
	}
	if ann, ok := meta["annotations"].(obj); ok {
		delete(ann, "helm.sh/resource-policy")
		if len(ann) == 0 {
			delete(meta, "annotations")
		}
	}
	return o
}

func TestValuesLandWhereTheyShould(t *testing.T) {
	values := map[string]any{
		"image":            map[string]any{"registry": "mirror.example/isochron", "tag": "v9.9.9"},
		"imagePullSecrets": []any{map[string]any{"name": "pull"}},
		"manager":          map[string]any{"extraArgs": []any{"--probe-image-pull-secret=pull", "--probe-cpu=500m"}},
		"nicAgent":         map[string]any{"nodeSelector": map[string]any{"kubevirt.io/cpumanager": nil, "rt.example/nic": "yes"}},
		"monitoring": map[string]any{
			"enabled":                  true,
			"prometheusServiceAccount": map[string]any{"name": "prometheus", "namespace": "observability"},
		},
	}
	objs := byKey(t, render(t, values))
	manager := objs["Deployment/isochron-system/isochron-controller-manager"]
	agent := objs["DaemonSet/isochron-nic-agent/isochron-nic-agent"]
	if manager == nil || agent == nil {
		t.Fatalf("no manager Deployment or NIC agent DaemonSet among %v", keys(objs))
	}
	pullSecrets := []any{obj{"name": "pull"}}
	managerArgs := dig(manager, "spec", "template", "spec", "containers", 0, "args").([]any)
	for what, tc := range map[string]struct {
		got, want any
	}{
		"manager image": {
			got:  dig(manager, "spec", "template", "spec", "containers", 0, "image"),
			want: "mirror.example/isochron/manager:v9.9.9",
		},
		"manager --probe-image": {
			got:  slices.Contains(managerArgs, any("--probe-image=mirror.example/isochron/rtprobe:v9.9.9")),
			want: true,
		},
		"manager extraArgs after config/'s": {
			got:  managerArgs[len(managerArgs)-2:],
			want: []any{"--probe-image-pull-secret=pull", "--probe-cpu=500m"},
		},
		"NIC agent image": {
			got:  dig(agent, "spec", "template", "spec", "containers", 0, "image"),
			want: "mirror.example/isochron/nic-agent:v9.9.9",
		},
		"manager imagePullSecrets": {
			got:  dig(manager, "spec", "template", "spec", "imagePullSecrets"),
			want: pullSecrets,
		},
		"NIC agent imagePullSecrets": {
			got:  dig(agent, "spec", "template", "spec", "imagePullSecrets"),
			want: pullSecrets,
		},
		"NIC agent nodeSelector (a default key set to null is dropped)": {
			got:  dig(agent, "spec", "template", "spec", "nodeSelector"),
			want: obj{"rt.example/nic": "yes"},
		},
		"Prometheus reads the metrics": {
			got:  dig(objs["ClusterRoleBinding//isochron-metrics-reader-prometheus"], "subjects"),
			want: []any{obj{"kind": "ServiceAccount", "name": "prometheus", "namespace": "observability"}},
		},
		"Prometheus discovers the targets": {
			got:  dig(objs["ClusterRoleBinding//isochron-prometheus-discovery"], "subjects"),
			want: []any{obj{"kind": "ServiceAccount", "name": "prometheus", "namespace": "observability"}},
		},
	} {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", what, diff)
		}
	}

	t.Run("a registry without a tag keeps the release's digests", func(t *testing.T) {
		objs := byKey(t, render(t, map[string]any{"image": map[string]any{"registry": "mirror.example/isochron"}}))
		got := dig(objs["Deployment/isochron-system/isochron-controller-manager"], "spec", "template", "spec", "containers", 0, "image")
		if want := "mirror.example/isochron/manager:" + version + "@" + digests["manager"]; got != want {
			t.Errorf("manager image %v, want %s", got, want)
		}
	})
}

func TestHelmLint(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"default values":     nil,
		"monitoring.enabled": {"monitoring": map[string]any{"enabled": true}},
	} {
		t.Run(name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = "default"
			lint.KubeVersion = kubeVersion
			res := lint.Run([]string{filepath.Join(dist, "chart", "isochron")}, values)
			for _, m := range res.Messages {
				t.Logf("helm lint: %s", m)
			}
			for _, err := range res.Errors {
				t.Errorf("helm lint --strict: %v", err)
			}
		})
	}
}

// render renders the chart with values as helm install --dry-run does without a
// cluster (helm template), CRDs included, and returns its objects.
func render(t *testing.T, values map[string]any) []obj {
	t.Helper()
	chrt, err := loader.Load(filepath.Join(dist, "chart", "isochron"))
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(&action.Configuration{Log: t.Logf})
	install.DryRun, install.ClientOnly, install.IncludeCRDs = true, true, true
	install.ReleaseName, install.Namespace = "isochron", "default"
	install.KubeVersion = kubeVersion
	if values == nil {
		values = map[string]any{}
	}
	rel, err := install.Run(chrt, values)
	if err != nil {
		t.Fatalf("rendering the chart: %v", err)
	}
	return decodeObjects(t, []byte(rel.Manifest))
}

func readObjects(t *testing.T, file string) []obj {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, data)
}

func decodeObjects(t *testing.T, data []byte) []obj {
	t.Helper()
	var objs []obj
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o obj
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
}

// byKey returns objs by kind/namespace/name, failing on two of one key.
func byKey(t *testing.T, objs []obj) map[string]obj {
	t.Helper()
	m := map[string]obj{}
	for _, o := range objs {
		ns, _ := dig(o, "metadata", "namespace").(string)
		name, _ := dig(o, "metadata", "name").(string)
		k := fmt.Sprintf("%s/%s/%s", o["kind"], ns, name)
		if _, dup := m[k]; dup {
			t.Errorf("two objects %s", k)
		}
		m[k] = o
	}
	return m
}

func keys(m map[string]obj) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// dig returns the value at path (map keys and list indexes) in v, or nil.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, ok := v.(obj)
			if !ok {
				return nil
			}
			v = m[p]
		case int:
			l, ok := v.([]any)
			if !ok || p >= len(l) {
				return nil
			}
			v = l[p]
		}
	}
	return v
}
