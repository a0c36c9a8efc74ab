package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/inventory"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/render"
)

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations,verbs=get;list;watch;create;delete

// blockedRetry is how often a crawler that must leave its node and has nowhere to go
// looks again (besides the changes that wake it).
const blockedRetry = 30 * time.Second

// startMove re-places the crawler on another node, for reason (why in words), never on a
// node of avoid, nor on one being drained; the crawler keeps its size (a live migration
// moves the VM as it is). The move is a placement decision like any other: taken under
// the decision lock on the ledger, recorded in status.move with the reservation on both
// nodes (assumed into the ledger at once), and persisted before the lock is released. It
// returns the decision: not placed when no node fits (its Reason says why). decided, when
// set, completes the status with the decision before it is persisted.
func (r *CrawlerVMReconciler) startMove(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, reason isov1.MoveReason, avoid []placement.Avoid, why string, decided func(placement.Decision)) (placement.Decision, error) {
	return r.startMoveWithin(ctx, cvm, st, reason, avoid, why, decided, nil)
}

// startMoveWithin is startMove to a node that also matches the labels of added (the
// addedNodeSelector of a migration someone asked for: kubectl isochron move --to).
func (r *CrawlerVMReconciler) startMoveWithin(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, reason isov1.MoveReason, avoid []placement.Avoid, why string, decided func(placement.Decision), added map[string]string) (placement.Decision, error) {
	held, ok := inventory.Resident(cvm)
	if !ok {
		return placement.Decision{}, nil
	}
	draining, err := r.drainingNodes(ctx)
	if err != nil {
		return placement.Decision{}, err
	}
	req := r.request(ctx, cvm)
	req.MoveTo = added
	req.Avoid = append(avoid, draining...)
	req.Size = &held.Sizing
	from := held.Node
	apply := func(d placement.Decision) {
		cvm.Status.Move = &isov1.Move{Reason: reason, Mode: isov1.MoveLive, From: from, To: d.Node,
			StartTime: metav1.NewTime(r.clock.Now().UTC().Truncate(time.Second)),
			Message:   format.Truncate(fmt.Sprintf("%s; node %s is predicted to hold it within every crawler's budget (%s, %s)", why, d.Node, format.Duration(d.Predicted), d.Cause), maxRemediationMessage)}
		hold(cvm, d)
		setCondition(cvm, isov1.ConditionMoving, true, isov1.ReasonMigrating, fmt.Sprintf("moving from node %s to node %s: %s", from, d.Node, cvm.Status.Move.Message))
		if decided != nil {
			decided(d)
		}
		st.event(cvm, corev1.EventTypeNormal, isov1.EventReasonMoving, fmt.Sprintf("Moving from node %s to node %s: %s", from, d.Node, cvm.Status.Move.Message))
	}
	// Persisted with an optimistic lock: a stale copy fails, is forgotten, and decides
	// again (never two moves for one cause: the move is recorded with the reservation).
	return r.placer.Move(ctx, cvm, req, apply, func() error { return st.persist(ctx, cvm) })
}

// drainingNodes are the nodes being drained, as the evictions of crawlers' launcher pods
// marked them (status.evacuationNodeName of their VMIs): no decision places a crawler
// there, as none places one on a cordoned node.
func (r *CrawlerVMReconciler) drainingNodes(ctx context.Context) ([]placement.Avoid, error) {
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	if err := r.List(ctx, vmis, client.HasLabels{isov1.LabelCrawlerVM}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing crawlers' VMIs: %w", err)
	}
	seen := map[string]bool{}
	var out []placement.Avoid
	for i := range vmis.Items {
		if n := vmis.Items[i].Status.EvacuationNodeName; n != "" && !seen[n] {
			seen[n] = true
			out = append(out, placement.Avoid{Node: n, Why: "node is being drained"})
		}
	}
	return out, nil
}

