package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/move"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/render"
)

// The migrations of a crawler: the next step of isochron's own move (carryOutMove), and
// those asked for outside isochron, which it takes over.

// carryOutMove takes the crawler's move (status.move) its next step (move.NextStep):
// create the live migration once KubeVirt has pinned the running VMI to the new node,
// restart the VMI there when it cannot migrate, and end the move when the crawler runs on
// the new node (the node it left is released) or when the migration failed (the new node
// is released, the crawler stays, and the move is tried again after a backoff).
func (r *CrawlerVMReconciler) carryOutMove(ctx context.Context, s *scope, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) error {
	cvm := s.cvm
	m := cvm.Status.Move
	if m == nil {
		return nil
	}
	st, err := r.moveState(ctx, cvm, vm, vmi)
	if err != nil {
		return err
	}
	next := move.NextStep(st)
	if next.Cold && m.Mode == isov1.MoveLive {
		m.Mode, m.Message = isov1.MoveCold, format.Truncate(next.Why, move.MaxMessage)
	}
	switch next.Step {
	case move.Wait:
		r.setMoving(cvm, next.Why)
	case move.Migrate:
		return r.startMigration(ctx, s, vmi)
	case move.Restart:
		return r.restartElsewhere(ctx, cvm, vmi)
	case move.Done:
		return r.endMove(ctx, s, isov1.MoveSucceeded, next)
	case move.Fail:
		return r.endMove(ctx, s, isov1.MoveFailed, next)
	}
	return nil
}

// moveState is what move.NextStep decides the move's next step on: the move, the VMI,
// the move's migration (from the API server: the cache may not show one just created)
// and any other migration of the VMI not yet ended.
func (r *CrawlerVMReconciler) moveState(ctx context.Context, cvm *isov1.CrawlerVM, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) (move.State, error) {
	m := cvm.Status.Move
	st := move.State{Move: m, VMI: vmi, RestartRequired: restartRequired(vm)}
	name := m.Migration
	if name == "" && m.Mode == isov1.MoveLive && vmi != nil {
		// The move's migration has a name of its own: a status write that lost a conflict
		// after creating it did not record it, and KubeVirt refuses a second one.
		name = migrationName(cvm)
	}
	if name != "" {
		mig, err := getOrNil(ctx, r.APIReader, client.ObjectKey{Namespace: cvm.Namespace, Name: name}, &kubevirtv1.VirtualMachineInstanceMigration{})
		if err != nil {
			return st, fmt.Errorf("reading migration %s: %w", name, err)
		}
		if st.Migration = mig; mig != nil {
			m.Migration = name
		}
	}
	if m.Migration == "" && vmi != nil {
		other, err := r.inFlight(ctx, r.Client, vmi)
		if err != nil {
			return st, err
		}
		st.InFlight = other
	}
	return st, nil
}

// startMigration creates the move's migration. KubeVirt refuses one while another
// migration of the VMI has not ended (one the cache did not show yet): the move waits for
// it. Refused otherwise by the API server (KubeVirt's admission, a policy, a quota), the
// guest is not restarted for it: the move fails, the crawler runs on where it is, and the
// move is tried again after its backoff. A VMI KubeVirt reports not live-migratable moves
// cold (move.NextStep), before any migration.
func (r *CrawlerVMReconciler) startMigration(ctx context.Context, s *scope, vmi *kubevirtv1.VirtualMachineInstance) error {
	cvm := s.cvm
	m := cvm.Status.Move
	name, err := r.migrate(ctx, cvm, vmi)
	if err == nil {
		m.Migration = name
		r.setMoving(cvm, fmt.Sprintf("migration %s moves VMI %s to node %s", name, vmi.Name, m.To))
		return nil
	}
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) && !apierrors.IsBadRequest(err) {
		return err
	}
	other, ierr := r.inFlight(ctx, r.APIReader, vmi)
	if ierr != nil {
		return ierr
	}
	if other != nil {
		r.setMoving(cvm, move.WaitingFor(other, vmi.Name))
		return nil
	}
	return r.endMove(ctx, s, isov1.MoveFailed, move.Next{Step: move.Fail,
		Why: fmt.Sprintf("the API server refused migration %s of VMI %s: %v; the VMI runs on, on node %s", migrationName(cvm), vmi.Name, err, m.From)})
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

