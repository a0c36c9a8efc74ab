package controllers

import (
	"context"
	"fmt"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/calibration"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/slo"
)

// place holds a node for the crawler in status, chosen by the contention model. A crawler
// placed for its current generation keeps its node while the node exists; only its
// prediction is refreshed. status.sizing and status.placement together are the
// reservation the crawler holds: when a changed spec cannot be placed, the previous
// reservation (and the VMI running with it) is kept, so nothing running is lost and no
// node is counted short.
//
// The decision is made under r.decide on the ledger and assumed into it at once; it is
// persisted after the lock is released, with an optimistic lock, and forgotten from the
// ledger when that fails (a stale copy, a conflicting write), to be decided again.
func (r *CrawlerVMReconciler) place(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter) (bool, error) {
	if r.isPlaced(cvm) {
		inv, err := r.gather(ctx)
		if err != nil {
			return true, err
		}
		if inv.hasNode(cvm.Status.Placement.Node) {
			r.refreshPrediction(cvm, inv)
			return false, nil
		}
	}
	done, undo, err := r.decidePlacement(ctx, cvm)
	if err != nil || undo == nil {
		return true, err
	}
	// Persist the reservation; the ledger already counts it for the next decision.
	if err := st.persist(ctx, cvm); err != nil {
		undo()
		return true, err
	}
	return done, nil
}

// decidePlacement decides where the crawler goes, under r.decide, and writes the decision
// into cvm's status and the ledger. It returns whether the reconcile is done (nothing
// held), and the undo that forgets the decision from the ledger; a nil undo means no
// decision was taken: this process's last decision for the crawler has not reached the
// cache yet, whose update brings the crawler back.
func (r *CrawlerVMReconciler) decidePlacement(ctx context.Context, cvm *isov1.CrawlerVM) (done bool, undo func(), err error) {
	r.decide.Lock()
	defer r.decide.Unlock()
	if err := r.buildLedger(ctx); err != nil {
		return true, nil, err
	}
	key := cvm.Namespace + "/" + cvm.Name
	if r.ledger.Assumed(key) {
		// The cache's copy predates a decision for it (never place a crawler twice).
		return true, nil, nil
	}
	began := r.clock.Now()
	inv, err := r.gather(ctx)
	if err != nil {
		return true, nil, err
	}
	held := cvm.Status.Placement
	placedNow := apimeta.IsStatusConditionTrue(cvm.Status.Conditions, isov1.ConditionPlaced)
	d := placement.NewPlanner(inv.nodes, inv.residents).Place(inventory.Request(cvm))
	r.metrics.placementDuration.Observe(r.clock.Since(began).Seconds())
	result := "placed"
	if !d.Placed() {
		result = "unschedulable"
	}
	r.metrics.placementDecisions.WithLabelValues(result).Inc()
	cvm.Status.ObservedGeneration = cvm.Generation
	want := d.Sizing
	if !d.Placed() {
		msg := fmt.Sprintf("no node can host %d vCPUs (%d exclusive CPUs) within every crawler's budget: %s", want.VCPUs, want.HostCPUs, d.Reason)
		if held != nil {
			msg += fmt.Sprintf("; the VM of the previous spec keeps its reservation on %s", held.Node)
		} else if want.VCPUs > 0 {
			cvm.Status.Sizing = want.Status()
		}
		if placedNow || apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionPlaced) == nil {
			r.Recorder.Event(cvm, corev1.EventTypeWarning, isov1.ReasonUnschedulable, msg)
		}
		setCondition(cvm, isov1.ConditionPlaced, false, isov1.ReasonUnschedulable, msg)
		if held == nil {
			setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonNotPlaced, "waiting for a node: "+d.Reason)
			apimeta.RemoveStatusCondition(&cvm.Status.Conditions, isov1.ConditionAtRisk) // it holds no node
		}
		// The reservation is unchanged: nothing to assume or undo.
		return held == nil, func() {}, nil
	}
	if held == nil || held.Node != d.Node {
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.ReasonPlaced, "Placed on node %s with %d vCPUs (%d exclusive CPUs), predicted interval error %s",
			d.Node, want.VCPUs, want.HostCPUs, format.Duration(d.Predicted))
	}
	hold(cvm, d, "")
	res, _ := inventory.Resident(cvm)
	return false, r.ledger.Assume(res), nil
}