// evacuate moves the crawler off a node that is being drained: an eviction of its
// launcher pod marked its VMI for evacuation (evictionStrategy External; KubeVirt
// migrates nothing itself). Where no node fits, the crawler stays, says what is missing,
// and the drain waits (its eviction keeps being refused). It returns when to look again.
func (r *CrawlerVMReconciler) evacuate(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, vmi *kubevirtv1.VirtualMachineInstance) (time.Duration, error) {
	if vmi == nil || cvm.Status.Move != nil || cvm.Status.Placement == nil {
		return 0, nil
	}
	node := vmi.Status.EvacuationNodeName
	why := fmt.Sprintf("node %s is being drained (an eviction marked VMI %s for evacuation)", node, vmi.Name)
	if node == "" {
		cordoned, err := r.cordonedAdopted(ctx, vmi)
		if err != nil {
			return 0, err
		}
		node = cordoned
		why = fmt.Sprintf("node %s is cordoned, and VMI %s, adopted from an earlier release of isochron, has no evictionStrategy External until its next start: isochron moves it off as for a drain", node, vmi.Name)
	}
	if node == "" || node != vmi.Status.NodeName {
		return 0, nil
	}
	if last := cvm.Status.LastMove; last != nil && last.Reason == isov1.MoveEvacuation {
		if wait := move.RetryWait(last, r.clock.Now()); wait > 0 {
			return wait, nil
		}
	}
	d, err := r.startMove(ctx, cvm, st, isov1.MoveEvacuation, []placement.Avoid{{Node: node, Why: "node is being drained"}}, why, nil)
	if err != nil || d.Placed() {
		return 0, err
	}
	if d.Reason == "" {
		return 0, nil
	}
	msg := fmt.Sprintf("%s, and no other node can hold the crawler within every crawler's budget: %s; the drain waits: free what is missing on another node, or cancel the drain (kubectl uncordon %s)", why, d.Reason, node)
	if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionMoving); c == nil || c.Reason != isov1.ReasonMoveBlocked {
		st.event(cvm, corev1.EventTypeWarning, isov1.ReasonMoveBlocked, msg)
		st.after(func() { r.metrics.moves.WithLabelValues(string(isov1.MoveEvacuation), "", moveNoNode).Inc() })
	}
	setCondition(cvm, isov1.ConditionMoving, false, isov1.ReasonMoveBlocked, msg)
	return blockedRetry, nil
}

