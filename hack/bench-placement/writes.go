package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/test/support/testenv"
)

// writeCost is what one kind of write costs the API server and etcd, in CPU per write.
type writeCost struct {
	what string
	// writes were made for decisions; the CPU is per decision.
	writes, decisions int
	took              time.Duration
	apiserver, etcd   time.Duration
	objectBytes       int
}

// measureWrites times, on the same API server, the write each side makes per decision and
// two controls (docs/benchmarks.md, "What a decision's write costs"):
//
//   - a CrawlerVM's status written as the manager writes a decision (a JSON merge patch
//     with an optimistic lock), on a fresh copy of each crawler the manager decided;
//   - the same spec and status in a custom resource without a schema
//     (x-kubernetes-preserve-unknown-fields): what isochron's schema adds;
//   - a custom resource whose status is the node's name alone: the floor of a custom
//     resource write;
//   - a pod's binding, as kube-scheduler writes it (protobuf).
//
// Each runs 16 writes at a time, with nothing else running; the CPU is each process's
// user and system time over the writes.
func measureWrites(ctx context.Context, env *testenv.Env, decided []isov1.CrawlerVM) ([]writeCost, error) {
	apiserver, err := childPID("kube-apiserver")
	if err != nil {
		return nil, err
	}
	etcd, err := childPID("etcd")
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, isov1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	for _, ns := range []string{"writes-crawlervm", "writes-copy", "writes-mark", "writes-binding", "writes-node"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
	}
	if err := createCRDs(ctx, c); err != nil {
		return nil, err
	}
	n := len(decided)
	// cpus is the API server's and etcd's CPU time so far.
	cpus := func() (api, db time.Duration, err error) {
		if api, err = cpuTime(apiserver); err != nil {
			return 0, 0, err
		}
		db, err = cpuTime(etcd)
		return api, db, err
	}
	// measure prepares prepared objects, then makes writes writes for the n decisions,
	// 16 at a time, and divides the CPU it took by n.
	measure := func(what string, prepared int, prepare func(i int) error, writes int, write func(i int) error) (writeCost, error) {
		if err := parallel(16, prepared, prepare); err != nil {
			return writeCost{}, fmt.Errorf("%s: preparing: %w", what, err)
		}
		a0, e0, err := cpus()
		if err != nil {
			return writeCost{}, err
		}
		start := time.Now()
		if err := parallel(16, writes, write); err != nil {
			return writeCost{}, fmt.Errorf("%s: %w", what, err)
		}
		took := time.Since(start)
		a1, e1, err := cpus()
		if err != nil {
			return writeCost{}, err
		}
		return writeCost{what: what, writes: writes, decisions: n, took: took, apiserver: (a1 - a0) / time.Duration(n), etcd: (e1 - e0) / time.Duration(n)}, nil
	}
	var out []writeCost

	// The manager's decision: a merge patch of status, locked on the resourceVersion.
	fresh := make([]*isov1.CrawlerVM, n)
	res, err := measure("CrawlerVM status, as the manager writes a decision", n,
		func(i int) error {
			fresh[i] = &isov1.CrawlerVM{ObjectMeta: metav1.ObjectMeta{Namespace: "writes-crawlervm", Name: decided[i].Name}, Spec: decided[i].Spec}
			return c.Create(ctx, fresh[i])
		},
		n, func(i int) error {
			before := fresh[i].DeepCopy()
			fresh[i].Status = decided[i].Status
			return c.Status().Patch(ctx, fresh[i], client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		})
	if err != nil {
		return nil, err
	}
	res.objectBytes = objectBytes(ctx, c, isov1.GroupVersion.WithKind("CrawlerVM"), fresh[0])
	out = append(out, res)

	// The same content without a schema.
	copies := make([]*unstructured.Unstructured, n)
	res, err = measure("the same spec and status in a custom resource without a schema", n,
		func(i int) error {
			spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&decided[i].Spec)
			if err != nil {
				return err
			}
			copies[i] = benchObject("Copy", "writes-copy", decided[i].Name)
			copies[i].Object["spec"] = spec
			return c.Create(ctx, copies[i])
		},
		n, func(i int) error {
			before := copies[i].DeepCopy()
			status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&decided[i].Status)
			if err != nil {
				return err
			}
			copies[i].Object["status"] = status
			return c.Status().Patch(ctx, copies[i], client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		})
	if err != nil {
		return nil, err
	}
	res.objectBytes = objectBytes(ctx, c, copies[0].GroupVersionKind(), copies[0])
	out = append(out, res)

	// The floor: a custom resource whose status is a node's name.
	marks := make([]*unstructured.Unstructured, n)
	res, err = measure("a custom resource whose status is the node's name alone", n,
		func(i int) error {
			marks[i] = benchObject("Mark", "writes-mark", decided[i].Name)
			return c.Create(ctx, marks[i])
		},
		n, func(i int) error {
			before := marks[i].DeepCopy()
			node := ""
			if p := decided[i].Status.Placement; p != nil {
				node = p.Node
			}
			marks[i].Object["status"] = map[string]any{"node": node}
			return c.Status().Patch(ctx, marks[i], client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		})
	if err != nil {
		return nil, err
	}
	res.objectBytes = objectBytes(ctx, c, marks[0].GroupVersionKind(), marks[0])
	out = append(out, res)

	// kube-scheduler's decision: a binding, in protobuf as its client sends it.
	cfg := *env.Config
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.QPS, cfg.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		return nil, err
	}
	if err := waitDefaultServiceAccount(ctx, env, "writes-binding"); err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, n)
	res, err = measure("a pod's binding, as kube-scheduler writes a decision", n,
		func(i int) error {
			pods[i] = podLike(&decided[i])
			pods[i].Namespace = "writes-binding"
			pods[i].Spec.SchedulerName = "none" // no scheduler binds it but the harness
			return c.Create(ctx, pods[i])
		},
		n, func(i int) error {
			node := "rt-0000"
			if p := decided[i].Status.Placement; p != nil {
				node = p.Node
			}
			return cs.CoreV1().Pods("writes-binding").Bind(ctx, &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Namespace: "writes-binding", Name: pods[i].Name, UID: pods[i].UID},
				Target:     corev1.ObjectReference{Kind: "Node", Name: node},
			}, metav1.CreateOptions{})
		})
	if err != nil {
		return nil, err
	}
	res.objectBytes = objectBytes(ctx, c, corev1.SchemeGroupVersion.WithKind("Pod"), pods[0])
	out = append(out, res)

	// A design isochron does not have: the reservations of each node in one object of
	// that node, each batch of decisions (16, the manager's default batch) written as one
	// patch per node it placed crawlers on (nodeBatches: the best case).
	groups, nodes := nodeBatches(decided, 16)

	res, err = measure("a reservation object per node, a batch's decisions on it in one patch (not isochron's design)", len(nodes),
		func(i int) error {
			o := benchObject("Copy", "writes-node", nodes[i])
			o.Object["spec"] = map[string]any{"crawlers": map[string]any{}}
			return c.Create(ctx, o)
		},
		len(groups), func(i int) error {
			entries := map[string]any{}
			for _, k := range groups[i].crawlers {
				s := decided[k].Status.Sizing
				entries[decided[k].Namespace+"."+decided[k].Name] = map[string]any{
					"uid": string(decided[k].UID), "vcpus": s.VCPUs, "hostCPUs": s.HostCPUs, "cpuRequest": s.CPURequest.String(), "memory": s.Memory.String(),
				}
			}
			body, err := json.Marshal(map[string]any{"spec": map[string]any{"crawlers": entries}})
			if err != nil {
				return err
			}
			return c.Patch(ctx, benchObject("Copy", "writes-node", groups[i].node), client.RawPatch(types.MergePatchType, body))
		})
	if err != nil {
		return nil, err
	}
	res.objectBytes = objectBytes(ctx, c, benchObject("Copy", "", "").GroupVersionKind(), benchObject("Copy", "writes-node", nodes[0]))
	out = append(out, res)
	return out, nil
}

