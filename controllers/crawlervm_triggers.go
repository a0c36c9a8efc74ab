package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/placer"
	"isochron.io/isochron/internal/slo"
)

// The triggers of a move, each a phase: what makes a crawler leave its node, found from
// the scope, handed to the one engine (relocate).

// evacuate moves the crawler off its node when an eviction of its launcher pod marked
// its VMI for evacuation (evictionStrategy External: KubeVirt migrates nothing itself).
// Only an administrator or the cluster's own controllers cordon a node, so a mark on a
// cordoned node is a drain: the crawler moves, and where no node fits it stays, says what
// is missing, and the drain waits (its eviction keeps being refused). Anyone who may evict
// the namespace's pods can mark it on a node nobody cordoned: that is a request to move
// this crawler (evicted), within the budget of requested moves, and it closes the node to
// no other crawler. A VMI adopted from an earlier release (no evictionStrategy External)
// leaves a cordoned node as for a drain (move.EvacuationOf).
func (r *CrawlerVMReconciler) evacuate(ctx context.Context, s *scope) (ctrl.Result, error) {
	cvm, vmi := s.cvm, s.running
	if vmi == nil || cvm.Status.Move != nil || cvm.Status.Placement == nil || vmi.Status.NodeName == "" {
		return ctrl.Result{}, nil
	}
	node := vmi.Status.NodeName
	n, err := s.node(ctx, node)
	if err != nil {
		return ctrl.Result{}, err
	}
	switch move.EvacuationOf(vmi.Status.EvacuationNodeName == node, n != nil && n.Spec.Unschedulable, external(vmi)) {
	case move.Drain:
		return r.drain(ctx, s, node, fmt.Sprintf("node %s is being drained (it is cordoned, and an eviction marked VMI %s for evacuation)", node, vmi.Name))
	case move.Evicted:
		return r.evicted(ctx, s, vmi)
	case move.DrainAdopted:
		return r.drain(ctx, s, node, fmt.Sprintf("node %s is cordoned, and VMI %s, adopted from an earlier release of isochron, has no evictionStrategy External until its next start: isochron moves it off as for a drain", node, vmi.Name))
	case move.Stay:
	}
	return ctrl.Result{}, nil
}