// carryOutMove takes the crawler's move (status.move) its next step (move.NextStep):
// create the live migration once KubeVirt has pinned the running VMI to the new node,
// restart the VMI there when it cannot migrate, and end the move when the crawler runs on
// the new node (the node it left is released) or when the migration failed (the new node
// is released, the crawler stays, and the move is tried again after a backoff).
func (r *CrawlerVMReconciler) carryOutMove(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) error {
	m := cvm.Status.Move
	if m == nil {
		return nil
	}
	var mig *kubevirtv1.VirtualMachineInstanceMigration
	name := m.Migration
	if name == "" && m.Mode == isov1.MoveLive && vmi != nil {
		// The move's migration has a name of its own: a status write that lost a conflict
		// after creating it did not record it, and KubeVirt refuses a second one.
		name = migrationName(cvm)
	}
	if name != "" {
		// From the API server: the cache may not show a migration just created yet.
		got, err := getOrNil(ctx, r.APIReader, client.ObjectKey{Namespace: cvm.Namespace, Name: name}, &kubevirtv1.VirtualMachineInstanceMigration{})
		if err != nil {
			return fmt.Errorf("reading migration %s: %w", name, err)
		}
		mig = got
		if mig != nil {
			m.Migration = name
		}
	}
	var inFlight *kubevirtv1.VirtualMachineInstanceMigration
	if m.Migration == "" && vmi != nil {
		other, err := r.inFlight(ctx, r.Client, vmi)
		if err != nil {
			return err
		}
		inFlight = other
	}
	next := move.NextStep(move.State{Move: m, VMI: vmi, Migration: mig, InFlight: inFlight, RestartRequired: restartRequired(vm)})
	if next.Cold && m.Mode == isov1.MoveLive {
		m.Mode, m.Message = isov1.MoveCold, format.Truncate(next.Why, maxRemediationMessage)
	}
	switch next.Step {
	case move.Wait:
		r.setMoving(cvm, next.Why)
	case move.Migrate:
		name, err := r.migrate(ctx, cvm, vmi)
		if err != nil {
			if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) && !apierrors.IsBadRequest(err) {
				return err
			}
			// KubeVirt refuses the migration (virt-api's migration admitter). While another
			// migration of the VMI has not ended (one the cache did not show yet), it
			// refuses every new one: the move waits for it. Otherwise the VMI cannot
			// migrate: it restarts on the new node instead.
			other, ierr := r.inFlight(ctx, r.APIReader, vmi)
			if ierr != nil {
				return ierr
			}
			if other != nil {
				r.setMoving(cvm, move.WaitingFor(other, vmi.Name))
				return nil
			}
			// Refused by the API server (KubeVirt's admission, a policy, a quota): the
			// guest is not restarted for it. The move fails, the crawler runs on where it
			// is, and the move is tried again after its backoff. A VMI KubeVirt reports
			// not live-migratable moves cold (move.NextStep), before any migration.
			return r.endMove(ctx, cvm, st, isov1.MoveFailed, move.Next{Step: move.Fail,
				Why: fmt.Sprintf("the API server refused migration %s of VMI %s: %v; the VMI runs on, on node %s", migrationName(cvm), vmi.Name, err, m.From)})
		}
		m.Migration = name
		r.setMoving(cvm, fmt.Sprintf("migration %s moves VMI %s to node %s", name, vmi.Name, m.To))
	case move.Restart:
		return r.restartElsewhere(ctx, cvm, vmi)
	case move.Done:
		return r.endMove(ctx, cvm, st, isov1.MoveSucceeded, next)
	case move.Fail:
		return r.endMove(ctx, cvm, st, isov1.MoveFailed, next)
	}
	return nil
}

// setMoving says what the move in progress waits for.
func (r *CrawlerVMReconciler) setMoving(cvm *isov1.CrawlerVM, doing string) {
	m := cvm.Status.Move
	reason, how := isov1.ReasonMigrating, "live migration"
	if m.Mode == isov1.MoveCold {
		reason, how = isov1.ReasonRestartingElsewhere, "restart"
	}
	setCondition(cvm, isov1.ConditionMoving, true, reason, fmt.Sprintf("moving from node %s to node %s (%s, %s): %s; %s", m.From, m.To, how, m.Reason, doing, m.Message))
}

// migrate creates the move's VirtualMachineInstanceMigration, with the new node as its
// added node selector (the VMI's affinity already names it), and returns its name.
func (r *CrawlerVMReconciler) migrate(ctx context.Context, cvm *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance) (string, error) {
	m := cvm.Status.Move
	mig := &kubevirtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: migrationName(cvm), Namespace: cvm.Namespace,
			Labels:          map[string]string{isov1.LabelManagedBy: isov1.ManagedBy, isov1.LabelCrawlerVM: cvm.Name},
			OwnerReferences: []metav1.OwnerReference{render.OwnerReference(cvm)}},
		Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name, AddedNodeSelector: map[string]string{corev1.LabelHostname: m.To}},
	}
	if err := r.Create(ctx, mig); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	return mig.Name, nil
}