// takeOverMigrations answers the migrations of the crawler's VMI that someone else asked
// for (virtctl migrate, KubeVirt's workload updater after its upgrade, an eviction under
// a LiveMigrate default): KubeVirt would build their target pod from the VMI's affinity,
// which names its own node, so none can be scheduled; every move of a crawler goes to a
// node the model chose. A request not yet handed off to a target is deleted (KubeVirt
// aborts it), and the crawler moves by isochron's route instead, or stays and says why
// (a move is under way, the budget of requested moves is spent (move.Budget), or no node
// fits).
func (r *CrawlerVMReconciler) takeOverMigrations(ctx context.Context, s *scope) (ctrl.Result, error) {
	cvm, vmi := s.cvm, s.running
	if vmi == nil {
		return ctrl.Result{}, nil
	}
	migs := &kubevirtv1.VirtualMachineInstanceMigrationList{}
	if err := r.List(ctx, migs, client.InNamespace(cvm.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing migrations: %w", err)
	}
	for i := range migs.Items {
		mig := &migs.Items[i]
		if !askedOutside(mig, vmi, cvm.Name) {
			continue
		}
		asked := fmt.Sprintf("migration %s of VMI %s was asked for outside isochron (KubeVirt would pin its target to the node the VMI runs on)", mig.Name, vmi.Name)
		if sel := mig.Spec.AddedNodeSelector; len(sel) > 0 {
			asked = fmt.Sprintf("migration %s of VMI %s to a node with %s was asked for outside isochron", mig.Name, vmi.Name, labels.Set(sel))
		}
		refused := ""
		if cvm.Status.Move != nil {
			refused = fmt.Sprintf("isochron's move to node %s is under way", cvm.Status.Move.To)
		} else if wait, spent, err := r.requestedMoveWait(ctx, s); err != nil {
			return ctrl.Result{}, err
		} else if wait > 0 {
			refused = fmt.Sprintf("%s; ask again after %s", spent, r.clock.Now().Add(wait).UTC().Format(time.RFC3339))
		}
		if refused != "" {
			if err := deleteMigration(ctx, r.Client, mig); err != nil {
				return ctrl.Result{}, err
			}
			s.event(cvm, corev1.EventTypeWarning, isov1.EventReasonMigrationRefused, fmt.Sprintf("Deleted %s: %s", asked, refused))
			continue
		}
		return ctrl.Result{}, r.takeOver(ctx, s, mig, asked)
	}
	return ctrl.Result{}, nil
}

// requestedMoveWait is how long a move of the crawler asked for outside isochron waits for
// the budget of requested moves (move.Budget, over the crawlers of its namespace), and
// why; 0 when it may start.
func (r *CrawlerVMReconciler) requestedMoveWait(ctx context.Context, s *scope) (time.Duration, string, error) {
	crawlers := &isov1.CrawlerVMList{}
	if err := r.List(ctx, crawlers, client.InNamespace(s.cvm.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return 0, "", fmt.Errorf("listing the crawlers of namespace %s: %w", s.cvm.Namespace, err)
	}
	wait, why := r.budget.Wait(r.clock.Now(), s.cvm, crawlers.Items)
	return wait, why, nil
}

// askedOutside says whether mig is a migration of vmi, the crawler's, that someone other
// than isochron asked for, not yet ended nor handed off to a target.
func askedOutside(mig *kubevirtv1.VirtualMachineInstanceMigration, vmi *kubevirtv1.VirtualMachineInstance, crawler string) bool {
	if mig.Spec.VMIName != vmi.Name || mig.Labels[isov1.LabelCrawlerVM] == crawler || !mig.DeletionTimestamp.IsZero() ||
		mig.Status.Phase == kubevirtv1.MigrationSucceeded || mig.Status.Phase == kubevirtv1.MigrationFailed {
		return false
	}
	s := vmi.Status.MigrationState
	return s == nil || s.MigrationUID != mig.UID // handed off to a target: KubeVirt carries it out
}

// takeOver moves the crawler where mig asked, by isochron's route (the node it asks for,
// if it fits), then deletes mig. The move is written (with an optimistic lock) before the
// request is deleted: a write that loses a conflict leaves the request for the next look,
// which decides again; deleted first, the request would be lost with the write.
func (r *CrawlerVMReconciler) takeOver(ctx context.Context, s *scope, mig *kubevirtv1.VirtualMachineInstanceMigration, asked string) error {
	cvm := s.cvm
	t := moveTrigger{reason: isov1.MoveRequested, to: mig.Spec.AddedNodeSelector, why: asked,
		avoid: []placement.Avoid{{Node: cvm.Status.Placement.Node, Why: "the node it runs on"}}}
	d, taken, err := r.startMove(ctx, s, t, nil)
	if err != nil || !taken {
		// Not taken: this replica's last decision for the crawler has not reached the cache
		// yet. The request waits for the look that update brings.
		return err
	}
	if err := deleteMigration(ctx, r.Client, mig); err != nil {
		return err
	}
	if d.Placed() {
		s.event(cvm, corev1.EventTypeNormal, isov1.EventReasonMigrationTakenOver, fmt.Sprintf("Took %s over: the crawler moves to node %s, which the model chose", asked, d.Node))
		return nil
	}
	where := "no other node"
	if len(mig.Spec.AddedNodeSelector) > 0 {
		where = "no other node it asks for"
	}
	s.event(cvm, corev1.EventTypeWarning, isov1.EventReasonMigrationRefused, fmt.Sprintf("Deleted %s: %s can hold the crawler within every crawler's budget: %s", asked, where, d.Reason))
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
