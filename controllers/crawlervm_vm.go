package controllers

import (
	"context"
	"encoding/json"
	"fmt"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	appsv1 "k8s.io/api/apps/v1"
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
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/slo"
)

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;create

// runVM makes the crawler's VirtualMachine match the reservation in status and reports
// how its VMI runs (Ready). KubeVirt starts, restarts and live-updates the VMI; isochron
// writes the VM (render.PlanVMWrite), restarts a VMI once when KubeVirt cannot apply a
// changed input to it, and brings a bare VMI of an earlier release under its VM running
// (adoptVMI); a move in progress takes its next step (carryOutMove). It returns the VMI
// when it runs, else nil, and what became of its node (a crawler on a lost node is not
// Ready, whatever KubeVirt reports of its VMI).
func (r *CrawlerVMReconciler) runVM(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, gatewayIP string) (*kubevirtv1.VirtualMachineInstance, move.NodeState, error) {
	var none move.NodeState
	held := cvm.Status.Placement
	size, ok := inventory.Resident(cvm)
	if !ok {
		return nil, none, nil
	}
	if err := render.NetworkAllowed(cvm, r.sharedNetworks); err != nil {
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonRTNetworkNotAllowed, err.Error())
		return nil, none, nil
	}
	binding, guestDSCP, err := r.rtBinding(ctx, cvm)
	switch {
	case apierrors.IsNotFound(err):
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonRTNetworkNotFound,
			fmt.Sprintf("spec.rtNIC.networkName: NetworkAttachmentDefinition %s not found; create it or fix the name", render.NetworkKey(cvm)))
		return nil, none, nil
	case apimeta.IsNoMatchError(err):
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonMultusNotInstalled,
			fmt.Sprintf("spec.rtNIC needs Multus, and this cluster does not serve its NetworkAttachmentDefinition API (%s): install Multus, or remove spec.rtNIC; the crawler starts once the API is served", nadv1.SchemeGroupVersion))
		return nil, none, nil
	case err != nil:
		return nil, none, err
	}
	key := client.ObjectKey{Namespace: cvm.Namespace, Name: render.Name(cvm)}
	vm, err := getOrNil(ctx, r.Client, key, &kubevirtv1.VirtualMachine{})
	if err != nil {
		return nil, none, fmt.Errorf("reading VM %s: %w", key.Name, err)
	}
	vmi, err := getOrNil(ctx, r.Client, key, &kubevirtv1.VirtualMachineInstance{})
	if err != nil {
		return nil, none, fmt.Errorf("reading VMI %s: %w", key.Name, err)
	}
	in := render.Input{CrawlerVM: cvm, Sizing: size.Sizing, Node: held.Node, RTBinding: binding,
		GuestDSCP: guestDSCP, Agent: &render.Agent{Image: r.probes.Image, Gateways: slo.GatewayURLs(cvm, gatewayIP)}}
	if vm != nil && vm.Spec.RunStrategy != nil {
		in.RunStrategy = *vm.Spec.RunStrategy // a person's virtctl stop holds
	}
	desired, err := render.VM(in)
	if err != nil {
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonInvalid, err.Error())
		return nil, none, nil
	}
	if vm != nil && !metav1.IsControlledBy(vm, cvm) {
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonInvalid,
			fmt.Sprintf("a VirtualMachine named %s exists and is not owned by this CrawlerVM; delete or rename it", vm.Name))
		return nil, none, nil
	}
	cvm.Status.VMI = &isov1.VMIStatus{Name: key.Name}
	if vmi != nil {
		cvm.Status.VMI.Phase = string(vmi.Status.Phase)
	}

	if vm == nil {
		if vmi != nil {
			// A VMI before its VM: a bare VMI of an earlier release, or another's.
			if done, err := r.adoptVMI(ctx, cvm, vmi, in); done || err != nil {
				return nil, none, err
			}
		}
		if err := r.applyVM(ctx, desired); err != nil {
			return nil, none, err
		}
		if vmi == nil {
			r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.EventReasonVMICreated, "Created VM %s on node %s", desired.Name, held.Node)
			setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonVMIPending, fmt.Sprintf("VM %s created, waiting for KubeVirt to start its VMI", desired.Name))
			return nil, none, nil
		}
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.EventReasonVMIAdopted, "VMI %s, created by an earlier release of isochron from the current spec, keeps running under its new VM", vmi.Name)
		return nil, none, nil // the VM is read again when KubeVirt has adopted the VMI
	}

	switch render.PlanVMWrite(vm, in) {
	case render.WriteApply:
		if err := r.applyVM(ctx, desired); err != nil {
			return nil, none, err
		}
	case render.WriteAffinity:
		patch, err := render.AffinityPatch(held.Node)
		if err != nil {
			return nil, none, err
		}
		if err := r.Patch(ctx, vm, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return nil, none, fmt.Errorf("pinning VM %s to node %s: %w", vm.Name, held.Node, err)
		}
	}
	if vmi == nil || !metav1.IsControlledBy(vmi, vm) {
		ok, reason, msg := vmReadiness(vm, nil)
		r.setReady(cvm, ok, reason, msg)
		return nil, none, r.carryOutMove(ctx, cvm, st, vm, nil)
	}
	if vmi.Status.VirtualMachineRevisionName == "" {
		// Adopted: give KubeVirt the start revision it keeps for the VMIs it starts.
		if err := r.recordStartRevision(ctx, vm, vmi); err != nil {
			return nil, none, err
		}
	}
	if restartForInputs(vm, vmi) {
		// A changed input KubeVirt cannot apply to the running VMI: it starts the new one
		// (runStrategy Always) once this one is gone.
		if err := r.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); client.IgnoreNotFound(err) != nil {
			return nil, none, fmt.Errorf("restarting VMI %s: %w", vmi.Name, err)
		}
		why := fmt.Sprintf("spec generation %d changed what the VM is made from (spec, size or RT binding), which KubeVirt cannot apply to a running VMI", cvm.Generation)
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.ReasonVMIReplacing, "Restarting VMI %s: %s", vmi.Name, why)
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonVMIReplacing, fmt.Sprintf("%s; VMI %s restarts", why, vmi.Name))
		return nil, none, nil
	}
	ok, reason, msg := vmReadiness(vm, vmi)
	if !ok && reason == isov1.ReasonVMIPending {
		if reason2, msg2, err := r.launcherUnschedulable(ctx, cvm, vmi); err != nil {
			return nil, none, err
		} else if reason2 != "" {
			reason, msg = reason2, msg2
		}
	}
	node, err := r.nodeState(ctx, cvm, vmi)
	if err != nil {
		return nil, none, err
	}
	if node.Lost {
		ok, reason, msg = false, isov1.ReasonNodeLost, lostMessage(node)
	}
	r.setReady(cvm, ok, reason, msg)
	if err := r.carryOutMove(ctx, cvm, st, vm, vmi); err != nil {
		return nil, node, err
	}
	if !ok {
		return nil, node, nil
	}
	return vmi, node, nil
}

