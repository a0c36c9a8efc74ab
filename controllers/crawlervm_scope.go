package controllers

import (
	"context"
	"fmt"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/sizing"
)

// scope is one reconcile of a crawler (Cluster API's machine scope): the crawler and its
// status writer, every input read at most once, on first use, and what a phase leaves for
// the next.
type scope struct {
	*statusWriter
	r   *CrawlerVMReconciler
	cvm *isov1.CrawlerVM
	// overbooked says why the crawler's reservation must leave its node (placer.Admission).
	overbooked string

	// Read once, on first use.
	w       *world
	nodes   map[string]*corev1.Node
	nad     *nadv1.NetworkAttachmentDefinition
	nadErr  error
	nadRead bool
	support *sizing.SupportConfig
	base    *placement.Request

	// gatewayIP is the probe gateway Service's address, serviceErr why it cannot be had.
	gatewayIP  string
	serviceErr error
	// running is the crawler's VMI when it runs the current spec, else nil.
	running *kubevirtv1.VirtualMachineInstance
	stopped bool
}

// stop ends the reconcile after the phase that calls it.
func (s *scope) stop() { s.stopped = true }

// key is the crawler's namespace/name.
func (s *scope) key() string { return s.cvm.Namespace + "/" + s.cvm.Name }

// world is what a reconcile reads of a crawler's world, once: its VM and VMI, its launcher
// pods and the node its VMI runs on, as the readiness chain judges them.
type world struct {
	readiness.Scope
}

// world reads the crawler's VM, VMI, launcher pods and node, once.
func (s *scope) world(ctx context.Context) (*world, error) {
	if s.w != nil {
		return s.w, nil
	}
	r, cvm := s.r, s.cvm
	w := &world{}
	key := client.ObjectKey{Namespace: cvm.Namespace, Name: render.Name(cvm)}
	var err error
	if w.VM, err = getOwned(ctx, r.Client, r.APIReader, key, &kubevirtv1.VirtualMachine{}); err != nil {
		return nil, fmt.Errorf("reading VM %s: %w", key.Name, err)
	}
	// A VMI without a VM (a bare VMI of an earlier release, or another's) is read from the
	// API server too when the cache has none: isochron is about to create the VM.
	vmiReader := client.Reader(r.APIReader)
	if w.VM != nil {
		vmiReader = nil
	}
	if w.VMI, err = getOwned(ctx, r.Client, vmiReader, key, &kubevirtv1.VirtualMachineInstance{}); err != nil {
		return nil, fmt.Errorf("reading VMI %s: %w", key.Name, err)
	}
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(cvm.Namespace), client.MatchingLabels{isov1.LabelCrawlerVM: cvm.Name, kubevirtv1.AppLabel: "virt-launcher"}); err != nil {
		return nil, fmt.Errorf("listing the virt-launcher pods of %s: %w", cvm.Name, err)
	}
	w.Launchers = pods.Items
	if p := cvm.Status.Placement; p != nil {
		w.PlacedOn = p.Node
		if w.Node, err = s.nodeState(ctx, w.VMI); err != nil {
			return nil, err
		}
	}
	s.w = w
	return w, nil
}

// nodeState is what became of the node the crawler's VMI runs on, or of the node it is
// placed on while no VMI runs (move.Node): a VMI KubeVirt still reports Running on a lost
// node is not up.
func (s *scope) nodeState(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (move.NodeState, error) {
	r, cvm := s.r, s.cvm
	name := cvm.Status.Placement.Node
	if vmi != nil && vmi.Status.NodeName != "" {
		name = vmi.Status.NodeName
	}
	node, err := s.node(ctx, name)
	if err != nil {
		return move.NodeState{}, err
	}
	var lastRenew time.Time
	if node != nil && !inventory.NodeReady(node) {
		// Read only for a node that is not ready, from the API server: the cache does not
		// watch Leases (every node renews its own every 10 s).
		lease, err := getOrNil(ctx, r.APIReader, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: name}, &coordinationv1.Lease{})
		if err != nil {
			return move.NodeState{}, fmt.Errorf("reading the Lease of node %s: %w", name, err)
		}
		if lease != nil && lease.Spec.RenewTime != nil {
			lastRenew = lease.Spec.RenewTime.Time
		}
	}
	return move.Node(node, name, vmi, lastRenew, r.clock.Now(), r.nodeLostGrace, cvm.Annotations[isov1.AnnotationFencedNode] == name), nil
}

// node is the Node of that name from the cache, nil when there is none; each name is read
// once per reconcile.
func (s *scope) node(ctx context.Context, name string) (*corev1.Node, error) {
	if n, ok := s.nodes[name]; ok {
		return n, nil
	}
	n, err := getOrNil(ctx, s.r.Client, client.ObjectKey{Name: name}, &corev1.Node{})
	if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	if s.nodes == nil {
		s.nodes = map[string]*corev1.Node{}
	}
	s.nodes[name] = n
	return n, nil
}

