package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/slo"
	"isochron.io/isochron/probes/credential"
)

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;patch

// world is what a reconcile reads of a crawler's world, once (readWorld): its VM and VMI,
// its launcher pods and the node its VMI runs on, as the readiness chain judges them.
type world struct {
	readiness.Scope
}

// readWorld reads the crawler's VM, VMI, launcher pods and node from the cache.
func (r *CrawlerVMReconciler) readWorld(ctx context.Context, cvm *isov1.CrawlerVM) (*world, error) {
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
		if w.Node, err = r.nodeState(ctx, cvm, w.VMI); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// runVM makes the crawler's VirtualMachine match the reservation in status and reports
// how its VMI runs (Ready, judged by the readiness chain on w). KubeVirt starts, restarts
// and live-updates the VMI; isochron writes the VM (render.PlanVMWrite), restarts a VMI
// once when KubeVirt cannot apply a changed input to it, and brings a bare VMI of an
// earlier release under its VM running (adoptVMI); a move in progress takes its next step
// (carryOutMove). It returns the VMI when it runs, else nil (a crawler on a lost node does
// not run, whatever KubeVirt reports of its VMI).
func (r *CrawlerVMReconciler) runVM(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, w *world, gatewayIP string) (*kubevirtv1.VirtualMachineInstance, error) {
	held := cvm.Status.Placement
	size, ok := inventory.Resident(cvm)
	if !ok {
		return nil, nil
	}
	if err := render.NetworkAllowed(cvm, r.sharedNetworks); err != nil {
		r.setReady(cvm, st, readiness.NetworkNotAllowed(err))
		return nil, nil
	}
	binding, guestDSCP, err := r.rtBinding(ctx, cvm)
	var notNamed *uplinkNotAllowed
	// networkGone: the RT network was deleted under a crawler whose VM exists. Its VMI
	// keeps its RT-NIC (Multus attached it at start) and runs on: the VM is left as it is,
	// and the crawler is not reported down, only unable to start again.
	networkGone := false
	switch {
	case errors.As(err, &notNamed):
		r.setReady(cvm, st, readiness.UplinkNotAllowed(notNamed.error))
		return nil, nil
	case apierrors.IsNotFound(err) && w.VM != nil:
		networkGone = true
	case apierrors.IsNotFound(err):
		r.setReady(cvm, st, readiness.NetworkNotFound(render.NetworkKey(cvm).String()))
		return nil, nil
	case apimeta.IsNoMatchError(err):
		r.setReady(cvm, st, readiness.MultusNotInstalled(nadv1.SchemeGroupVersion.String()))
		return nil, nil
	case err != nil:
		return nil, err
	}
	vm, vmi := w.VM, w.VMI
	in := render.Input{CrawlerVM: cvm, Sizing: size.Sizing, Node: held.Node, RTBinding: binding, GuestDSCP: guestDSCP,
		Agent: &render.Agent{Image: r.probes.Image, Gateways: slo.GatewayURLs(cvm, gatewayIP), Key: credential.Key(r.master, string(cvm.UID)), PullSecret: r.probes.PullSecret}}
	if vm != nil && vm.Spec.RunStrategy != nil {
		in.RunStrategy = *vm.Spec.RunStrategy // a person's virtctl stop holds
	}
	desired, err := render.VM(in)
	if err != nil {
		r.setReady(cvm, st, readiness.Invalid(err.Error()))
		return nil, nil
	}
	if vm != nil && !metav1.IsControlledBy(vm, cvm) {
		r.setReady(cvm, st, readiness.Invalid(fmt.Sprintf("a VirtualMachine named %s exists and is not owned by this CrawlerVM; delete or rename it", vm.Name)))
		return nil, nil
	}
	cvm.Status.VMI = &isov1.VMIStatus{Name: desired.Name}
	if vmi != nil {
		cvm.Status.VMI.Phase = string(vmi.Status.Phase)
	}
	// The guest Secret before the VM: KubeVirt reads it when it starts a VMI.
	if err := r.applyGuestSecret(ctx, in); err != nil {
		return nil, err
	}

	if vmi != nil && (vm == nil || metav1.IsControlledBy(vmi, cvm)) {
		// A VMI before its VM (a bare VMI of an earlier release, or another's), or one the
		// crawler still controls beside its VM (one a cache shows before its release): it
		// is released to the VM, or replaced when it is outdated.
		if done, err := r.adoptVMI(ctx, cvm, st, vmi, in); done || err != nil {
			return nil, err
		}
	}
	if vm == nil {
		if err := r.applyVM(ctx, desired); err != nil {
			return nil, err
		}
		if vmi == nil {
			r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.EventReasonVMICreated, "Created VM %s on node %s", desired.Name, held.Node)
			r.setReady(cvm, st, readiness.Progress(isov1.ReasonVMIPending, fmt.Sprintf("VM %s created, waiting for KubeVirt to start its VMI", desired.Name)))
			return nil, nil
		}
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.EventReasonVMIAdopted, "VMI %s, created by an earlier release of isochron from the current spec, keeps running under its new VM", vmi.Name)
		return nil, nil // the VM is read again when KubeVirt has adopted the VMI
	}

	plan := render.PlanVMWrite(vm, in, render.Restarting(vmi))
	if networkGone && plan == render.WriteApply {
		plan = render.WriteNothing // nothing to render its RT-NIC from: the template stays as it is
	}
	switch plan {
	case render.WriteApply:
		if err := r.applyVM(ctx, desired); err != nil {
			return nil, err
		}
	case render.WriteAffinity:
		patch, err := render.AffinityPatch(held.Node)
		if err != nil {
			return nil, err
		}
		if err := r.Patch(ctx, vm, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return nil, fmt.Errorf("pinning VM %s to node %s: %w", vm.Name, held.Node, err)
		}
	}
	if done, err := r.replaceParked(ctx, cvm, st, vmi, held.Node); done || err != nil {
		return nil, err
	}
	scope := w.Scope
	var adopting bool
	scope.VMI, adopting = readiness.VMIOf(vm, vmi, cvm.UID)
	if adopting {
		// Released to its VM at an upgrade: KubeVirt's VM controller adopts it at its next
		// sync (the VM is read again then); it runs as it ran meanwhile.
		v := readiness.Judge(scope)
		r.setReady(cvm, st, v)
		if !v.OK {
			return nil, nil
		}
		return vmi, nil
	}
	if scope.VMI != nil && vmi.Status.VirtualMachineRevisionName == "" {
		// Adopted: give KubeVirt the start revision it keeps for the VMIs it starts.
		if err := r.recordStartRevision(ctx, vm, vmi); err != nil {
			return nil, err
		}
	}
	waitFor := ""
	if scope.VMI != nil && restartForInputs(vm, vmi) {
		if waitFor, err = r.restartTurn(ctx, cvm, vmi); err != nil {
			return nil, err
		}
	}
	if scope.VMI != nil && restartForInputs(vm, vmi) && waitFor == "" {
		// A changed input KubeVirt cannot apply to the running VMI: it starts the new one
		// (runStrategy Always) once this one is gone.
		if err := r.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("restarting VMI %s: %w", vmi.Name, err)
		}
		why := fmt.Sprintf("spec generation %d changed what the VM is made from (spec, size or RT binding), which KubeVirt cannot apply to a running VMI", cvm.Generation)
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.ReasonVMIReplacing, "Restarting VMI %s: %s", vmi.Name, why)
		r.setReady(cvm, st, readiness.Progress(isov1.ReasonVMIReplacing, fmt.Sprintf("%s; VMI %s restarts", why, vmi.Name)))
		return nil, nil
	}
	v := readiness.Judge(scope)
	if networkGone {
		v = readiness.NetworkGone(v, render.NetworkKey(cvm).String())
	}
	if waitFor != "" {
		v.Message += fmt.Sprintf("; a changed input waits to restart VMI %s until %s, on the same RT network, has restarted (one crawler of a network restarts at a time)", vmi.Name, waitFor)
		st.retryAfter(restartTurnEvery)
	}
	r.setReady(cvm, st, v)
	if err := r.carryOutMove(ctx, cvm, st, vm, scope.VMI); err != nil {
		return nil, err
	}
	if !v.OK {
		return nil, nil
	}
	return vmi, nil
}

