package controllers

import (
	"context"
	"fmt"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/calibration"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/readiness"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/internal/sizing"
)

// place holds a node for the crawler in status, chosen by the contention model. A crawler
// placed for its current generation keeps its node while the node exists; only its
// prediction is refreshed. status.sizing and status.placement together are the
// reservation the crawler holds: when a changed spec cannot be placed, the previous
// reservation (and the VMI running with it) is kept, so nothing running is lost and no
// node is counted short.
//
// The placer decides, under its lock, on its ledger and assumes the decision into it at
// once; it is persisted after the lock is released, with an optimistic lock, and
// forgotten from the ledger when that fails (a stale copy, a conflicting write, a
// manager that lost its lease: the leader fence), to be decided again.
func (r *CrawlerVMReconciler) place(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter) (bool, error) {
	// A spec change waits for a move in progress to end: the move keeps the VM's size,
	// and a second decision would pull the crawler away from a migration under way.
	if (r.isPlaced(cvm) && !inventory.CountedOtherwise(cvm, r.request(ctx, cvm))) || (cvm.Status.Move != nil && cvm.Status.Placement != nil) {
		inv, err := r.placer.gatherNode(ctx, cvm.Status.Placement.Node)
		if err != nil {
			return true, err
		}
		if inv.hasNode(cvm.Status.Placement.Node) {
			r.refreshPrediction(cvm, st, inv)
			return false, nil
		}
		if cvm.Status.VMI != nil {
			return false, nil // its node is gone: the node loss moves it (recoverFromLostNode)
		}
	}
	if readiness.Released(cvm.Status.Conditions) && cvm.Status.Placement == nil {
		// Stopped or refused for a while: a reservation again once a launcher exists.
		if again, err := r.whileReleased(ctx, cvm, st); err != nil || !again {
			return true, err
		}
	}
	// A decision only within the nodes the administrator lets the namespace reach: a
	// spec that reaches beyond them is refused, and a reservation held keeps its node.
	if err := r.access.Check(cvm.Namespace, cvm.Spec.Placement); err != nil {
		refuseAccess(cvm, st, err)
		return cvm.Status.Placement == nil, nil
	}
	before := reservationOf(cvm)
	done, change, err := r.placer.Decide(ctx, cvm, func(d placement.Decision) bool { return r.recordDecision(cvm, st, d) })
	if err != nil || change == nil {
		return true, err
	}
	// Persist the reservation, after the decision lock is released; the ledger already
	// counts it for the next decision, and what it released until the write lands.
	if err := r.placer.persist(change, func() error { return st.persist(ctx, cvm) }); err != nil {
		return true, err
	}
	if reservationOf(cvm) != before {
		// Decisions before workloads, as kube-scheduler binds and the kubelet starts: the
		// worker goes on to the next crawler, and this one comes back, for its VMI, when the
		// cache shows the new reservation (reservationChanged).
		return true, nil
	}
	return done, nil
}

// recordDecision makes decision d the crawler's status (applyDecision) and tells it in an
// Event and the metrics, once the status is written (st); a spec change that takes the crawler to another node starts a
// move (the placer assumes both reservations). It returns whether the reconcile is done
// (nothing held).
func (r *CrawlerVMReconciler) recordDecision(cvm *isov1.CrawlerVM, st *statusWriter, d placement.Decision) bool {
	prev := ""
	if held := cvm.Status.Placement; held != nil && cvm.Status.VMI != nil {
		prev = held.Node // a VM of the previous spec runs there
	}
	out := applyDecision(cvm, d)
	result := "placed"
	if !d.Placed() {
		result = "unschedulable"
	}
	st.after(func() { r.metrics.placementDecisions.WithLabelValues(result).Inc() })
	if e := out.event; e != nil {
		st.event(cvm, e.kind, e.reason, e.message)
	}
	if held := cvm.Status.Placement; d.Placed() && held != nil && prev != "" && prev != held.Node {
		// A spec change moved the crawler: it moves by the route every move takes, holding
		// the node it runs on until it has arrived.
		cvm.Status.Move = &isov1.Move{Reason: isov1.MoveSpecChange, Mode: isov1.MoveLive, From: prev, To: held.Node,
			StartTime: metav1.NewTime(r.clock.Now().UTC().Truncate(time.Second)),
			Message:   fmt.Sprintf("spec generation %d no longer fits node %s", cvm.Generation, prev)}
		setCondition(cvm, isov1.ConditionMoving, true, isov1.ReasonMigrating, fmt.Sprintf("moving from node %s to node %s: %s", prev, held.Node, cvm.Status.Move.Message))
	}
	return out.done
}

