package controllers

import (
	"context"
	"errors"
	"fmt"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/access"
	"isochron.io/isochron/probes/credential"
)

// What the manager is set up with: its scheme and cache, and the settings an
// administrator gives it (which nodes each namespace may reach, the probe master key).

// Scheme holds every API type the operator reads or writes: Kubernetes' own, isochron's,
// KubeVirt's VirtualMachineInstance and Multus's NetworkAttachmentDefinition. The
// manager, the tests and the demo all use this one.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, isov1.AddToScheme, kubevirtv1.AddToScheme, nadv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // only a programming error: the types conflict
		}
	}
	return s
}

// CacheOptions are the informer cache's base options: objects are cached without their
// managedFields, which isochron never reads (it writes merge patches of cached copies and
// server-side applies of objects it builds). With 10,000 crawlers, their VMIs, Services
// and Jobs, they are a large share of the cache. The manager's are ManagerCacheOptions.
func CacheOptions() cache.Options {
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
}

// ManagerCacheOptions are the manager's cache options (and its tests'): what isochron
// owns is cached by its label, and of other objects only what it reads, so that the
// manager's memory grows with its crawlers, not with the cluster:
//
//   - VirtualMachines, VMIs, Jobs, Services and PodDisruptionBudgets only when they carry
//     isochron's crawler label (isov1.LabelCrawlerVM): isochron's own, and the VMIs
//     KubeVirt starts from its VMs. An object of a crawler's name without the label is
//     read from the API server before isochron writes one (getOwned).
//   - Pods only when they are crawlers' virt-launcher pods (KubeVirt's launcher label and
//     the crawler label their VMI passes on). What other pods hold of their nodes is kept
//     by the node books (nodebooks.Books), about a hundred bytes a pod.
//   - VirtualMachines without their template's domain, networks and the rest of what
//     isochron renders but never reads back (stripVM): it compares a VM through the
//     inputs hash on its template, and writes it whole with server-side apply.
//   - Nodes without what placement never reads (their images, volumes, addresses,
//     annotations); migrations without their status beyond the phase (isochron takes over
//     others' migrations of its VMIs, which carry no label of its own).
func ManagerCacheOptions() cache.Options {
	o := CacheOptions()
	owned := cache.ByObject{Label: labels.NewSelector().Add(requirement(isov1.LabelCrawlerVM, selection.Exists))}
	vms := owned
	vms.Transform = chain(o.DefaultTransform, stripVM)
	o.ByObject = map[client.Object]cache.ByObject{
		&kubevirtv1.VirtualMachine{}:         vms,
		&kubevirtv1.VirtualMachineInstance{}: owned,
		&batchv1.Job{}:                       owned,
		&corev1.Service{}:                    owned,
		&policyv1.PodDisruptionBudget{}:      owned,
		&corev1.Pod{}: {Label: labels.NewSelector().Add(requirement(isov1.LabelCrawlerVM, selection.Exists),
			requirement(kubevirtv1.AppLabel, selection.Equals, "virt-launcher"))},
		&corev1.Node{}: {Transform: chain(o.DefaultTransform, stripNode)},
		&kubevirtv1.VirtualMachineInstanceMigration{}: {Transform: chain(o.DefaultTransform, stripMigration)},
	}
	return o
}

func requirement(key string, op selection.Operator, values ...string) labels.Requirement {
	r, err := labels.NewRequirement(key, op, values)
	if err != nil {
		panic(err) // constant keys and values: only a programming error
	}
	return *r
}

// chain applies transforms in turn.
func chain(fs ...toolscache.TransformFunc) toolscache.TransformFunc {
	return func(obj interface{}) (interface{}, error) {
		for _, f := range fs {
			var err error
			if obj, err = f(obj); err != nil {
				return nil, err
			}
		}
		return obj, nil
	}
}

// stripNode keeps of a Node what isochron reads: its name, labels, taints, cordon,
// capacity, allocatable and conditions. A node's image list alone is often larger than
// the rest.
func stripNode(obj interface{}) (interface{}, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	n.Annotations = nil
	n.Spec = corev1.NodeSpec{Taints: n.Spec.Taints, Unschedulable: n.Spec.Unschedulable}
	n.Status = corev1.NodeStatus{Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable, Conditions: n.Status.Conditions}
	return n, nil
}