// setReady makes verdict v the Ready condition, keeps whether it is stuck for the
// kstatus conditions (setProgress), and records an Event when it turns to a reason worth
// one: the VMI runs, or it stopped running for a reason KubeVirt does not fix by itself.
func (r *CrawlerVMReconciler) setReady(cvm *isov1.CrawlerVM, st *statusWriter, v readiness.Verdict) {
	prev := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionReady)
	changed := prev == nil || prev.Reason != v.Reason || (prev.Status == metav1.ConditionTrue) != v.OK
	setCondition(cvm, isov1.ConditionReady, v.OK, v.Reason, v.Message)
	st.readyStuck = &v.Stuck
	// An outage begins or ends with Ready, in the same status write.
	r.trackOutage(cvm, st)
	if !changed {
		return
	}
	// Once the status is written: a write that loses a conflict finds Ready unchanged
	// next time, and the Event would be told twice.
	switch {
	case v.OK:
		st.event(cvm, corev1.EventTypeNormal, v.Reason, v.Message)
	case v.Stuck || v.Reason == isov1.ReasonVMIFailed:
		st.event(cvm, corev1.EventTypeWarning, v.Reason, v.Message)
	}
}

// applyVM writes the VM isochron renders with server-side apply, as its one field owner:
// fields KubeVirt writes into the VM (firmware UUID and serial, machine type) stay
// KubeVirt's.
func (r *CrawlerVMReconciler) applyVM(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	u, err := render.Unstructured(vm)
	if err != nil {
		return err
	}
	if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying VM %s: %w", vm.Name, err)
	}
	return nil
}