// hold makes decision d, which placed the crawler, its reservation: status.sizing and
// status.placement, the Placed condition (its message after prefix) and AtRisk.
func hold(cvm *isov1.CrawlerVM, d placement.Decision, prefix string) {
	want := d.Sizing
	cvm.Status.Sizing = want.Status()
	cvm.Status.Placement = placementStatus(cvm, d.Node, d.Predicted, d.Correction)
	holds := fmt.Sprintf("%d exclusive CPUs (%d vCPUs and the emulator thread)", want.HostCPUs, want.VCPUs)
	if !want.Dedicated() {
		holds = fmt.Sprintf("a %s CPU request in the shared pool for %d vCPUs", format.CPU(want.CPURequestMilli), want.VCPUs)
	}
	setCondition(cvm, isov1.ConditionPlaced, true, isov1.ReasonPlaced,
		fmt.Sprintf("%snode %s holds %s; predicted interval error %s (%s) within %s; %s CPU left there",
			prefix, d.Node, holds, format.Duration(d.Predicted), d.Cause, format.Duration(cvm.Spec.ErrorBudget.Tolerance.Duration), format.CPU(d.FreeCPUMilli)))
	// A node is chosen only where every crawler stays within budget.
	risk, reason, msg := atRisk(d.Node, model.Prediction{Error: d.Predicted, Cause: d.Cause, Within: true}, cvm.Spec.ErrorBudget.Tolerance.Duration)
	setCondition(cvm, isov1.ConditionAtRisk, risk, reason, msg)
}

func (r *CrawlerVMReconciler) isPlaced(cvm *isov1.CrawlerVM) bool {
	return cvm.Status.Placement != nil && cvm.Status.ObservedGeneration == cvm.Generation &&
		apimeta.IsStatusConditionTrue(cvm.Status.Conditions, isov1.ConditionPlaced)
}

// placementStatus records the node and the prediction, with the node's correction it
// includes; headroom is tolerance minus it.
func placementStatus(cvm *isov1.CrawlerVM, node string, predicted time.Duration, correction float64) *isov1.PlacementStatus {
	// Whole microseconds keep the status stable and readable ("1.712ms").
	predicted = predicted.Round(time.Microsecond)
	ps := &isov1.PlacementStatus{
		Node:           node,
		PredictedError: &metav1.Duration{Duration: predicted},
		Headroom:       &metav1.Duration{Duration: cvm.Spec.ErrorBudget.Tolerance.Duration - predicted},
	}
	if correction > 0 && correction != 1 {
		ps.Correction = isov1.Decimal(calibration.Format(correction))
	}
	return ps
}

// refreshPrediction updates a placed crawler's predicted error for what is on its node
// now (neighbours come and go, profiles change) and says whether that puts it at risk.
func (r *CrawlerVMReconciler) refreshPrediction(cvm *isov1.CrawlerVM, inv *clusterInventory) {
	node := cvm.Status.Placement.Node
	pred, ok := inv.predict(cvm.Namespace + "/" + cvm.Name)
	if !ok {
		return
	}
	cvm.Status.Placement = placementStatus(cvm, node, pred.Error, pred.Correction)
	risk, reason, msg := atRisk(node, pred, cvm.Spec.ErrorBudget.Tolerance.Duration)
	if risk && !apimeta.IsStatusConditionTrue(cvm.Status.Conditions, isov1.ConditionAtRisk) {
		r.Recorder.Event(cvm, corev1.EventTypeWarning, reason, msg)
	}
	setCondition(cvm, isov1.ConditionAtRisk, risk, reason, msg)
}