// drain moves the crawler off node, which is being drained, after the backoff of a failed
// try.
func (r *CrawlerVMReconciler) drain(ctx context.Context, s *scope, node, why string) (ctrl.Result, error) {
	if last := s.cvm.Status.LastMove; last != nil && last.Reason == isov1.MoveEvacuation {
		if wait := move.RetryWait(last, r.clock.Now()); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	return r.relocate(ctx, s, moveTrigger{reason: isov1.MoveEvacuation, avoid: []placement.Avoid{{Node: node, Why: "node is being drained"}}, why: why,
		then: fmt.Sprintf("the drain waits: free what is missing on another node, or cancel the drain (kubectl uncordon %s)", node)})
}

// evicted moves the crawler whose launcher someone evicted on a node nobody cordoned: a
// request to move it (MoveRequested), which waits for the budget of requested moves
// (move.Budget) and says so.
func (r *CrawlerVMReconciler) evicted(ctx context.Context, s *scope, vmi *kubevirtv1.VirtualMachineInstance) (ctrl.Result, error) {
	node := vmi.Status.NodeName
	why := fmt.Sprintf("an eviction of its launcher pod marked VMI %s for evacuation on node %s, which is not cordoned: isochron takes it as a request to move the crawler", vmi.Name, node)
	wait, spent, err := r.requestedMoveWait(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wait > 0 {
		s.event(s.cvm, corev1.EventTypeWarning, isov1.EventReasonMoveDeferred, fmt.Sprintf("%s; it stays until %s: %s", why, r.clock.Now().Add(wait).UTC().Format(time.RFC3339), spent))
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	return r.relocate(ctx, s, moveTrigger{reason: isov1.MoveRequested, avoid: []placement.Avoid{{Node: node, Why: "the node it runs on"}}, why: why,
		then: "the eviction stays refused; free what is missing on another node"})
}

// recoverLostNode starts the crawler on another node once its node is lost and fenced
// (move.Node), and ends the reconcile: a cold move (its first copy is gone), placed by the
// model like any move; the VM's template is pinned to the new node before KubeVirt starts
// the next VMI, so that it does not start pinned to the dead node. Where no node fits, the
// crawler stays down and says what is missing. A node not ready yet is looked at again
// when its grace ends.
func (r *CrawlerVMReconciler) recoverLostNode(ctx context.Context, s *scope) (ctrl.Result, error) {
	w, err := s.world(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	node, cvm := w.Node, s.cvm
	if !node.Fenced {
		return ctrl.Result{RequeueAfter: node.Wait}, nil
	}
	s.stop()
	if cvm.Status.Move != nil || cvm.Status.Placement == nil {
		return ctrl.Result{}, nil
	}
	return r.relocate(ctx, s, moveTrigger{reason: isov1.MoveNodeLost, cold: true, why: node.Why, then: "it stays down until one can",
		avoid: []placement.Avoid{{Node: cvm.Status.Placement.Node, Why: "node is lost"}}})
}

// recoverRejected starts a crawler that does not run on another node when the kubelet of
// its node refused its launcher for a reason of the node (inventory.LauncherRejected): the
// VMI failed before it ran, and KubeVirt's crash-loop backoff would start it there again
// and again. A cold move away from that node; where none fits, the crawler stays and
// KubeVirt keeps trying.
func (r *CrawlerVMReconciler) recoverRejected(ctx context.Context, s *scope) (ctrl.Result, error) {
	cvm, w := s.cvm, s.w
	if s.running != nil || cvm.Status.Move != nil || cvm.Status.Placement == nil || w == nil {
		return ctrl.Result{}, nil
	}
	var uids []string
	if w.VMI != nil {
		uids = append(uids, string(w.VMI.UID))
	}
	if w.VM != nil && w.VM.Status.StartFailure != nil {
		uids = append(uids, string(w.VM.Status.StartFailure.LastFailedVMIUID))
	}
	if len(uids) == 0 {
		return ctrl.Result{}, nil
	}
	pod, node, reason, message, rejected := inventory.LauncherRejected(w.Launchers, uids...)
	if !rejected || node != cvm.Status.Placement.Node {
		return ctrl.Result{}, nil
	}
	return r.relocate(ctx, s, moveTrigger{reason: isov1.MoveNodeRejected, cold: true, then: "KubeVirt keeps starting it there",
		why:   fmt.Sprintf("the kubelet of node %s refused launcher pod %s: %s (%s)", node, pod, reason, message),
		avoid: []placement.Avoid{{Node: node, Why: "its kubelet refused the crawler's launcher: " + reason}}})
}

// recoverUnschedulable starts a crawler that does not run on another node when
// kube-scheduler has not put its launcher on its node, for a reason of the node
// (inventory.UnschedulableNode: cordoned, tainted, its CPUs taken), for the unschedulable
// grace: a cold move, counted as the outage it is. Once: a crawler that moved so within
// the minimum move interval stays, and its Ready condition says why.
func (r *CrawlerVMReconciler) recoverUnschedulable(ctx context.Context, s *scope) (ctrl.Result, error) {
	cvm, w := s.cvm, s.w
	if s.running != nil || cvm.Status.Move != nil || cvm.Status.Placement == nil || w == nil || w.VMI == nil || !w.VMI.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	placed := cvm.Status.Placement.Node
	node, err := s.node(ctx, placed)
	if err != nil {
		return ctrl.Result{}, err
	}
	var mine []corev1.Pod
	for _, p := range w.Launchers {
		if p.Labels[kubevirtv1.CreatedByLabel] == string(w.VMI.UID) {
			mine = append(mine, p)
		}
	}
	pod, why, since, ok := inventory.UnschedulableNode(mine, node)
	if !ok {
		return ctrl.Result{}, nil
	}
	wait, moveNow := move.AfterUnschedulable(since, r.clock.Now(), r.unschedulableGrace, cvm.Status.LastMove, r.minMoveInterval)
	if !moveNow {
		return ctrl.Result{RequeueAfter: wait}, nil // within the grace, or moved so once: Ready (LauncherUnschedulable) says what holds it
	}
	return r.relocate(ctx, s, moveTrigger{reason: isov1.MoveNodeUnschedulable, cold: true,
		why:   fmt.Sprintf("launcher pod %s cannot be scheduled on node %s since %s: %s", pod, placed, since.UTC().Format(time.RFC3339), why),
		avoid: []placement.Avoid{{Node: placed, Why: "the crawler's launcher cannot be scheduled there"}}})
}

// redecideOverbooked re-decides a crawler whose reservation the leader found, the
// youngest, on a node that holds more than it has (placer.Admission). Its VM, when it has
// one, moves to a node the model chose, by the route every move takes (the node it leaves
// holds it until it has left); with nowhere to go it stays and says so. Without a VM, its
// reservation is released and decided again: another node, or none (Placed=False,
// Overbooked) until capacity frees. Either way the reconcile ends with it.
func (r *CrawlerVMReconciler) redecideOverbooked(ctx context.Context, s *scope) (ctrl.Result, error) {
	why, cvm := s.overbooked, s.cvm
	if why == "" {
		return ctrl.Result{}, nil
	}
	node := cvm.Status.Placement.Node
	avoid := []placement.Avoid{{Node: node, Why: why}}
	if cvm.Status.VMI != nil {
		t := moveTrigger{reason: isov1.MoveOverbooked, avoid: avoid, why: why + "; the crawler holds its youngest reservation", event: isov1.ReasonOverbooked}
		d, taken, err := r.startMove(ctx, s, t, func(d placement.Decision) {
			s.event(cvm, corev1.EventTypeWarning, isov1.ReasonOverbooked, fmt.Sprintf("%s: the crawler, the youngest reservation there, moves to node %s", capitalise(why), d.Node))
		})
		switch {
		case err != nil || d.Placed():
			s.stop()
			return ctrl.Result{}, err
		case !taken:
			return ctrl.Result{}, nil
		}
		s.stop()
		return ctrl.Result{RequeueAfter: r.blocked(s, t, d)}, nil
	}
	s.stop()
	req := s.request(ctx)
	req.Avoid = avoid
	_, _, err := r.reserve(ctx, s, placer.Request{Crawler: cvm, Decide: &req, OrDrop: true}, func(d placement.Decision) {
		if d.Placed() {
			hold(cvm, d)
			s.event(cvm, corev1.EventTypeWarning, isov1.ReasonOverbooked, fmt.Sprintf("%s: the crawler, the youngest reservation there, is placed on node %s instead", capitalise(why), d.Node))
			return
		}
		cvm.Status.Placement = nil
		msg := fmt.Sprintf("%s: the crawler's reservation there, the youngest, was released, and no other node can host it: %s", why, d.Reason)
		setCondition(cvm, isov1.ConditionPlaced, false, isov1.ReasonOverbooked, msg)
		setCondition(cvm, isov1.ConditionReady, false, isov1.ReasonNotPlaced, "waiting for a node: "+d.Reason)
		apimeta.RemoveStatusCondition(&cvm.Status.Conditions, isov1.ConditionAtRisk)
		s.event(cvm, corev1.EventTypeWarning, isov1.ReasonOverbooked, msg)
	})
	return ctrl.Result{}, err
}

// capitalise makes a message that starts a sentence start with a capital.
func capitalise(s string) string {
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		return string(s[0]-'a'+'A') + s[1:]
	}
	return s
}

// remediate acts on a refuting probe under spec.placement.onRefuted Replace
// (slo.NextRemedy decides when): it moves the running crawler away from the node the
// probe refuted it on, to a node where the corrected model predicts that it and every
// neighbour fit and that has not refuted it recently (status.refutedOn), or leaves it
// there and says so (status.lastRemediation, NoBetterNode). It looks again when the
// minimum move interval or a failed move's backoff holds a move back.
func (r *CrawlerVMReconciler) remediate(ctx context.Context, s *scope) (ctrl.Result, error) {
	cvm := s.cvm
	if cvm.Status.Move != nil {
		return ctrl.Result{}, nil // measured again where it arrives
	}
	vmiUID := ""
	if s.running != nil {
		vmiUID = string(s.running.UID)
	}
	now := r.clock.Now()
	next := slo.NextRemedy(cvm, vmiUID, now, r.minMoveInterval)
	if next.Wait > 0 {
		if last := cvm.Status.LastRemediation; last != nil && last.Job != cvm.Status.LastProbe.Job {
			s.event(cvm, corev1.EventTypeWarning, isov1.EventReasonMoveDeferred, fmt.Sprintf(
				"Probe Job %s refuted the SLO on node %s; the crawler moved %s (at %s), less than the minimum move interval of %s ago: it moves at %s",
				cvm.Status.LastProbe.Job, cvm.Status.Placement.Node, moveText(last), last.Time.UTC().Format(time.RFC3339),
				format.Duration(r.minMoveInterval), last.Time.Add(r.minMoveInterval).UTC().Format(time.RFC3339)))
		}
		return ctrl.Result{RequeueAfter: next.Wait}, nil
	}
	if !next.Move {
		return ctrl.Result{}, nil
	}
	last, from := cvm.Status.LastProbe, cvm.Status.Placement.Node
	refuted := fmt.Sprintf("probe Job %s refuted the SLO on node %s", last.Job, from)
	if last.IntervalError != nil {
		refuted += fmt.Sprintf(" (interval error %s against the %s tolerance)", format.Duration(last.IntervalError.AtObjective.Duration), format.Duration(cvm.Spec.ErrorBudget.Tolerance.Duration))
	}
	// The node that refuted it, and every node that did recently.
	avoid := append(move.Avoid(cvm.Status.RefutedOn, now, r.refutedMemory), placement.Avoid{Node: from, Why: "a probe refuted the crawler's SLO there"})
	before := cvm.Status.DeepCopy()
	done := &isov1.Remediation{Job: last.Job, Time: metav1.NewTime(now.UTC().Truncate(time.Second)), From: from}
	cvm.Status.LastRemediation = done
	d, taken, err := r.startMove(ctx, s, moveTrigger{reason: isov1.MoveRefuted, avoid: avoid, why: refuted}, func(d placement.Decision) {
		done.To = d.Node
		done.Message = format.Truncate(fmt.Sprintf("%s; moving to node %s, where the model predicts %s (%s)", refuted, d.Node, format.Duration(d.Predicted), d.Cause), move.MaxMessage)
	})
	switch {
	case err != nil || d.Placed():
		return ctrl.Result{}, err
	case !taken:
		cvm.Status = *before // no decision taken (one is on its way)
		return ctrl.Result{}, nil
	}
	done.Message = format.Truncate(fmt.Sprintf("%s; it stays: no other node is predicted to fit it (%s)", refuted, d.Reason), move.MaxMessage)
	s.event(cvm, corev1.EventTypeWarning, isov1.EventReasonNoBetterNode, fmt.Sprintf("Stays on node %s: %s, and no other node is predicted to fit it", from, refuted))
	s.after(func() { r.metrics.moves.WithLabelValues(string(isov1.MoveRefuted), "", moveNoNode).Inc() })
	return ctrl.Result{}, nil
}

func moveText(r *isov1.Remediation) string {
	return fmt.Sprintf("from node %s to node %s", r.From, r.To)
}