// inFlight is a migration of vmi that has not ended (move.InFlight), read by reader.
func (r *CrawlerVMReconciler) inFlight(ctx context.Context, reader client.Reader, vmi *kubevirtv1.VirtualMachineInstance) (*kubevirtv1.VirtualMachineInstanceMigration, error) {
	migs := &kubevirtv1.VirtualMachineInstanceMigrationList{}
	if err := reader.List(ctx, migs, client.InNamespace(vmi.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the migrations of VMI %s: %w", vmi.Name, err)
	}
	return move.InFlight(migs.Items, vmi.Name), nil
}

// migrationName is the deterministic name of the migration of the crawler's move: one per
// move, whichever replica creates it.
func migrationName(cvm *isov1.CrawlerVM) string {
	m := cvm.Status.Move
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%s/%s/%d", cvm.UID, m.From, m.To, m.Reason, m.StartTime.Unix())))
	return cvm.Name + "-move-" + hex.EncodeToString(sum[:4])
}

// restartElsewhere deletes the VMI; KubeVirt starts the next one from the VM's template,
// which names the new node.
func (r *CrawlerVMReconciler) restartElsewhere(ctx context.Context, cvm *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance) error {
	m := cvm.Status.Move
	m.Mode = isov1.MoveCold
	if vmi != nil && vmi.DeletionTimestamp.IsZero() {
		if err := r.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("restarting VMI %s on node %s: %w", vmi.Name, m.To, err)
		}
	}
	r.setMoving(cvm, "the VMI restarts there")
	return nil
}

// endMove ends the move with result: the crawler holds only the node it runs on (the new
// one when the move succeeded, the one it left when it failed), the ledger follows at
// once, and status.lastMove, the Moving condition, an Event and the count say how it went.
func (r *CrawlerVMReconciler) endMove(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, result isov1.MoveResult, next move.Next) error {
	m := cvm.Status.Move
	now := r.clock.Now().UTC().Truncate(time.Second)
	rec := &isov1.MoveRecord{Reason: m.Reason, Mode: m.Mode, From: m.From, To: m.To, Migration: m.Migration, Result: result,
		StartTime: m.StartTime, EndTime: metav1.NewTime(now)}
	took := now.Sub(m.StartTime.Time)
	stays := m.To
	if result == isov1.MoveSucceeded {
		how := "restarted there"
		if m.Mode == isov1.MoveLive {
			// KubeVirt's migration state has whole seconds.
			rec.MigrationTime = &metav1.Duration{Duration: next.MigrationTime.Round(time.Second)}
			how = fmt.Sprintf("live-migrated; KubeVirt's migration took %s, in whole seconds", format.Duration(rec.MigrationTime.Duration))
		}
		rec.Message = fmt.Sprintf("moved from node %s to node %s in %s (%s)", m.From, m.To, format.Duration(took), how)
		setCondition(cvm, isov1.ConditionMoving, false, isov1.ReasonMoved, rec.Message)
		st.event(cvm, corev1.EventTypeNormal, isov1.ReasonMoved, "M"+rec.Message[1:])
	} else {
		stays = m.From
		rec.Failures = 1
		if prev := cvm.Status.LastMove; prev != nil && prev.Result == isov1.MoveFailed {
			rec.Failures = prev.Failures + 1
		}
		retry := now.Add(move.Backoff(rec.Failures))
		rec.RetryAfter = &metav1.Time{Time: retry}
		rec.Message = format.Truncate(fmt.Sprintf("%s; the crawler runs on node %s; the move (%s) is tried again from %s (failure %d in a row)",
			next.Why, m.From, m.Reason, retry.Format(time.RFC3339), rec.Failures), maxRemediationMessage)
		setCondition(cvm, isov1.ConditionMoving, false, isov1.ReasonMoveFailed, rec.Message)
		st.event(cvm, corev1.EventTypeWarning, isov1.ReasonMoveFailed, fmt.Sprintf("Move from node %s to node %s failed: %s", m.From, m.To, rec.Message))
	}
	cvm.Status.LastMove = rec
	cvm.Status.Move = nil
	cvm.Status.Placement.Node = stays
	st.after(func() { r.metrics.moves.WithLabelValues(string(rec.Reason), string(rec.Mode), string(result)).Inc() })
	return r.placer.Settle(ctx, cvm, func(inv *clusterInventory) { r.refreshPrediction(cvm, st, inv) }, func() error { return st.persist(ctx, cvm) })
}