// nodeGroup is the crawlers (indices into decided) one batch placed on one node.
type nodeGroup struct {
	node     string
	crawlers []int
}

// nodeBatches cuts the placed crawlers of decided into batches of size, in node order
// (pack fills one node after another, so a batch's decisions land on one or two nodes;
// the best case for this design), and each batch into its nodes' groups; nodes are the
// nodes used.
func nodeBatches(decided []isov1.CrawlerVM, size int) ([]nodeGroup, []string) {
	order := make([]int, 0, len(decided))
	for k := range decided {
		if decided[k].Status.Placement != nil && decided[k].Status.Sizing != nil {
			order = append(order, k)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		return decided[order[a]].Status.Placement.Node < decided[order[b]].Status.Placement.Node
	})
	var groups []nodeGroup
	seen := map[string]bool{}
	var nodes []string
	for start := 0; start < len(order); start += size {
		at := map[string]int{}
		for _, k := range order[start:min(start+size, len(order))] {
			p := decided[k].Status.Placement
			if !seen[p.Node] {
				seen[p.Node] = true
				nodes = append(nodes, p.Node)
			}
			g, ok := at[p.Node]
			if !ok {
				g = len(groups)
				at[p.Node] = g
				groups = append(groups, nodeGroup{node: p.Node})
			}
			groups[g].crawlers = append(groups[g].crawlers, k)
		}
	}
	return groups, nodes
}

