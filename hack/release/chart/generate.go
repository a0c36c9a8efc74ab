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
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"isochron.io/isochron/hack/release/internal/imageref"
)

// source is what the chart is made from.
type source struct {
	defaultBuild, monitoringBuild []byte
	// images maps each image repository config/ names (isochron/manager) to the
	// chart's name of it (manager).
	images   map[string]string
	registry string
	version  string
	// digests are the release's image digests by name, the default image.digests.
	digests map[string]string
}

// The labels and annotations the chart sets and what config/ sets them to.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	labelComponent = "app.kubernetes.io/component"
	labelChart     = "helm.sh/chart"
	// annotationResourcePolicy "keep" makes helm uninstall (and an upgrade that drops
	// the object) leave it.
	annotationResourcePolicy = "helm.sh/resource-policy"
	managedByKustomize       = "kustomize"
)

// kept are the components helm uninstall leaves, as make undeploy does: the API (the
// CRDs and the policy that keeps them) and the settings (the namespace isochron-system,
// its ConfigMaps).
var kept = map[string]bool{"api": true, "settings": true}

// generate returns the chart's files by their path in the chart.
func generate(s source) (map[string][]byte, error) {
	g := &generator{source: s, placeholders: map[string]placeholder{}, used: map[string]bool{}}
	files := map[string][]byte{}
	for _, in := range []struct {
		build      []byte
		dir        string
		monitoring bool
	}{{s.defaultBuild, "templates", false}, {s.monitoringBuild, "templates/monitoring", true}} {
		docs, err := decode(in.build)
		if err != nil {
			return nil, err
		}
		for _, doc := range docs {
			path, data, err := g.object(doc, in.dir, in.monitoring)
			if err != nil {
				return nil, err
			}
			if _, dup := files[path]; dup {
				return nil, fmt.Errorf("two objects would be written to %s", path)
			}
			files[path] = data
		}
	}
	if err := g.check(); err != nil {
		return nil, err
	}
	values, err := g.values()
	if err != nil {
		return nil, err
	}
	files["Chart.yaml"] = []byte(fmt.Sprintf(chartYAML, strings.TrimPrefix(s.version, "v"), s.version))
	files["values.yaml"] = values
	files["templates/_helpers.tpl"] = []byte(helpers)
	files["templates/NOTES.txt"] = []byte(notes)
	return files, nil
}

// generator turns objects into templates, recording what values they read.
type generator struct {
	source
	// placeholders are the scalars set in place of template actions while an object is
	// still YAML, replaced in its text once it is encoded.
	placeholders map[string]placeholder
	used         map[string]bool // the image repositories of source.images seen
	unknown      []string        // images no -image names
	// nodeSelector is the NIC agent's in config/, the default nicAgent.nodeSelector.
	nodeSelector *yaml.Node
	// prometheusSA is the ServiceAccount config/monitoring binds, namespace/name.
	prometheusSA string
	podSpecs     int // pod templates given imagePullSecrets
	extraArgs    int // containers given manager.extraArgs
}

// placeholder is either an action that replaces the placeholder in its line (inline),
// or lines that replace the whole line the placeholder is on, given its indentation.
type placeholder struct {
	inline string
	block  func(indent string) string
}

func (g *generator) placeholder(p placeholder) *yaml.Node {
	name := fmt.Sprintf("__isochron_chart_%d__", len(g.placeholders))
	g.placeholders[name] = p
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}
}

// object returns the chart's file of one object of a kustomize build.
func (g *generator) object(doc *yaml.Node, dir string, monitoring bool) (string, []byte, error) {
	obj := doc.Content[0]
	kind, name := str(get(obj, "kind")), str(get(get(obj, "metadata"), "name"))
	if kind == "" || name == "" {
		return "", nil, fmt.Errorf("an object without kind or name in the build of config/")
	}
	meta := get(obj, "metadata")
	labels := get(meta, "labels")

	if kind == "CustomResourceDefinition" {
		// crds/ is not templated: what Helm installs is this file as it is.
		if v := get(labels, labelManagedBy); v != nil && v.Value == managedByKustomize {
			v.Value = "Helm"
		}
		data, err := encode(doc)
		return "crds/" + name + ".yaml", data, err
	}

	if v := get(labels, labelManagedBy); v != nil && v.Value == managedByKustomize {
		set(labels, labelManagedBy, g.placeholder(placeholder{inline: "{{ .Release.Service }}"}))
	}
	if labels != nil {
		set(labels, labelChart, g.placeholder(placeholder{inline: `{{ include "isochron.chart" . }}`}))
	}
	if kept[str(get(labels, labelComponent))] {
		ann := get(meta, "annotations")
		if ann == nil {
			ann = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			set(meta, "annotations", ann)
		}
		set(ann, annotationResourcePolicy, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "keep"})
	}

	g.images(obj)
	if !monitoring && (kind == "Deployment" || kind == "DaemonSet") {
		if err := g.podSpec(kind, name, get(get(get(obj, "spec"), "template"), "spec")); err != nil {
			return "", nil, err
		}
	}
	if monitoring && kind == "ClusterRoleBinding" {
		if err := g.prometheusSubjects(name, get(obj, "subjects")); err != nil {
			return "", nil, err
		}
	}

	data, err := encode(doc)
	if err != nil {
		return "", nil, err
	}
	text := g.substitute(escape(string(data)))
	from := "config/default"
	if monitoring {
		from = "config/monitoring"
	}
	text = fmt.Sprintf("# %s %s, from %s by make helm-chart (hack/release/chart): edit config/, not this file.\n", kind, name, from) + text
	if monitoring {
		text = "{{- if .Values.monitoring.enabled }}\n" + text + "{{- end }}\n"
	}
	return fmt.Sprintf("%s/%s-%s.yaml", dir, strings.ToLower(kind), name), []byte(text), nil
}