// setReady sets the Ready condition and records an Event when it turns to a reason worth
// one: the VMI runs, or it stopped running for a reason KubeVirt does not fix by itself.
func (r *CrawlerVMReconciler) setReady(cvm *isov1.CrawlerVM, ok bool, reason, msg string) {
	prev := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionReady)
	changed := prev == nil || prev.Reason != reason || (prev.Status == metav1.ConditionTrue) != ok
	setCondition(cvm, isov1.ConditionReady, ok, reason, msg)
	if !changed {
		return
	}
	switch reason {
	case isov1.ReasonVMIRunning:
		r.Recorder.Event(cvm, corev1.EventTypeNormal, reason, msg)
	case isov1.ReasonVMCrashLoop, isov1.ReasonLauncherUnschedulable, isov1.ReasonVMIFailed, isov1.ReasonNodeLost:
		r.Recorder.Event(cvm, corev1.EventTypeWarning, reason, msg)
	}
}

// launcherUnschedulable finds a virt-launcher pod of the VMI that kube-scheduler refuses
// the node (Insufficient cpu: something outside isochron took what the reservation
// counted on), and says so; "" when there is none.
func (r *CrawlerVMReconciler) launcherUnschedulable(ctx context.Context, cvm *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance) (string, string, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(vmi.Namespace), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
		return "", "", fmt.Errorf("listing the virt-launcher pods of VMI %s: %w", vmi.Name, err)
	}
	pod, why, stuck := inventory.LauncherUnschedulable(pods.Items)
	if !stuck {
		return "", "", nil
	}
	return isov1.ReasonLauncherUnschedulable, fmt.Sprintf("virt-launcher pod %s of VMI %s cannot be scheduled on node %s: %s; something outside isochron holds what the crawler's reservation counted on: free it, or change spec.placement to place the crawler elsewhere",
		pod, vmi.Name, cvm.Status.Placement.Node, why), nil
}