// restartRequired says whether KubeVirt reports that the VM needs a restart to apply its
// template (RestartRequired).
func restartRequired(vm *kubevirtv1.VirtualMachine) bool {
	if vm == nil {
		return false
	}
	for _, c := range vm.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineRestartRequired && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// recoverFromLostNode starts the crawler on another node once its node is lost and fenced
// (node, move.Node): a cold move (its first copy is gone), placed by the model like any
// move; the VM's template is pinned to the new node before KubeVirt starts the next VMI,
// so that it does not start pinned to the dead node. Where no node fits, the crawler
// stays down and says what is missing. It returns when to look again.
func (r *CrawlerVMReconciler) recoverFromLostNode(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, node move.NodeState) (time.Duration, error) {
	if cvm.Status.Move != nil || cvm.Status.Placement == nil {
		return 0, nil
	}
	from := cvm.Status.Placement.Node
	d, err := r.startMove(ctx, cvm, st, isov1.MoveNodeLost, []placement.Avoid{{Node: from, Why: "node is lost"}}, node.Why, func(placement.Decision) {
		cvm.Status.Move.Mode = isov1.MoveCold
	})
	if err != nil || d.Placed() {
		return 0, err
	}
	if d.Reason == "" {
		return 0, nil
	}
	msg := fmt.Sprintf("%s, and no other node can hold the crawler within every crawler's budget: %s; it stays down until one can", node.Why, d.Reason)
	if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionMoving); c == nil || c.Reason != isov1.ReasonMoveBlocked {
		st.event(cvm, corev1.EventTypeWarning, isov1.ReasonMoveBlocked, msg)
		st.after(func() { r.metrics.moves.WithLabelValues(string(isov1.MoveNodeLost), "", moveNoNode).Inc() })
	}
	setCondition(cvm, isov1.ConditionMoving, false, isov1.ReasonMoveBlocked, msg)
	return blockedRetry, nil
}

// takeOverMigrations answers the migrations of the crawler's VMI that someone else asked
// for (virtctl migrate, KubeVirt's workload updater after its upgrade, an eviction under
// a LiveMigrate default): KubeVirt would build their target pod from the VMI's affinity,
// which names its own node, so none can be scheduled; every move of a crawler goes to a
// node the model chose. A request not yet handed off to a target is deleted (KubeVirt
// aborts it), and the crawler moves by isochron's route instead, or stays and says why
// (a move is under way, or no node fits).
func (r *CrawlerVMReconciler) takeOverMigrations(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, vmi *kubevirtv1.VirtualMachineInstance) error {
	if vmi == nil {
		return nil
	}
	migs := &kubevirtv1.VirtualMachineInstanceMigrationList{}
	if err := r.List(ctx, migs, client.InNamespace(cvm.Namespace)); err != nil {
		return fmt.Errorf("listing migrations: %w", err)
	}
	for i := range migs.Items {
		mig := &migs.Items[i]
		if mig.Spec.VMIName != vmi.Name || mig.Labels[isov1.LabelCrawlerVM] == cvm.Name || !mig.DeletionTimestamp.IsZero() ||
			mig.Status.Phase == kubevirtv1.MigrationSucceeded || mig.Status.Phase == kubevirtv1.MigrationFailed {
			continue
		}
		if s := vmi.Status.MigrationState; s != nil && s.MigrationUID == mig.UID {
			continue // handed off to a target already: KubeVirt carries it out
		}
		asked := fmt.Sprintf("migration %s of VMI %s was asked for outside isochron (KubeVirt would pin its target to the node the VMI runs on)", mig.Name, vmi.Name)
		if sel := mig.Spec.AddedNodeSelector; len(sel) > 0 {
			asked = fmt.Sprintf("migration %s of VMI %s to a node with %s was asked for outside isochron", mig.Name, vmi.Name, labels.Set(sel))
		}
		if cvm.Status.Move != nil {
			if err := deleteMigration(ctx, r.Client, mig); err != nil {
				return err
			}
			st.event(cvm, corev1.EventTypeWarning, isov1.EventReasonMigrationRefused, fmt.Sprintf("Deleted %s: isochron's move to node %s is under way", asked, cvm.Status.Move.To))
			continue
		}
		// The move is written (with an optimistic lock) before the request is deleted: a
		// write that loses a conflict leaves the request for the next look, which decides
		// again; deleted first, the request would be lost with the write.
		from := cvm.Status.Placement.Node
		d, err := r.startMoveWithin(ctx, cvm, st, isov1.MoveRequested, []placement.Avoid{{Node: from, Why: "the node it runs on"}}, asked, nil, mig.Spec.AddedNodeSelector)
		if err != nil {
			return err
		}
		if !d.Placed() && d.Reason == "" {
			// No decision taken: this replica's last one for the crawler has not reached
			// the cache yet. The request waits for the look that update brings.
			return nil
		}
		if err := deleteMigration(ctx, r.Client, mig); err != nil {
			return err
		}
		if d.Placed() {
			st.event(cvm, corev1.EventTypeNormal, isov1.EventReasonMigrationTakenOver, fmt.Sprintf("Took %s over: the crawler moves to node %s, which the model chose", asked, d.Node))
		} else if d.Reason != "" {
			where := "no other node"
			if len(mig.Spec.AddedNodeSelector) > 0 {
				where = "no other node it asks for"
			}
			st.event(cvm, corev1.EventTypeWarning, isov1.EventReasonMigrationRefused, fmt.Sprintf("Deleted %s: %s can hold the crawler within every crawler's budget: %s", asked, where, d.Reason))
		}
		return nil
	}
	return nil
}

