package controllers

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/render"
)

// adoptVMI handles the crawler's own VMI that exists before its VM (readiness.BeforeVM;
// one another owns, or that is being deleted, the checks before writing kept the VM
// from). A bare VMI an earlier release of isochron created (controlled by the crawler) is
// released, so that KubeVirt's VM controller adopts it when the VM is created (it adopts
// only a VMI without a controller: controller_ref_manager.go ClaimObject), running, when
// it was made from the current inputs (render.Compare); it is restarted when not. It
// returns true when the VM is not to be created yet.
func (r *CrawlerVMReconciler) adoptVMI(ctx context.Context, s *scope, vmi *kubevirtv1.VirtualMachineInstance, in render.Input) (bool, error) {
	cvm := s.cvm
	owner := metav1.GetControllerOf(vmi)
	if owner != nil && render.Compare(vmi, in) == render.Outdated {
		if err := r.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); client.IgnoreNotFound(err) != nil {
			return true, fmt.Errorf("deleting outdated VMI %s: %w", vmi.Name, err)
		}
		why := fmt.Sprintf("spec generation %d changed what it is made from (spec, size, node or RT binding)", cvm.Generation)
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.ReasonVMIReplacing, "Replacing VMI %s, created by an earlier release of isochron: %s", vmi.Name, why)
		r.setReady(s, readiness.Progress(isov1.ReasonVMIReplacing, fmt.Sprintf("%s; VMI %s is replaced by the crawler's VM", why, vmi.Name)))
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

// An adopted VMI (a bare VMI of a release before isochron owned VMs, now its VM's) keeps
// its own spec until its next start, without evictionStrategy External: a drain would
// evict it under the cluster's default (None: its launcher deleted, the crawler down).
// Until it restarts, a PodDisruptionBudget guards its launcher pods, so that an eviction
// is refused (429, which kubectl drain retries), and isochron takes the node being
// cordoned, a drain's first step, as the drain: it moves the crawler off live, as it does
// for an evacuation. The budget keeps one launcher pod, two while a live migration runs
// both (as KubeVirt's own budgets do), and goes when the VMI has External.

// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete

// adoptedGuardName is the name of the PodDisruptionBudget that guards an adopted VMI.
func adoptedGuardName(cvm *isov1.CrawlerVM) string { return cvm.Name + "-adopted" }

// external says whether the VMI's evictions are handed to isochron.
func external(vmi *kubevirtv1.VirtualMachineInstance) bool {
	return vmi.Spec.EvictionStrategy != nil && *vmi.Spec.EvictionStrategy == kubevirtv1.EvictionStrategyExternal
}

// guardAdopted keeps the PodDisruptionBudget of an adopted VMI while it needs one, and
// deletes it otherwise.
func (r *CrawlerVMReconciler) guardAdopted(ctx context.Context, s *scope) (ctrl.Result, error) {
	return ctrl.Result{}, r.guardVMI(ctx, s.cvm, s.running)
}

// guardVMI keeps the budget of vmi, the crawler's running VMI (nil when none runs).
func (r *CrawlerVMReconciler) guardVMI(ctx context.Context, cvm *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance) error {
	key := client.ObjectKey{Namespace: cvm.Namespace, Name: adoptedGuardName(cvm)}
	have, err := getOrNil(ctx, r.Client, key, &policyv1.PodDisruptionBudget{})
	if err != nil {
		return fmt.Errorf("reading PodDisruptionBudget %s: %w", key.Name, err)
	}
	if vmi == nil || external(vmi) || !vmi.DeletionTimestamp.IsZero() {
		if have != nil && metav1.IsControlledBy(have, cvm) {
			if err := r.Delete(ctx, have, client.Preconditions{UID: &have.UID}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting PodDisruptionBudget %s: %w", key.Name, err)
			}
		}
		return nil
	}
	keep := int32(1)
	if m := cvm.Status.Move; m != nil && m.Mode == isov1.MoveLive && m.Migration != "" {
		keep = 2 // the source and the target launcher, until the migration ends
	}
	selector := map[string]string{kubevirtv1.CreatedByLabel: string(vmi.UID)}
	if have != nil && have.Spec.MinAvailable != nil && have.Spec.MinAvailable.IntValue() == int(keep) &&
		have.Spec.Selector != nil && equality.Semantic.DeepEqual(have.Spec.Selector.MatchLabels, selector) {
		return nil
	}
	pdb := &policyv1.PodDisruptionBudget{
		TypeMeta: metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace,
			Labels:          map[string]string{isov1.LabelManagedBy: isov1.ManagedBy, isov1.LabelCrawlerVM: cvm.Name},
			OwnerReferences: []metav1.OwnerReference{render.OwnerReference(cvm)}},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(keep)),
			Selector:     &metav1.LabelSelector{MatchLabels: selector},
		},
	}
	u, err := render.Unstructured(pdb)
	if err != nil {
		return err
	}
	if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying PodDisruptionBudget %s: %w", key.Name, err)
	}
	return nil
}
