// Package cli implements isochronctl: it reads objects from files, validates and
// defaults CrawlerVMs exactly as the API server would, and runs the same pure core as
// the operator.
package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/config/crd"
	"isochron.io/isochron/internal/validation"
)

// Inventory is what isochronctl read from its input files.
type Inventory struct {
	CrawlerVMs []*isov1.CrawlerVM
	Nodes      []*corev1.Node
	Profiles   []isov1.ContentionProfile
	Networks   []*nadv1.NetworkAttachmentDefinition
	// Calibrations are the nodes' NodeCalibrations: the corrections from probes the
	// operator applies, which plan applies too.
	Calibrations []isov1.NodeCalibration
	// KubeVirt is the cluster's KubeVirt resource, nil when the input has none: its
	// configuration sets what launchers' support containers request (KubeVirt's defaults
	// without it).
	KubeVirt *kubevirtv1.KubeVirt
	// Residents are crawlers a live cluster has placed already (Live): they keep the
	// reservations in their status, and plan places CrawlerVMs beside them. None in files.
	Residents []*isov1.CrawlerVM

	// namespace is the namespace of CrawlerVMs that name none.
	namespace string
}

// InputError is invalid input: the CLI exits 2 with it.
type InputError struct{ Problems []string }

func (e *InputError) Error() string { return strings.Join(e.Problems, "\n") }

// Load reads every YAML or JSON document (multi-document files, Lists, and directories
// of .yaml/.yml/.json files) at paths. "-" is standard input.
func Load(ctx context.Context, paths []string, stdin io.Reader) (*Inventory, error) {
	return LoadIn(ctx, "default", paths, stdin)
}

// LoadIn is Load with CrawlerVMs that name no namespace in namespace (kubectl's -n).
func LoadIn(ctx context.Context, namespace string, paths []string, stdin io.Reader) (*Inventory, error) {
	v, err := newValidators()
	if err != nil {
		return nil, err
	}
	inv := &Inventory{namespace: namespace}
	var problems []string
	for _, p := range paths {
		files, err := expand(p)
		if err != nil {
			return nil, &InputError{Problems: []string{err.Error()}}
		}
		for _, f := range files {
			problems = append(problems, inv.loadFile(ctx, v, f, stdin)...)
		}
	}
	if len(problems) > 0 {
		return nil, &InputError{Problems: problems}
	}
	sort.Slice(inv.CrawlerVMs, func(i, j int) bool { return key(inv.CrawlerVMs[i]) < key(inv.CrawlerVMs[j]) })
	sort.Slice(inv.Nodes, func(i, j int) bool { return inv.Nodes[i].Name < inv.Nodes[j].Name })
	return inv, nil
}

func key(c *isov1.CrawlerVM) string { return c.Namespace + "/" + c.Name }