// network is the crawler's RT-NIC's NetworkAttachmentDefinition from the cache, read
// once; nil, nil when it has no RT-NIC.
func (s *scope) network(ctx context.Context) (*nadv1.NetworkAttachmentDefinition, error) {
	if !s.nadRead && s.cvm.Spec.RTNIC != nil {
		nad := &nadv1.NetworkAttachmentDefinition{}
		if s.nadErr = s.r.Get(ctx, render.NetworkKey(s.cvm), nad); s.nadErr == nil {
			s.nad = nad
		}
	}
	s.nadRead = true
	return s.nad, s.nadErr
}

// rtNetwork is what the crawler's RT network is to its VM: readiness.Network for the
// checks before the VM is written, and, when it can be used, its binding and whether it
// asks the guest to mark its traffic.
func (s *scope) rtNetwork(ctx context.Context) (readiness.Network, render.Binding, bool, error) {
	cvm := s.cvm
	n := readiness.Network{NotAllowed: render.NetworkAllowed(cvm, s.r.sharedNetworks)}
	if allowed := n.NotAllowed == nil; cvm.Spec.RTNIC == nil || !allowed {
		return n, "", false, nil // not to be read: the checks before writing say why
	}
	n.Key = render.NetworkKey(cvm).String()
	nad, err := s.network(ctx)
	n.Missing, n.NoMultus = apierrors.IsNotFound(err), apimeta.IsNoMatchError(err)
	if err != nil && !n.Missing && !n.NoMultus {
		return n, "", false, err
	}
	if nad == nil {
		return n, "", false, nil // the checks before writing say what is missing
	}
	n.UplinkNotAllowed = render.UplinkAllowed(nad, s.r.rtUplinks)
	if named := n.UplinkNotAllowed == nil; !named {
		return n, "", false, nil
	}
	return n, render.BindingOf(nad), render.GuestDSCPOf(nad), nil
}

// request is the crawler's placement request, built once: its spec with what its pod
// holds beyond it as the cluster has it now (VFIO memory for an SR-IOV RT-NIC, none when
// its network cannot be read; KubeVirt's support containers), within the nodes its
// namespace may reach. Each caller gets its own copy to add to.
func (s *scope) request(ctx context.Context) placement.Request {
	if s.base == nil {
		nad, err := s.network(ctx)
		vfio := err == nil && render.VFIO(s.cvm, nad)
		req := inventory.Request(s.cvm, vfio, render.Support(s.cvm, s.kubeVirtSupport(ctx)))
		s.r.access.Apply(s.cvm.Namespace, &req)
		s.base = &req
	}
	req := *s.base
	req.Avoid = append([]placement.Avoid(nil), req.Avoid...)
	return req
}

// kubeVirtSupport is what the cluster's KubeVirt resource (inventory.ClusterKubeVirt)
// sets for launchers' support containers (inventory.Support), from the cache, once:
// KubeVirt's defaults when there is none, or the KubeVirt API is not served (logged: a
// decision then counts the defaults).
func (s *scope) kubeVirtSupport(ctx context.Context) sizing.SupportConfig {
	if s.support == nil {
		list := &kubevirtv1.KubeVirtList{}
		// Read only: the cache's own objects, not copies.
		if err := s.r.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			log.FromContext(ctx).V(1).Info("counting KubeVirt's default support containers: its KubeVirt resource cannot be read", "error", err.Error())
			list.Items = nil
		}
		c := inventory.Support(inventory.ClusterKubeVirt(list.Items))
		s.support = &c
	}
	return *s.support
}

// getOwned reads obj by key from the cache, which holds only the objects that carry the
// crawler label (ManagerCacheOptions); when the cache has none, from live (unless nil),
// the API server: an object of that name without the label is someone else's, or an
// earlier release's, and isochron must see it before it writes one of that name. nil
// when there is none.
func getOwned[T client.Object](ctx context.Context, cache, live client.Reader, key client.ObjectKey, obj T) (T, error) {
	got, err := getOrNil(ctx, cache, key, obj)
	if err != nil || !isNil(got) || live == nil {
		return got, err
	}
	return getOrNil(ctx, live, key, obj)
}

func isNil[T client.Object](o T) bool {
	var none T
	return client.Object(o) == client.Object(none)
}

// getOrNil reads obj by key from c, nil when there is none.
func getOrNil[T client.Object](ctx context.Context, c client.Reader, key client.ObjectKey, obj T) (T, error) {
	var none T
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return none, nil
		}
		return none, err
	}
	return obj, nil
}