// runVMI makes the VMI match the reservation in status and reports its phase. VMI specs
// are immutable, so a changed rendering replaces the VMI: delete, then create once gone.
// It returns the VMI when it is Running with the current rendering, else nil.
func (r *CrawlerVMReconciler) runVMI(ctx context.Context, cvm *isov1.CrawlerVM, gatewayIP string) (*kubevirtv1.VirtualMachineInstance, error) {
	held := cvm.Status.Placement
	size, ok := inventory.Resident(cvm)
	if !ok {
		return nil, nil
	}
	binding, err := r.rtBinding(ctx, cvm)
	if err != nil {
		if apierrors.IsNotFound(err) {
			setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonRTNetworkNotFound,
				fmt.Sprintf("spec.rtNIC.networkName: NetworkAttachmentDefinition %s not found; create it or fix the name", render.NetworkKey(cvm)))
			return nil, nil
		}
		return nil, err
	}
	in := render.Input{CrawlerVM: cvm, Sizing: size.Sizing, Node: held.Node, RTBinding: binding,
		Agent: &render.Agent{Image: r.probes.Image, Gateways: slo.GatewayURLs(cvm, gatewayIP)}}
	desired, err := render.VMI(in)
	if err != nil {
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonInvalid, err.Error())
		return nil, nil
	}

	current := &kubevirtv1.VirtualMachineInstance{}
	err = r.Get(ctx, client.ObjectKeyFromObject(desired), current)
	switch {
	case apierrors.IsNotFound(err):
		u, err := render.Unstructured(desired)
		if err != nil {
			return nil, err
		}
		if err := r.Patch(ctx, u, client.Apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return nil, fmt.Errorf("applying VMI %s: %w", desired.Name, err)
		}
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.EventReasonVMICreated, "Created VMI %s on node %s", desired.Name, held.Node)
		cvm.Status.VMI = &isov1.VMIStatus{Name: desired.Name}
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonVMIPending, fmt.Sprintf("VMI %s created, waiting for KubeVirt to start it", desired.Name))
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading VMI %s: %w", desired.Name, err)
	}
	if !metav1.IsControlledBy(current, cvm) {
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonInvalid,
			fmt.Sprintf("a VMI named %s exists and is not owned by this CrawlerVM; delete or rename it", current.Name))
		return nil, nil
	}
	cvm.Status.VMI = &isov1.VMIStatus{Name: current.Name, Phase: string(current.Status.Phase)}
	if !current.DeletionTimestamp.IsZero() {
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonVMIReplacing, fmt.Sprintf("waiting for VMI %s to be deleted before starting it with the new spec", current.Name))
		return nil, nil
	}
	switch render.Compare(current, in) {
	case render.Adopt:
		// Rendered by a release before the inputs hash, from the current inputs: it keeps
		// running, and carries the hash from now on.
		before := current.DeepCopy()
		if current.Annotations == nil {
			current.Annotations = map[string]string{}
		}
		current.Annotations[isov1.AnnotationVMIInputs] = desired.Annotations[isov1.AnnotationVMIInputs]
		if err := r.Patch(ctx, current, client.MergeFrom(before)); err != nil {
			return nil, fmt.Errorf("annotating VMI %s with its inputs: %w", current.Name, err)
		}
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.EventReasonVMIAdopted, "VMI %s, rendered by an earlier release of isochron from the current spec, keeps running", current.Name)
	case render.Outdated:
		if err := r.Delete(ctx, current, client.Preconditions{UID: &current.UID}); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("deleting outdated VMI %s: %w", current.Name, err)
		}
		why := fmt.Sprintf("spec generation %d changed what it is made from (spec, size, node or RT binding)", cvm.Generation)
		if on := current.Status.NodeName; on != "" && on != held.Node {
			why = fmt.Sprintf("the crawler moved from node %s to node %s", on, held.Node)
		}
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, isov1.ReasonVMIReplacing, "Replacing VMI %s: %s", current.Name, why)
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonVMIReplacing,
			fmt.Sprintf("%s; VMI %s is being replaced (VMI specs are immutable)", why, current.Name))
		return nil, nil
	}
	ok, reason, msg := readiness(current)
	if ok && !apimeta.IsStatusConditionTrue(cvm.Status.Conditions, isov1.ConditionReady) {
		r.Recorder.Eventf(cvm, corev1.EventTypeNormal, reason, "VMI %s runs on node %s", current.Name, current.Status.NodeName)
	}
	setCondition(cvm, isov1.ConditionReady, ok, reason, msg)
	if !ok {
		return nil, nil
	}
	return current, nil
}

// rtBinding reads the RT-NIC's NetworkAttachmentDefinition to tell SR-IOV from bridge.
func (r *CrawlerVMReconciler) rtBinding(ctx context.Context, cvm *isov1.CrawlerVM) (render.Binding, error) {
	if cvm.Spec.RTNIC == nil {
		return "", nil
	}
	nad := &nadv1.NetworkAttachmentDefinition{}
	if err := r.Get(ctx, render.NetworkKey(cvm), nad); err != nil {
		return "", err
	}
	return render.BindingOf(nad), nil
}