// outcome is what a decision means beyond the status: whether the reconcile is done, and
// the Event that tells it (nil for none).
type outcome struct {
	done  bool
	event *eventInfo
}

type eventInfo struct{ kind, reason, message string }

// applyDecision turns a placement decision into the crawler's status: the reservation
// (status.sizing, status.placement), the Placed, Ready and AtRisk conditions, and
// observedGeneration. It does no I/O. A crawler nothing fits keeps the reservation it
// holds (the VM of its previous spec); one that holds none is done until something
// changes.
func applyDecision(cvm *isov1.CrawlerVM, d placement.Decision) outcome {
	held := cvm.Status.Placement
	placedNow := apimeta.IsStatusConditionTrue(cvm.Status.Conditions, isov1.ConditionPlaced)
	firstDecision := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionPlaced) == nil
	cvm.Status.ObservedGeneration = cvm.Generation
	want := d.Sizing
	if !d.Placed() {
		msg := fmt.Sprintf("no node can host %d vCPUs (%d exclusive CPUs) within every crawler's budget: %s", want.VCPUs, want.HostCPUs, d.Reason)
		if held != nil {
			msg += fmt.Sprintf("; the VM of the previous spec keeps its reservation on %s", held.Node)
		} else if want.VCPUs > 0 {
			cvm.Status.Sizing = inventory.SizingStatus(want)
		}
		setCondition(cvm, isov1.ConditionPlaced, false, isov1.ReasonUnschedulable, msg)
		if held == nil {
			setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonNotPlaced, "waiting for a node: "+d.Reason)
			apimeta.RemoveStatusCondition(&cvm.Status.Conditions, isov1.ConditionAtRisk) // it holds no node
		}
		out := outcome{done: held == nil}
		if placedNow || firstDecision {
			out.event = &eventInfo{corev1.EventTypeWarning, isov1.ReasonUnschedulable, msg}
		}
		return out
	}
	out := outcome{}
	if held == nil || held.Node != d.Node {
		out.event = &eventInfo{corev1.EventTypeNormal, isov1.ReasonPlaced, fmt.Sprintf("Placed on node %s with %d vCPUs (%d exclusive CPUs), predicted interval error %s",
			d.Node, want.VCPUs, want.HostCPUs, format.Duration(d.Predicted))}
	}
	hold(cvm, d)
	return out
}

// hold makes decision d, which placed the crawler, its reservation: status.sizing and
// status.placement, the Placed condition and AtRisk.
func hold(cvm *isov1.CrawlerVM, d placement.Decision) {
	cvm.Status.Sizing = inventory.SizingStatus(d.Sizing)
	// A node is chosen only where every crawler stays within budget.
	setPlacement(cvm, d.Node, d.Sizing, model.Prediction{Error: d.Predicted, Cause: d.Cause, Correction: d.Correction, Within: true})
}

// setPlacement records the crawler's prediction on its node in status.placement, and
// from the same figures the Placed condition's message and AtRisk: one source, so the
// message never keeps a figure status.placement has since refreshed. A crawler that
// moved here (status.lastRemediation) says so first. It does no I/O.
func setPlacement(cvm *isov1.CrawlerVM, node string, size sizing.Result, pred model.Prediction) {
	tolerance := cvm.Spec.ErrorBudget.Tolerance.Duration
	prefix := ""
	if m := cvm.Status.LastRemediation; m != nil && m.To == node {
		prefix = fmt.Sprintf("moved from node %s (probe Job %s refuted the SLO there): ", m.From, m.Job)
	}
	cvm.Status.Placement = placementStatus(cvm, node, pred.Error, pred.Correction)
	holds := fmt.Sprintf("%d exclusive CPUs (%d vCPUs and the emulator thread)", size.HostCPUs, size.VCPUs)
	if !size.Dedicated() {
		holds = fmt.Sprintf("a %s CPU request in the shared pool for %d vCPUs", format.CPU(size.CPURequestMilli), size.VCPUs)
	}
	within := "within"
	if !pred.Within {
		within = "over"
	}
	setCondition(cvm, isov1.ConditionPlaced, true, isov1.ReasonPlaced,
		fmt.Sprintf("%snode %s holds %s; predicted interval error %s (%s) %s the %s tolerance",
			prefix, node, holds, format.Duration(cvm.Status.Placement.PredictedError.Duration), pred.Cause, within, format.Duration(tolerance)))
	risk, reason, msg := atRisk(node, pred, tolerance)
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
// now (neighbours come and go, profiles change), in status.placement and the Placed
// message alike, and says whether that puts it at risk (an Event once st is written).
func (r *CrawlerVMReconciler) refreshPrediction(cvm *isov1.CrawlerVM, st *statusWriter, inv *clusterInventory) {
	res, held := inventory.Resident(cvm)
	pred, ok := inv.predict(cvm.Namespace + "/" + cvm.Name)
	if !ok || !held {
		return
	}
	wasAtRisk := apimeta.IsStatusConditionTrue(cvm.Status.Conditions, isov1.ConditionAtRisk)
	setPlacement(cvm, res.Node, res.Sizing, pred)
	if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionAtRisk); c.Status == metav1.ConditionTrue && !wasAtRisk {
		st.event(cvm, corev1.EventTypeWarning, c.Reason, c.Message)
	}
}