// deleteMigration deletes mig (KubeVirt aborts a migration not yet handed off), unless
// it is gone or another object took its name.
func deleteMigration(ctx context.Context, c client.Client, mig *kubevirtv1.VirtualMachineInstanceMigration) error {
	if err := c.Delete(ctx, mig, client.Preconditions{UID: &mig.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting migration %s: %w", mig.Name, err)
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
func (r *CrawlerVMReconciler) guardAdopted(ctx context.Context, cvm *isov1.CrawlerVM, vmi *kubevirtv1.VirtualMachineInstance) error {
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

// cordonedAdopted is the node of an adopted VMI (no evictionStrategy External) when that
// node is cordoned, "" otherwise.
func (r *CrawlerVMReconciler) cordonedAdopted(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (string, error) {
	if external(vmi) || vmi.Status.NodeName == "" {
		return "", nil
	}
	node, err := getOrNil(ctx, r.Client, client.ObjectKey{Name: vmi.Status.NodeName}, &corev1.Node{})
	if err != nil || node == nil || !node.Spec.Unschedulable {
		return "", err
	}
	return node.Name, nil
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// recoverFromRejection starts the crawler on another node when the kubelet of its node
// refused its launcher for a reason of the node (inventory.LauncherRejected): the VMI
// failed before it ran, and KubeVirt's crash-loop backoff would start it there again and
// again. A cold move, placed by the model like any move, away from that node; where none
// fits, the crawler stays and KubeVirt keeps trying. It returns when to look again.
func (r *CrawlerVMReconciler) recoverFromRejection(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, w *world) (time.Duration, error) {
	if cvm.Status.Move != nil || cvm.Status.Placement == nil {
		return 0, nil
	}
	var uids []string
	if w.VMI != nil {
		uids = append(uids, string(w.VMI.UID))
	}
	if w.VM != nil && w.VM.Status.StartFailure != nil {
		uids = append(uids, string(w.VM.Status.StartFailure.LastFailedVMIUID))
	}
	if len(uids) == 0 {
		return 0, nil
	}
	pods := &corev1.PodList{Items: w.Launchers}
	pod, node, reason, message, rejected := inventory.LauncherRejected(pods.Items, uids...)
	if !rejected || node != cvm.Status.Placement.Node {
		return 0, nil
	}
	why := fmt.Sprintf("the kubelet of node %s refused launcher pod %s: %s (%s)", node, pod, reason, message)
	d, err := r.startMove(ctx, cvm, st, isov1.MoveNodeRejected, []placement.Avoid{{Node: node, Why: "its kubelet refused the crawler's launcher: " + reason}}, why, func(placement.Decision) {
		cvm.Status.Move.Mode = isov1.MoveCold
	})
	if err != nil || d.Placed() || d.Reason == "" {
		return 0, err
	}
	msg := fmt.Sprintf("%s, and no other node can hold the crawler within every crawler's budget: %s; KubeVirt keeps starting it there", why, d.Reason)
	if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionMoving); c == nil || c.Message != msg {
		st.event(cvm, corev1.EventTypeWarning, isov1.ReasonMoveBlocked, msg)
	}
	setCondition(cvm, isov1.ConditionMoving, false, isov1.ReasonMoveBlocked, msg)
	return blockedRetry, nil
}

// recoverFromUnschedulable starts the crawler on another node when kube-scheduler has
// not put its launcher on its node, for a reason of the node (inventory.UnschedulableNode:
// cordoned, tainted, its CPUs taken), for unschedulableGrace: a cold move, placed by the
// model, away from that node, counted as the outage it is. Once: a crawler that moved so
// within the minimum move interval stays, and its Ready condition says why. It returns
// when to look again.
func (r *CrawlerVMReconciler) recoverFromUnschedulable(ctx context.Context, cvm *isov1.CrawlerVM, st *statusWriter, w *world) (time.Duration, error) {
	if cvm.Status.Move != nil || cvm.Status.Placement == nil || w.VMI == nil || !w.VMI.DeletionTimestamp.IsZero() {
		return 0, nil
	}
	placed := cvm.Status.Placement.Node
	node, err := getOrNil(ctx, r.Client, client.ObjectKey{Name: placed}, &corev1.Node{})
	if err != nil {
		return 0, err
	}
	var mine []corev1.Pod
	for _, p := range w.Launchers {
		if p.Labels[kubevirtv1.CreatedByLabel] == string(w.VMI.UID) {
			mine = append(mine, p)
		}
	}
	pod, why, since, ok := inventory.UnschedulableNode(mine, node)
	if !ok {
		return 0, nil
	}
	wait, moveNow := move.AfterUnschedulable(since, r.clock.Now(), r.unschedulableGrace, cvm.Status.LastMove, r.minMoveInterval)
	if !moveNow {
		return wait, nil // within the grace, or moved so once: Ready (LauncherUnschedulable) says what holds it
	}
	why = fmt.Sprintf("launcher pod %s cannot be scheduled on node %s since %s: %s", pod, placed, since.UTC().Format(time.RFC3339), why)
	d, err := r.startMove(ctx, cvm, st, isov1.MoveNodeUnschedulable, []placement.Avoid{{Node: placed, Why: "the crawler's launcher cannot be scheduled there"}}, why, func(placement.Decision) {
		cvm.Status.Move.Mode = isov1.MoveCold
	})
	if err != nil || d.Placed() || d.Reason == "" {
		return 0, err
	}
	msg := fmt.Sprintf("%s, and no other node can hold the crawler within every crawler's budget: %s", why, d.Reason)
	if c := apimeta.FindStatusCondition(cvm.Status.Conditions, isov1.ConditionMoving); c == nil || c.Message != msg {
		st.event(cvm, corev1.EventTypeWarning, isov1.ReasonMoveBlocked, msg)
	}
	setCondition(cvm, isov1.ConditionMoving, false, isov1.ReasonMoveBlocked, msg)
	return blockedRetry, nil
}