func printWrites(costs []writeCost) {
	fmt.Printf("\nWhat the writes for one decision cost, %d decisions, 16 writes at a time:\n\n", costs[0].decisions)
	fmt.Printf("| write | writes | object (JSON) | kube-apiserver CPU per decision | etcd CPU per decision | decisions written per second |\n|---|---:|---:|---:|---:|---:|\n")
	for _, c := range costs {
		fmt.Printf("| %s | %d | %d B | %.2f ms | %.2f ms | %.0f |\n", c.what, c.writes, c.objectBytes,
			float64(c.apiserver.Microseconds())/1000, float64(c.etcd.Microseconds())/1000, float64(c.decisions)/c.took.Seconds())
	}
}

// benchObject is an unstructured object of the harness's own custom resources.
func benchObject(kind, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("bench.isochron.io/v1")
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// createCRDs creates the controls' custom resources and waits until they are served.
func createCRDs(ctx context.Context, c client.Client) error {
	status := &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
	open := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
	crds := []*apiextensionsv1.CustomResourceDefinition{
		crd("Copy", "copies", apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": open, "status": open}}, status),
		crd("Mark", "marks", apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"node": {Type: "string"}}},
		}}, status),
	}
	for _, d := range crds {
		if err := c.Create(ctx, d); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, d := range crds {
		for {
			if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
				return err
			}
			if established(d) {
				if _, err := c.RESTMapper().RESTMapping(schema.GroupKind{Group: d.Spec.Group, Kind: d.Spec.Names.Kind}, "v1"); err == nil {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not served after a minute", d.Name)
			}
			time.Sleep(100 * time.Millisecond) // polling the API server for a condition
		}
	}
	return nil
}

func crd(kind, plural string, schema apiextensionsv1.JSONSchemaProps, sub *apiextensionsv1.CustomResourceSubresources) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".bench.isochron.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "bench.isochron.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, Plural: plural},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true, Subresources: sub,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &schema},
			}},
		},
	}
}

func established(d *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// objectBytes is the size of the object named like obj, of kind gvk, as the API server
// returns it in JSON, managed fields included.
func objectBytes(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, obj client.Object) int {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), u); err != nil {
		return 0
	}
	b, err := u.MarshalJSON()
	if err != nil {
		return 0
	}
	return len(b)
}

// childPID is the pid of this process's child named comm (envtest's kube-apiserver or
// etcd).
func childPID(comm string) (int, error) {
	self := os.Getpid()
	dirs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0, err
	}
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		open, shut := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || shut < open || s[open+1:shut] != comm {
			continue
		}
		f := strings.Fields(s[shut+2:])
		if ppid, _ := strconv.Atoi(f[1]); ppid == self {
			return strconv.Atoi(strings.Fields(s)[0])
		}
	}
	return 0, fmt.Errorf("no %s started by this process", comm)
}