// stripMigration keeps of a migration its metadata, its spec and its phase: isochron
// reads the migrations it carries out from the API server, and of others in the cache
// only which VMI they migrate and whether they ended.
func stripMigration(obj interface{}) (interface{}, error) {
	m, ok := obj.(*kubevirtv1.VirtualMachineInstanceMigration)
	if !ok {
		return obj, nil
	}
	m.Annotations = nil
	m.Status = kubevirtv1.VirtualMachineInstanceMigrationStatus{Phase: m.Status.Phase}
	return m, nil
}

// stripVM keeps of a VirtualMachine what isochron reads: its metadata, status and run
// strategy, and of its template the metadata (the inputs hash and user-data hash
// annotations: render.PlanVMWrite, restartForInputs), the node affinity (render.PinnedNode)
// and the volumes (where the guest's user data and agent come from: render.PlanVMWrite).
// The template's domain, networks and the rest are most of a VM and never read back:
// isochron renders the whole VM from its inputs and applies it. What needs the whole
// spec (recordStartRevision) reads the VM from the API server.
func stripVM(obj interface{}) (interface{}, error) {
	vm, ok := obj.(*kubevirtv1.VirtualMachine)
	if !ok {
		return obj, nil
	}
	spec := kubevirtv1.VirtualMachineSpec{Running: vm.Spec.Running, RunStrategy: vm.Spec.RunStrategy}
	if t := vm.Spec.Template; t != nil {
		spec.Template = &kubevirtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: t.ObjectMeta,
			Spec: kubevirtv1.VirtualMachineInstanceSpec{Affinity: t.Spec.Affinity, Volumes: t.Spec.Volumes}}
	}
	vm.Spec = spec
	return vm, nil
}

// LoadNodeAccess reads the administrator's rules of reach (internal/access) from the
// ConfigMap isov1.NodeAccessConfigMap in the manager's namespace. Without the ConfigMap no
// namespace may tolerate a taint (found says so, for the log); one that does not parse
// is an error naming its key. c needs get on that one ConfigMap: the manager's Role in its
// own namespace.
func LoadNodeAccess(ctx context.Context, c client.Client, namespace string) (rules access.Rules, found bool, err error) {
	cm := &corev1.ConfigMap{}
	err = c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: isov1.NodeAccessConfigMap}, cm)
	if apierrors.IsNotFound(err) {
		return access.Rules{}, false, nil
	}
	if err != nil {
		return access.Rules{}, false, fmt.Errorf("reading ConfigMap %s/%s: %w", namespace, isov1.NodeAccessConfigMap, err)
	}
	rules, err = access.Parse(cm.Data)
	if err != nil {
		return access.Rules{}, true, fmt.Errorf("ConfigMap %s/%s: %w", namespace, isov1.NodeAccessConfigMap, err)
	}
	return rules, true, nil
}

// DefaultProbeMasterKeySecret is the Secret, in the manager's own namespace, that holds
// the master key of the crawlers' probe credentials (package credential).
const DefaultProbeMasterKeySecret = "isochron-probe-master-key"

// probeMasterKeyData is the key of the master key in its Secret.
const probeMasterKeyData = "key"

// LoadProbeMasterKey reads the probe master key from the Secret name in namespace, and
// creates the Secret with a new random key when there is none (the first manager to
// start; a replica starting beside it reads the one that won). c needs get and create on
// that one Secret: the manager's Role in its own namespace, nothing cluster-wide.
//
// Every crawler's probe key is derived from it: a changed master key (the Secret
// deleted) gives every crawler a new key, which a running guest learns only when it
// next starts; until then its probes count its agent's requests as foreign.
func LoadProbeMasterKey(ctx context.Context, c client.Client, namespace, name string) ([]byte, error) {
	if namespace == "" {
		return nil, errors.New("the manager's namespace is unknown: set --namespace (or POD_NAMESPACE)")
	}
	s := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s)
	if apierrors.IsNotFound(err) {
		key, kerr := credential.NewKey()
		if kerr != nil {
			return nil, kerr
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{isov1.LabelManagedBy: isov1.ManagedBy}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{probeMasterKeyData: []byte(credential.Encode(key))},
		}
		err = c.Create(ctx, s)
		if apierrors.IsAlreadyExists(err) {
			err = c.Get(ctx, client.ObjectKeyFromObject(s), s)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the probe master key, Secret %s/%s: %w", namespace, name, err)
	}
	key, err := credential.Parse(fmt.Sprintf("Secret %s/%s, key %q", namespace, name, probeMasterKeyData), string(s.Data[probeMasterKeyData]))
	if err != nil {
		return nil, fmt.Errorf("%w: delete the Secret and restart the manager for a new one", err)
	}
	return key, nil
}