// applyGuestSecret writes the crawler's guest Secret (render.GuestSecret) with
// server-side apply when what isochron renders for it differs from what this process
// last applied: the manager may create and patch Secrets but not read them, so it keeps
// the hash of what it applied (one apply per crawler after a restart, none in a steady
// cluster).
func (r *CrawlerVMReconciler) applyGuestSecret(ctx context.Context, in render.Input) error {
	secret, err := render.GuestSecret(in)
	if err != nil || secret == nil {
		return err
	}
	u, err := render.Unstructured(secret)
	if err != nil {
		return err
	}
	b, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	key := in.CrawlerVM.Namespace + "/" + in.CrawlerVM.Name
	if r.guestSecrets.applied(key, sum) {
		return nil
	}
	if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying guest Secret %s: %w", secret.Name, err)
	}
	r.guestSecrets.remember(key, sum)
	return nil
}

// adoptVMI handles a VMI of the crawler's name that exists before its VM. A bare VMI an
// earlier release of isochron created (controlled by the crawler) is released, so that
// KubeVirt's VM controller adopts it when the VM is created (it adopts only a VMI without
// a controller: controller_ref_manager.go ClaimObject), running, when it was made from the
// current inputs (render.Compare); it is restarted when not. It returns true when the
// VM is not to be created yet.
func (r *CrawlerVMReconciler) adoptVMI(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, vmi *kubevirtv1.VirtualMachineInstance, in render.Input) (bool, error) {
	owner := metav1.GetControllerOf(vmi)
	ours := hasOwner(vmi, cvm.UID)
	switch {
	case !ours:
		r.setReady(cvm, st, readiness.Invalid(fmt.Sprintf("a VMI named %s exists and is not owned by this CrawlerVM; delete or rename it", vmi.Name)))
		return true, nil
	case !vmi.DeletionTimestamp.IsZero():
		r.setReady(cvm, st, readiness.Progress(isov1.ReasonVMIReplacing, fmt.Sprintf("waiting for VMI %s to be deleted before starting the crawler's VM", vmi.Name)))
		return true, nil
	}
	if owner != nil && render.Compare(vmi, in) == render.Outdated {
		if err := r.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); client.IgnoreNotFound(err) != nil {
			return true, fmt.Errorf("deleting outdated VMI %s: %w", vmi.Name, err)
		}
		why := fmt.Sprintf("spec generation %d changed what it is made from (spec, size, node or RT binding)", cvm.Generation)
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.ReasonVMIReplacing, "Replacing VMI %s, created by an earlier release of isochron: %s", vmi.Name, why)
		r.setReady(cvm, st, readiness.Progress(isov1.ReasonVMIReplacing, fmt.Sprintf("%s; VMI %s is replaced by the crawler's VM", why, vmi.Name)))
		return true, nil
	}
	if owner == nil {
		return false, nil // released already: the VM is created, KubeVirt adopts it
	}
	// Released: the crawler stays an owner (its deletion still deletes the VMI) without
	// controlling it, and the VMI carries the inputs hash of the VM that adopts it.
	patch := client.MergeFromWithOptions(vmi.DeepCopy(), client.MergeFromWithOptimisticLock{})
	for i := range vmi.OwnerReferences {
		if vmi.OwnerReferences[i].UID == cvm.UID {
			vmi.OwnerReferences[i].Controller = nil
		}
	}
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	vmi.Annotations[isov1.AnnotationVMInputs] = render.VMInputsHash(in)
	if err := r.Patch(ctx, vmi, patch); err != nil {
		return true, fmt.Errorf("releasing VMI %s to its VM: %w", vmi.Name, err)
	}
	return false, nil
}