func expand(p string) ([]string, error) {
	if p == "-" {
		return []string{p}, nil
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if !fi.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml", ".json":
			if !d.IsDir() && filepath.Base(path) != "kustomization.yaml" {
				files = append(files, path)
			}
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

func (inv *Inventory) loadFile(ctx context.Context, v validators, name string, stdin io.Reader) []string {
	r := stdin
	if name != "-" {
		b, err := os.ReadFile(name)
		if err != nil {
			return []string{err.Error()}
		}
		r = bytes.NewReader(b)
	}
	var problems []string
	docs := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for i := 1; ; i++ {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		where := fmt.Sprintf("%s: document %d", name, i)
		if err != nil {
			return append(problems, fmt.Sprintf("%s: %v", where, err))
		}
		j, err := utilyaml.ToJSON(doc)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		if string(bytes.TrimSpace(j)) == "null" {
			continue // an empty document
		}
		problems = append(problems, inv.add(ctx, v, where, j)...)
	}
	return problems
}

func (inv *Inventory) add(ctx context.Context, v validators, where string, j []byte) []string {
	obj := map[string]any{}
	if err := utiljson.Unmarshal(j, &obj); err != nil {
		return []string{fmt.Sprintf("%s: %v", where, err)}
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	switch {
	case strings.HasSuffix(kind, "List") && apiVersion == "v1":
		items, _ := obj["items"].([]any)
		var problems []string
		for i, it := range items {
			b, err := utiljson.Marshal(it)
			if err != nil {
				return []string{fmt.Sprintf("%s: items[%d]: %v", where, i, err)}
			}
			problems = append(problems, inv.add(ctx, v, fmt.Sprintf("%s: items[%d]", where, i), b)...)
		}
		return problems
	case apiVersion == isov1.GroupVersion.String() && kind == "CrawlerVM":
		md, _ := obj["metadata"].(map[string]any)
		if md == nil {
			md = map[string]any{}
			obj["metadata"] = md
		}
		if ns, _ := md["namespace"].(string); ns == "" {
			md["namespace"] = inv.namespace // as kubectl does: -n, or default
		}
		name := fmt.Sprintf("%s: CrawlerVM %v/%v", where, md["namespace"], md["name"])
		if n, _ := md["name"].(string); n == "" {
			return []string{fmt.Sprintf("%s: CrawlerVM: metadata.name: Required value", where)}
		}
		if errs := v.crawlers.DefaultAndValidate(ctx, obj); len(errs) > 0 {
			out := make([]string, 0, len(errs))
			for _, e := range errs {
				out = append(out, fmt.Sprintf("%s: %s", name, e.Error()))
			}
			return out
		}
		c := &isov1.CrawlerVM{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, c); err != nil {
			return []string{fmt.Sprintf("%s: %v", name, err)}
		}
		// The input is what users apply; status is the operator's. Dropping it makes render
		// and plan decide alike, from scratch, whatever `kubectl get -o yaml` left in.
		c.Status = isov1.CrawlerVMStatus{}
		inv.CrawlerVMs = append(inv.CrawlerVMs, c)
	case apiVersion == isov1.GroupVersion.String() && kind == "ContentionProfile":
		p := isov1.ContentionProfile{}
		if problems := decode(ctx, v.profiles, where, kind, obj, &p); problems != nil {
			return problems
		}
		inv.Profiles = append(inv.Profiles, p)
	case apiVersion == isov1.GroupVersion.String() && kind == "NodeCalibration":
		c := isov1.NodeCalibration{}
		if problems := decode(ctx, v.calibrations, where, kind, obj, &c); problems != nil {
			return problems
		}
		inv.Calibrations = append(inv.Calibrations, c)
	case apiVersion == "v1" && kind == "Node":
		n := &corev1.Node{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, n); err != nil {
			return []string{fmt.Sprintf("%s: Node: %v", where, err)}
		}
		inv.Nodes = append(inv.Nodes, n)
	case apiVersion == nadv1.SchemeGroupVersion.String() && kind == "NetworkAttachmentDefinition":
		n := &nadv1.NetworkAttachmentDefinition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, n); err != nil {
			return []string{fmt.Sprintf("%s: NetworkAttachmentDefinition: %v", where, err)}
		}
		inv.Networks = append(inv.Networks, n)
	case apiVersion == kubevirtv1.GroupVersion.String() && kind == "KubeVirt":
		kv := &kubevirtv1.KubeVirt{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, kv); err != nil {
			return []string{fmt.Sprintf("%s: KubeVirt: %v", where, err)}
		}
		if inv.KubeVirt != nil {
			return []string{fmt.Sprintf("%s: KubeVirt %s/%s: the input already has KubeVirt %s/%s; a cluster runs one, pass only that", where, kv.Namespace, kv.Name, inv.KubeVirt.Namespace, inv.KubeVirt.Name)}
		}
		inv.KubeVirt = kv
	case kind == "Namespace" || kind == "Kustomization":
		// Context that travels with the crawlers in a GitOps tree; nothing to do.
	default:
		return []string{fmt.Sprintf("%s: %s %s is not something isochronctl reads; it takes CrawlerVM, ContentionProfile and NodeCalibration (isochron.io/v1alpha1), Node (v1), NetworkAttachmentDefinition (k8s.cni.cncf.io/v1), KubeVirt (kubevirt.io/v1) and v1 Lists of them", where, apiVersion, kind)}
	}
	return nil
}

// decode validates obj against its CRD's schema, with its defaults, and converts it
// into out; it returns the problems, each naming the object.
func decode(ctx context.Context, v *validation.Validator, where, kind string, obj map[string]any, out any) []string {
	name := fmt.Sprintf("%s: %s %v", where, kind, obj["metadata"])
	if md, ok := obj["metadata"].(map[string]any); ok {
		name = fmt.Sprintf("%s: %s %v", where, kind, md["name"])
	}
	if errs := v.DefaultAndValidate(ctx, obj); len(errs) > 0 {
		out := make([]string, 0, len(errs))
		for _, e := range errs {
			out = append(out, fmt.Sprintf("%s: %s", name, e.Error()))
		}
		return out
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, out); err != nil {
		return []string{fmt.Sprintf("%s: %v", name, err)}
	}
	return nil
}

type validators struct{ crawlers, profiles, calibrations *validation.Validator }

func newValidators() (validators, error) {
	var v validators
	for _, c := range []struct {
		into **validation.Validator
		crd  []byte
	}{{&v.crawlers, crd.CrawlerVMs}, {&v.profiles, crd.ContentionProfiles}, {&v.calibrations, crd.NodeCalibrations}} {
		val, err := validation.New(c.crd, isov1.GroupVersion.Version)
		if err != nil {
			return validators{}, err
		}
		*c.into = val
	}
	return v, nil
}