// applyVM writes the VM isochron renders with server-side apply, as its one field owner:
// fields KubeVirt writes into the VM (firmware UUID and serial, machine type) stay
// KubeVirt's.
func (r *CrawlerVMReconciler) applyVM(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	u, err := render.Unstructured(vm)
	if err != nil {
		return err
	}
	if err := r.Patch(ctx, u, client.Apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying VM %s: %w", vm.Name, err)
	}
	return nil
}

// adoptVMI handles a VMI of the crawler's name that exists before its VM. A bare VMI an
// earlier release of isochron created (controlled by the crawler) is released, so that
// KubeVirt's VM controller adopts it when the VM is created (it adopts only a VMI without
// a controller: controller_ref_manager.go ClaimObject), running, when it was made from the
// current inputs (render.Compare); it is restarted when not. It returns true when the
// VM is not to be created yet.
func (r *CrawlerVMReconciler) adoptVMI(ctx context.Context, cvm *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance, in render.Input) (bool, error) {
	owner := metav1.GetControllerOf(vmi)
	ours := hasOwner(vmi, cvm.UID)
	switch {
	case !ours:
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonInvalid,
			fmt.Sprintf("a VMI named %s exists and is not owned by this CrawlerVM; delete or rename it", vmi.Name))
		return true, nil
	case !vmi.DeletionTimestamp.IsZero():
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonVMIReplacing, fmt.Sprintf("waiting for VMI %s to be deleted before starting the crawler's VM", vmi.Name))
		return true, nil
	}
	if owner != nil && render.Compare(vmi, in) == render.Outdated {
		if err := r.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); client.IgnoreNotFound(err) != nil {
			return true, fmt.Errorf("deleting outdated VMI %s: %w", vmi.Name, err)
		}
		why := fmt.Sprintf("spec generation %d changed what it is made from (spec, size, node or RT binding)", cvm.Generation)
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.ReasonVMIReplacing, "Replacing VMI %s, created by an earlier release of isochron: %s", vmi.Name, why)
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonVMIReplacing, fmt.Sprintf("%s; VMI %s is replaced by the crawler's VM", why, vmi.Name))
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
func (r *CrawlerVMReconciler) recordStartRevision(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) error {
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

// restartForInputs says whether isochron restarts the VMI: KubeVirt reports that the
// VM's template has changed in a way it cannot apply to the running VMI
// (RestartRequired), and the VMI was started from other inputs than the template's
// (AnnotationVMInputs). A template that differs only in how a newer release renders the
// same inputs restarts nothing; the VMI takes it at its next start.
func restartForInputs(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) bool {
	if !vmi.DeletionTimestamp.IsZero() || vm.Spec.Template == nil {
		return false
	}
	return restartRequired(vm) && vmi.Annotations[isov1.AnnotationVMInputs] != vm.Spec.Template.ObjectMeta.Annotations[isov1.AnnotationVMInputs]
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
	return move.Node(node, name, vmi, r.clock.Now(), r.nodeLostGrace), nil
}

// lostMessage is the Ready condition's message for a crawler on a lost node.
func lostMessage(n move.NodeState) string {
	if n.Fenced {
		return n.Why + ": isochron starts the crawler on another node"
	}
	return n.Why + ": the crawler is presumed down. isochron starts it on another node once the node is fenced (taint it node.kubernetes.io/out-of-service=nodeshutdown:NoExecute, or delete the Node, once it is known to be off; Node Health Check with a fence agent does it in seconds; docs/availability.md), never before: two copies of a crawler must never run at once"
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