func hasOwner(o metav1.Object, uid types.UID) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

// recordStartRevision gives a VMI that KubeVirt's VM controller adopted what the
// controller keeps for each VMI it starts (vm.go startVMI): the VM's spec at start as a
// ControllerRevision named revision-start-vm-<VM UID>-<generation>, owned by the VM, and
// that name in the VMI's status.virtualMachineRevisionName, with the generation in its
// kubevirt.io/vm-generation annotation. Without them KubeVirt v1.8's VM controller stops
// at every sync of the VM: it asks the API server for the revision by the VMI's empty
// name, and the error ends the sync before the run strategy, live updates and the
// status (vm.go conditionallyBumpGenerationAnnotationOnVmi). The revision holds the VM's
// spec as it is now: its template differs from the adopted VMI only in how this release
// renders the same inputs (the VMI keeps its own until its next start), so KubeVirt
// reports no restart required and keeps applying live updates, a move's affinity among
// them.
func (r *CrawlerVMReconciler) recordStartRevision(ctx context.Context, cached *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) error {
	// The whole VM, from the API server: the cache keeps only what isochron reads of it
	// (stripVM), and the revision is its whole spec.
	vm := &kubevirtv1.VirtualMachine{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), vm); err != nil {
		return fmt.Errorf("reading VM %s for its start revision: %w", cached.Name, err)
	}
	name := fmt.Sprintf("revision-start-vm-%s-%d", vm.UID, vm.Generation)
	data, err := json.Marshal(map[string]any{"spec": vm.Spec})
	if err != nil {
		return err
	}
	rev := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: vm.Namespace, OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)}},
		Data:       runtime.RawExtension{Raw: data},
		Revision:   vm.Generation,
	}
	if err := r.Create(ctx, rev); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("recording the start revision of VM %s: %w", vm.Name, err)
	}
	patch := client.MergeFrom(vmi.DeepCopy())
	vmi.Status.VirtualMachineRevisionName = name
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	vmi.Annotations[kubevirtv1.VirtualMachineGenerationAnnotation] = fmt.Sprint(vm.Generation)
	if err := r.Patch(ctx, vmi, patch); err != nil {
		return fmt.Errorf("recording the start revision on VMI %s: %w", vmi.Name, err)
	}
	return nil
}