// images sets every container's image, and every --probe-image= argument, under n
// (imageref.Each) to the chart's image of its repository.
func (g *generator) images(n *yaml.Node) {
	imageref.Each(n, func(v *yaml.Node, prefix string) {
		src := imageref.Repository(strings.TrimPrefix(v.Value, prefix))
		name, ok := g.source.images[src]
		if !ok {
			g.unknown = append(g.unknown, v.Value)
			return
		}
		g.used[src] = true
		*v = *g.placeholder(placeholder{inline: prefix + fmt.Sprintf(`{{ include "isochron.image" (dict "root" $ "name" %q) }}`, name)})
	})
}

// podSpec gives the pod template of config/default's Deployment or DaemonSet the
// values' imagePullSecrets, and the DaemonSet (the NIC agent's) the values' nodeSelector.
func (g *generator) podSpec(kind, name string, spec *yaml.Node) error {
	if spec == nil {
		return fmt.Errorf("%s %s has no pod template", kind, name)
	}
	if get(spec, "imagePullSecrets") != nil {
		return fmt.Errorf("%s %s sets imagePullSecrets in config/: the chart's value would replace them", kind, name)
	}
	g.podSpecs++
	set(spec, "imagePullSecrets", g.placeholder(placeholder{block: func(indent string) string {
		return indent + "{{- with .Values.imagePullSecrets }}\n" +
			indent + "imagePullSecrets:\n" +
			indent + fmt.Sprintf("  {{- toYaml . | nindent %d }}\n", len(indent)+2) +
			indent + "{{- end }}"
	}}))
	if kind == "Deployment" {
		return g.managerArgs(name, spec)
	}
	if g.nodeSelector != nil {
		return fmt.Errorf("DaemonSet %s: config/default has two DaemonSets, the chart's nicAgent.nodeSelector is the NIC agent's", name)
	}
	g.nodeSelector = get(spec, "nodeSelector")
	if g.nodeSelector == nil {
		g.nodeSelector = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	set(spec, "nodeSelector", g.placeholder(placeholder{block: func(indent string) string {
		return indent + "nodeSelector:\n" +
			indent + fmt.Sprintf("  {{- toYaml .Values.nicAgent.nodeSelector | nindent %d }}", len(indent)+2)
	}}))
	return nil
}

// managerArgs appends the values' manager.extraArgs to the arguments of the container
// manager of config/default's Deployment (the manager's).
func (g *generator) managerArgs(name string, spec *yaml.Node) error {
	var args *yaml.Node
	if cs := get(spec, "containers"); cs != nil {
		for _, c := range cs.Content {
			if str(get(c, "name")) == "manager" {
				args = get(c, "args")
			}
		}
	}
	if args == nil || args.Kind != yaml.SequenceNode {
		return fmt.Errorf("Deployment %s has no container manager with args for the chart's manager.extraArgs", name)
	}
	if g.extraArgs != 0 {
		return fmt.Errorf("Deployment %s: config/default has two Deployments, the chart's manager.extraArgs is the manager's", name)
	}
	g.extraArgs++
	args.Content = append(args.Content, g.placeholder(placeholder{block: func(indent string) string {
		return indent + "{{- with .Values.manager.extraArgs }}\n" +
			indent + fmt.Sprintf("{{- toYaml . | nindent %d }}\n", len(indent)) +
			indent + "{{- end }}"
	}}))
	return nil
}

// prometheusSubjects sets the ServiceAccount subjects of a ClusterRoleBinding of
// config/monitoring (Prometheus') to the values' monitoring.prometheusServiceAccount.
func (g *generator) prometheusSubjects(name string, subjects *yaml.Node) error {
	if subjects == nil {
		return nil
	}
	for _, s := range subjects.Content {
		if str(get(s, "kind")) != "ServiceAccount" {
			continue
		}
		sa := str(get(s, "namespace")) + "/" + str(get(s, "name"))
		if g.prometheusSA != "" && g.prometheusSA != sa {
			return fmt.Errorf("ClusterRoleBinding %s binds %s, another binds %s: config/monitoring should name one Prometheus", name, sa, g.prometheusSA)
		}
		g.prometheusSA = sa
		set(s, "name", g.placeholder(placeholder{inline: "{{ .Values.monitoring.prometheusServiceAccount.name }}"}))
		set(s, "namespace", g.placeholder(placeholder{inline: "{{ .Values.monitoring.prometheusServiceAccount.namespace }}"}))
	}
	return nil
}

// check fails on what the chart would get wrong: images that are not the release's,
// images of the release the chart never names, and a missing manager, NIC agent or
// Prometheus.
func (g *generator) check() error {
	var errs []error
	if len(g.unknown) > 0 {
		errs = append(errs, fmt.Errorf("images not of the release (no -image names their repository): %s", strings.Join(g.unknown, ", ")))
	}
	var unused []string
	for src := range g.source.images {
		if !g.used[src] {
			unused = append(unused, src)
		}
	}
	if len(unused) > 0 {
		sort.Strings(unused)
		errs = append(errs, fmt.Errorf("no image of the builds is of %s: does config/ still name it so?", strings.Join(unused, ", ")))
	}
	if g.nodeSelector == nil {
		errs = append(errs, errors.New("config/default has no DaemonSet (the NIC agent's) for nicAgent.nodeSelector"))
	}
	if g.extraArgs == 0 {
		errs = append(errs, errors.New("config/default has no Deployment (the manager's) for manager.extraArgs"))
	}
	if g.prometheusSA == "" {
		errs = append(errs, errors.New("config/monitoring binds no ServiceAccount (Prometheus') for monitoring.prometheusServiceAccount"))
	}
	return errors.Join(errs...)
}

// delimiters are Go template delimiters in config/'s text (the alerts' {{ $labels }},
// the dashboard's legends), which the chart must print as they are.
var delimiters = regexp.MustCompile(`\{\{|\}\}`)

func escape(text string) string {
	return delimiters.ReplaceAllStringFunc(text, func(d string) string { return `{{ "` + d + `" }}` })
}

var placeholderRE = regexp.MustCompile(`__isochron_chart_[0-9]+__`)

// substitute replaces the placeholders of text by their template actions: a block
// placeholder's whole line, an inline one in its line.
func (g *generator) substitute(text string) string {
	lines := strings.SplitAfter(text, "\n")
	for i, line := range lines {
		if p := g.placeholders[placeholderRE.FindString(line)]; p.block != nil {
			indent := line[:len(line)-len(strings.TrimLeft(line, " "))]
			lines[i] = p.block(indent) + "\n"
			continue
		}
		lines[i] = placeholderRE.ReplaceAllStringFunc(line, func(name string) string { return g.placeholders[name].inline })
	}
	return strings.Join(lines, "")
}

// values returns values.yaml: its defaults are what config/ sets.
func (g *generator) values() ([]byte, error) {
	sel, err := encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{g.nodeSelector}})
	if err != nil {
		return nil, err
	}
	ns, name, _ := strings.Cut(g.prometheusSA, "/")
	digests := "{}"
	if len(g.digests) > 0 {
		names := make([]string, 0, len(g.digests))
		for n := range g.digests {
			names = append(names, n)
		}
		sort.Strings(names)
		digests = ""
		for _, n := range names {
			digests += fmt.Sprintf("\n    %s: %q", n, g.digests[n])
		}
	}
	return []byte(fmt.Sprintf(valuesYAML, g.registry, digests, indent(strings.TrimSpace(string(sel)), "    "), name, ns)), nil
}

func indent(text, prefix string) string {
	if text == "{}" {
		return " {}"
	}
	return "\n" + prefix + strings.ReplaceAll(text, "\n", "\n"+prefix)
}

func decode(build []byte) ([]*yaml.Node, error) {
	var docs []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(build))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the kustomize build: %w", err)
		}
		if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
			docs = append(docs, &doc)
		}
	}
}

func encode(doc *yaml.Node) ([]byte, error) {
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	err := enc.Close()
	return out.Bytes(), err
}

// get returns the value of key in mapping n, or nil.
func get(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// set sets key of mapping n to v, keeping the keys in order.
func set(n *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content[i+1] = v
			return
		}
	}
	i := sort.Search(len(n.Content)/2, func(i int) bool { return n.Content[2*i].Value > key }) * 2
	k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}
	n.Content = append(n.Content[:i], append([]*yaml.Node{k, v}, n.Content[i:]...)...)
}

func str(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}