// rtNetwork is the crawler's RT-NIC's NetworkAttachmentDefinition from the cache; nil,
// nil when it has no RT-NIC. runVMI reports a missing network or Multus API; placement
// takes either as no VFIO memory.
func (r *CrawlerVMReconciler) rtNetwork(ctx context.Context, cvm *isov1.CrawlerVM) (*nadv1.NetworkAttachmentDefinition, error) {
	if cvm.Spec.RTNIC == nil {
		return nil, nil
	}
	nad := &nadv1.NetworkAttachmentDefinition{}
	if err := r.Get(ctx, render.NetworkKey(cvm), nad); err != nil {
		return nil, err
	}
	return nad, nil
}

// request is the crawler's placement request with what its pod holds beyond its spec as
// the cluster has it now: VFIO memory for an SR-IOV RT-NIC (render.VFIO; none when its
// network cannot be read) and KubeVirt's support containers (render.Support).
func (r *CrawlerVMReconciler) request(ctx context.Context, cvm *isov1.CrawlerVM) placement.Request {
	nad, err := r.rtNetwork(ctx, cvm)
	vfio := err == nil && render.VFIO(cvm, nad)
	req := inventory.Request(cvm, vfio, render.Support(cvm, r.kubeVirtSupport(ctx)))
	r.access.Apply(cvm.Namespace, &req) // only the nodes its namespace may reach
	return req
}

// refuseAccess says, in the crawler's status, that its spec reaches beyond the nodes its
// namespace may reach (err names the field and the fix), and tells it in an Event when
// that is news. A crawler that holds a reservation keeps it, and its VM runs on.
func refuseAccess(cvm *isov1.CrawlerVM, st *statusWriter, err error) {
	msg := err.Error()
	if held := cvm.Status.Placement; held != nil {
		msg += fmt.Sprintf("; the VM of the previous spec keeps its reservation on %s", held.Node)
	}
	if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionPlaced); c == nil || c.Reason != isov1.ReasonNodeAccessNotAllowed || c.Message != msg {
		st.event(cvm, corev1.EventTypeWarning, isov1.ReasonNodeAccessNotAllowed, msg)
	}
	cvm.Status.ObservedGeneration = cvm.Generation
	setCondition(cvm, isov1.ConditionPlaced, false, isov1.ReasonNodeAccessNotAllowed, msg)
	if cvm.Status.Placement == nil {
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonNotPlaced, "not placed: "+err.Error())
	}
}

// kubeVirtSupport is what the cluster's KubeVirt resource (inventory.ClusterKubeVirt)
// sets for launchers' support containers (inventory.Support), from the cache: KubeVirt's
// defaults when there is none, or the KubeVirt API is not served (logged: a decision
// then counts the defaults).
func (r *CrawlerVMReconciler) kubeVirtSupport(ctx context.Context) sizing.SupportConfig {
	list := &kubevirtv1.KubeVirtList{}
	// Read only, once per decision: the cache's own objects, not copies.
	if err := r.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).V(1).Info("counting KubeVirt's default support containers: its KubeVirt resource cannot be read", "error", err.Error())
		return inventory.Support(nil)
	}
	return inventory.Support(inventory.ClusterKubeVirt(list.Items))
}

// rtBinding reads the RT-NIC's NetworkAttachmentDefinition to tell SR-IOV from bridge,
// and whether the network asks the guest to mark its traffic.
func (r *CrawlerVMReconciler) rtBinding(ctx context.Context, cvm *isov1.CrawlerVM) (render.Binding, bool, error) {
	nad, err := r.rtNetwork(ctx, cvm)
	if nad == nil || err != nil {
		return "", false, err
	}
	if err := render.UplinkAllowed(nad, r.rtUplinks); err != nil {
		return "", false, &uplinkNotAllowed{err}
	}
	return render.BindingOf(nad), render.GuestDSCPOf(nad), nil
}

// uplinkNotAllowed is rtBinding's error for a network whose uplink the administrator did
// not name (render.UplinkAllowed).
type uplinkNotAllowed struct{ error }