// restartForInputs says whether isochron restarts the VMI: it was started from other
// inputs than the VM's template (AnnotationVMInputs), and either KubeVirt reports that
// the template has changed in a way it cannot apply to the running VMI (RestartRequired)
// or the user's cloud-init data changed (AnnotationUserDataHash: it is in the guest
// Secret, which KubeVirt reads only at a start, so the template does not show it). A
// template that differs only in how a newer release renders the same inputs restarts
// nothing; the VMI takes it at its next start.
func restartForInputs(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) bool {
	if !vmi.DeletionTimestamp.IsZero() || vm.Spec.Template == nil {
		return false
	}
	t := vm.Spec.Template.ObjectMeta.Annotations
	if vmi.Annotations[isov1.AnnotationVMInputs] == t[isov1.AnnotationVMInputs] {
		return false
	}
	return restartRequired(vm) || vmi.Annotations[isov1.AnnotationUserDataHash] != t[isov1.AnnotationUserDataHash]
}

// restartTurnEvery is how often a crawler that waits for its turn to restart looks again.
const restartTurnEvery = 10 * time.Second

// restartTurn is whose restart the crawler waits for before it restarts its VMI vmi for a
// changed input: one crawler of an RT network at a time (restartTurns), the others' turn
// judged from their status, VMs and VMIs in the cache (readiness.RestartTurn). "" when it
// is the crawler's turn, which it then holds, or it has no RT-NIC.
func (r *CrawlerVMReconciler) restartTurn(ctx context.Context, cvm *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance) (string, error) {
	if cvm.Spec.RTNIC == nil {
		return "", nil
	}
	network := render.NetworkKey(cvm).String()
	return r.restarts.take(ctx, r.Client, network, client.ObjectKeyFromObject(cvm), vmi.UID, r.clock.Now(), func() (string, error) {
		list := &isov1.CrawlerVMList{}
		if err := r.List(ctx, list, client.MatchingFields{indexRTNetwork: network}); err != nil {
			return "", fmt.Errorf("listing the crawlers of network %s: %w", network, err)
		}
		var neighbours []readiness.Neighbour
		for i := range list.Items {
			c := &list.Items[i]
			key := client.ObjectKey{Namespace: c.Namespace, Name: render.Name(c)}
			n := readiness.Neighbour{Key: c.Namespace + "/" + c.Name}
			if ready := apimeta.FindStatusCondition(c.Status.Conditions, isov1.ConditionReady); ready != nil {
				n.Restarting = ready.Reason == isov1.ReasonVMIReplacing || ready.Reason == isov1.ReasonVMIPending
			}
			vm, err := getOrNil(ctx, r.Client, key, &kubevirtv1.VirtualMachine{})
			if err != nil {
				return "", err
			}
			other, err := getOrNil(ctx, r.Client, key, &kubevirtv1.VirtualMachineInstance{})
			if err != nil {
				return "", err
			}
			n.NeedsRestart = vm != nil && other != nil && restartForInputs(vm, other)
			neighbours = append(neighbours, n)
		}
		return readiness.RestartTurn(cvm.Namespace+"/"+cvm.Name, neighbours), nil
	})
}

// nodeState is what became of the node the crawler's VMI runs on, or of the node it is
// placed on while no VMI runs (move.Node): a VMI KubeVirt still reports Running on a lost
// node is not up.
func (r *CrawlerVMReconciler) nodeState(ctx context.Context, cvm *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance) (move.NodeState, error) {
	name := cvm.Status.Placement.Node
	if vmi != nil && vmi.Status.NodeName != "" {
		name = vmi.Status.NodeName
	}
	node, err := getOrNil(ctx, r.Client, client.ObjectKey{Name: name}, &corev1.Node{})
	if err != nil {
		return move.NodeState{}, fmt.Errorf("reading node %s: %w", name, err)
	}
	var lastRenew time.Time
	if node != nil && !nodeReady(node) {
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

// nodeReady says whether node reports Ready=True.
func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
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

// getOrNil reads obj by key from the cache, nil when there is none.
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
