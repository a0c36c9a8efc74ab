// Package move decides how a crawler's move to another node proceeds, from what KubeVirt
// reports of its VMI and of the move's VirtualMachineInstanceMigration, and when a
// failed move is tried again. It is pure: no client, no clock.
//
// A move is a live migration wherever KubeVirt can do one (docs/availability.md): the
// VM's template is pinned to the new node first, KubeVirt applies that affinity to the
// running VMI (LiveUpdate), and only then is the migration created, because KubeVirt
// builds the migration's target pod from the VMI as it is then (migration.go
// createTargetPod copies the VMI's required affinity). A VMI that does not run, or that
// KubeVirt reports not live-migratable, restarts on the new node instead (cold).
package move

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/placement"
	"isochron.io/isochron/internal/render"
)

// Step is what to do next for a move.
type Step int

const (
	// Wait: KubeVirt is working (applying the affinity, migrating, starting the VMI).
	Wait Step = iota
	// Migrate: create the move's VirtualMachineInstanceMigration.
	Migrate
	// Restart: delete the VMI; KubeVirt starts it on the new node (a cold move).
	Restart
	// Done: the crawler runs on the new node; the node it left is released.
	Done
	// Fail: the migration failed or was aborted; the crawler stays where it runs, the new
	// node is released, and the move is tried again after Backoff.
	Fail
)

// State is what KubeVirt reports of a moving crawler.
type State struct {
	// Move is the move in progress (status.move).
	Move *isov1.Move
	// VMI is the crawler's VMI, nil for none.
	VMI *kubevirtv1.VirtualMachineInstance
	// Migration is the move's migration (status.move.migration), nil when there is none.
	Migration *kubevirtv1.VirtualMachineInstanceMigration
	// InFlight is another migration of the VMI that has not ended (InFlight), nil for
	// none: KubeVirt refuses a new one until it ends.
	InFlight *kubevirtv1.VirtualMachineInstanceMigration
	// RestartRequired is set when KubeVirt reports that the crawler's VM needs a restart:
	// it then applies no live update to the VMI, the new affinity included (vm.go sync).
	RestartRequired bool
}

// Next is the next step of a move.
type Next struct {
	Step Step
	// Cold is set when the move goes on as a restart on the new node (Why says why).
	Cold bool
	// Why explains a cold move or a failure, or what the move waits for.
	Why string
	// MigrationTime is, when a live move is done, how long KubeVirt's migration ran.
	MigrationTime time.Duration
}

// NextStep decides the next step of the move in st.
func NextStep(st State) Next {
	m, vmi := st.Move, st.VMI
	if vmi == nil || !vmi.DeletionTimestamp.IsZero() {
		why := fmt.Sprintf("waiting for KubeVirt to start the VMI on node %s", m.To)
		return Next{Step: Wait, Cold: m.Mode == isov1.MoveLive, Why: why}
	}
	running := vmi.Status.Phase == kubevirtv1.Running
	if running && vmi.Status.NodeName == m.To && !Migrating(vmi) {
		n := Next{Step: Done}
		if s := vmi.Status.MigrationState; m.Mode == isov1.MoveLive && s != nil && s.StartTimestamp != nil && s.EndTimestamp != nil {
			n.MigrationTime = s.EndTimestamp.Sub(s.StartTimestamp.Time)
		}
		return n
	}
	if !running {
		if render.PinnedNode(&vmi.Spec) == m.To {
			return Next{Step: Wait, Cold: m.Mode == isov1.MoveLive, Why: fmt.Sprintf("VMI %s is %s, pinned to node %s", vmi.Name, phase(vmi), m.To)}
		}
		return Next{Step: Restart, Cold: true, Why: fmt.Sprintf("VMI %s does not run (%s): it restarts on node %s", vmi.Name, phase(vmi), m.To)}
	}
	if m.Mode == isov1.MoveCold {
		return Next{Step: Restart, Cold: true, Why: m.Message}
	}
	if m.Migration != "" {
		mig := st.Migration
		switch {
		case mig == nil:
			return Next{Step: Fail, Why: fmt.Sprintf("migration %s was deleted before it completed", m.Migration)}
		case mig.Status.Phase == kubevirtv1.MigrationFailed:
			return Next{Step: Fail, Why: fmt.Sprintf("migration %s failed: %s", mig.Name, failureOf(mig, vmi))}
		case mig.Status.Phase == kubevirtv1.MigrationSucceeded:
			return Next{Step: Wait, Why: fmt.Sprintf("migration %s succeeded; waiting for the VMI to report node %s", mig.Name, m.To)}
		}
		return Next{Step: Wait, Why: fmt.Sprintf("migration %s is %s", mig.Name, migrationPhase(mig))}
	}
	if c := condition(vmi, kubevirtv1.VirtualMachineInstanceIsMigratable); c != nil && c.Status == corev1.ConditionFalse {
		return Next{Step: Restart, Cold: true, Why: fmt.Sprintf("KubeVirt reports VMI %s not live-migratable (%s: %s): it restarts on node %s", vmi.Name, c.Reason, c.Message, m.To)}
	}
	if d := render.UnmigratableDisk(&vmi.Spec); d != "" {
		return Next{Step: Restart, Cold: true, Why: fmt.Sprintf("VMI %s has read-only disk %s, which libvirt refuses to copy to a migration target (as an earlier release of isochron rendered it): it restarts on node %s", vmi.Name, d, m.To)}
	}
	if render.PinnedNode(&vmi.Spec) != m.To {
		if st.RestartRequired {
			return Next{Step: Restart, Cold: true, Why: fmt.Sprintf("KubeVirt applies no new affinity to VMI %s while its VM requires a restart (a change it cannot apply live): it restarts on node %s", vmi.Name, m.To)}
		}
		return Next{Step: Wait, Why: fmt.Sprintf("waiting for KubeVirt to pin VMI %s to node %s (LiveUpdate)", vmi.Name, m.To)}
	}
	if Migrating(vmi) {
		return Next{Step: Wait, Why: fmt.Sprintf("another migration of VMI %s runs", vmi.Name)}
	}
	if o := st.InFlight; o != nil {
		return Next{Step: Wait, Why: WaitingFor(o, vmi.Name)}
	}
	return Next{Step: Migrate}
}

// InFlight is a migration of the VMI named vmi that has not ended: KubeVirt refuses to
// create another while one is (migration-create-admitter.go ensureNoMigrationConflict:
// every migration of the VMI not Succeeded or Failed, one being deleted included). nil
// for none.
func InFlight(migs []kubevirtv1.VirtualMachineInstanceMigration, vmi string) *kubevirtv1.VirtualMachineInstanceMigration {
	for i := range migs {
		m := &migs[i]
		if m.Spec.VMIName != vmi || m.Status.Phase == kubevirtv1.MigrationSucceeded || m.Status.Phase == kubevirtv1.MigrationFailed {
			continue
		}
		return m
	}
	return nil
}

// WaitingFor is what a move waits for while migration o of the VMI named vmi has not
// ended (InFlight).
func WaitingFor(o *kubevirtv1.VirtualMachineInstanceMigration, vmi string) string {
	return fmt.Sprintf("migration %s of VMI %s has not ended (%s), and KubeVirt refuses another until it has", o.Name, vmi, migrationPhase(o))
}

// Migrating says whether a migration of the VMI is transferring it (KubeVirt's
// migrations.IsMigrating: started and not ended).
func Migrating(vmi *kubevirtv1.VirtualMachineInstance) bool {
	s := vmi.Status.MigrationState
	return s != nil && s.StartTimestamp != nil && s.EndTimestamp == nil
}

func phase(vmi *kubevirtv1.VirtualMachineInstance) string {
	if vmi.Status.Phase == "" {
		return "not scheduled yet"
	}
	return string(vmi.Status.Phase)
}

func migrationPhase(mig *kubevirtv1.VirtualMachineInstanceMigration) string {
	if mig.Status.Phase == "" {
		return "pending"
	}
	return string(mig.Status.Phase)
}

// failureOf is why KubeVirt says a migration failed: the migration's own state, or the
// VMI's while it still describes that migration (virt-handler writes libvirt's error
// there first; on the local cluster the migration object showed none: "Cannot migrate
// empty or read-only disk vdb" was only in the VMI's).
func failureOf(mig *kubevirtv1.VirtualMachineInstanceMigration, vmi *kubevirtv1.VirtualMachineInstance) string {
	states := []*kubevirtv1.VirtualMachineInstanceMigrationState{mig.Status.MigrationState}
	if s := vmi.Status.MigrationState; s != nil && s.MigrationUID == mig.UID {
		states = append(states, s)
	}
	for _, s := range states {
		if s == nil {
			continue
		}
		if s.AbortStatus == kubevirtv1.MigrationAbortSucceeded {
			return "aborted"
		}
		if s.FailureReason != "" {
			return s.FailureReason
		}
	}
	for _, c := range mig.Status.Conditions {
		if c.Status == corev1.ConditionTrue && c.Message != "" {
			return c.Message
		}
	}
	return "KubeVirt gives no reason; kubectl describe vmim " + mig.Name
}

func condition(vmi *kubevirtv1.VirtualMachineInstance, typ kubevirtv1.VirtualMachineInstanceConditionType) *kubevirtv1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == typ {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

// A failed move is tried again after Backoff(n), n the failures in a row: a minute,
// doubled each time, at most half an hour. A migration that failed (the target could
// not keep up, the target pod could not start) often fails again at once; the doubling
// keeps a move that cannot succeed from loading the network and the nodes, and the cap
// keeps a drain that waits on it from waiting much longer than the condition took to
// clear.
const (
	BackoffBase = time.Minute
	BackoffMax  = 30 * time.Minute
)

// Backoff is the wait after the n-th failed move in a row (n >= 1).
func Backoff(n int32) time.Duration {
	d := BackoffBase
	for i := int32(1); i < n && d < BackoffMax; i++ {
		d *= 2
	}
	return min(d, BackoffMax)
}

// RetryWait is how long until a move may be tried again after last, 0 when it may now.
func RetryWait(last *isov1.MoveRecord, now time.Time) time.Duration {
	if last == nil || last.Result != isov1.MoveFailed || last.RetryAfter == nil {
		return 0
	}
	return max(last.RetryAfter.Sub(now), 0)
}

// A node where a probe refuted a crawler's SLO is not offered to the crawler's moves for
// DefaultRefutedMemory (the manager's --refuted-node-memory). The probes' correction of a
// node's prediction is bounded (calibration.Max), so the corrected model can
// still accept a node where probes measured the crawler at several times its tolerance:
// the crawler's own refutation keeps it away. A day covers a building's daily load cycle,
// which the crawler and its neighbours follow, so a refutation speaks for at least that;
// then the node is offered again and a probe there judges it anew. At most
// MaxRefutations nodes are remembered, newest first: a crawler refuted on that many
// nodes in a day has a problem no placement solves.
const (
	DefaultRefutedMemory = 24 * time.Hour
	MaxRefutations       = 8
)

// Remember records r, newest first: an older refutation of the same node is replaced, and
// refutations older than memory and beyond MaxRefutations are forgotten.
func Remember(list []isov1.Refutation, r isov1.Refutation, now time.Time, memory time.Duration) []isov1.Refutation {
	out := []isov1.Refutation{r}
	for _, x := range list {
		if x.Node != r.Node && now.Sub(x.Time.Time) < memory && len(out) < MaxRefutations {
			out = append(out, x)
		}
	}
	return out
}

// Avoid are the nodes of list refuted within memory before now, as placement avoids them.
func Avoid(list []isov1.Refutation, now time.Time, memory time.Duration) []placement.Avoid {
	var out []placement.Avoid
	for _, x := range list {
		if now.Sub(x.Time.Time) >= memory {
			continue
		}
		why := fmt.Sprintf("probe Job %s refuted the crawler's SLO there at %s", x.Job, x.Time.UTC().Format(time.RFC3339))
		if x.IntervalError != nil {
			why = fmt.Sprintf("probe Job %s measured %s there at %s, refuting the crawler's SLO", x.Job, format.Duration(x.IntervalError.Duration), x.Time.UTC().Format(time.RFC3339))
		}
		out = append(out, placement.Avoid{Node: x.Node, Why: why})
	}
	return out
}

// DefaultNodeLostGrace is how long a crawler's node may be not ready before isochron
// presumes the crawler down (the manager's --node-lost-grace). Kubernetes' node lifecycle
// controller marks a node whose kubelet went silent Ready=Unknown after its
// node-monitor-grace-period (40 s by default in Kubernetes 1.34), so a crawler is reported
// about 70 s after its node died; the grace keeps a kubelet's restart, which turns the
// node NotReady for a few seconds, from being reported as a loss.
const DefaultNodeLostGrace = 30 * time.Second

// DefaultUnschedulableGrace is how long a crawler's launcher may be unschedulable on its
// node for a reason of the node (inventory.UnschedulableNode) before the crawler starts
// on another node: long enough for an uncordon after a short maintenance, short against
// an outage the crawler's error budget counts.
const DefaultUnschedulableGrace = time.Minute

// AfterUnschedulable decides for a crawler whose launcher has been unschedulable on its
// node, for a reason of the node, since since: wait is how long it still waits (the
// grace not over), or move says it moves now. Once: a crawler whose last move was for the
// same reason and ended within minInterval stays (neither wait nor move).
func AfterUnschedulable(since, now time.Time, grace time.Duration, last *isov1.MoveRecord, minInterval time.Duration) (wait time.Duration, move bool) {
	if w := since.Add(grace).Sub(now); w > 0 {
		return w, false
	}
	if last != nil && last.Reason == isov1.MoveNodeUnschedulable && now.Sub(last.EndTime.Time) < minInterval {
		return 0, false
	}
	return 0, true
}

// NodeState is what becomes of a crawler whose node is not ready.
type NodeState struct {
	// Lost is set once the node has not been ready for the grace: the crawler is presumed
	// down, whatever KubeVirt still reports of its VMI (it reports a VMI Running while its
	// launcher pod object exists).
	Lost bool
	// Fenced is set once the crawler's first copy cannot run any more: the node carries
	// the node.kubernetes.io/out-of-service taint (an administrator's or a fence agent's
	// word that the machine is off), its VMI no longer runs there (its launcher pod was
	// deleted from a node that still exists), or the Node is gone and someone attests the
	// machine is off (isov1.AnnotationFencedNode). A deleted Node alone is no proof: the
	// machine may run on, its VMs with it (the garbage collector then deletes their pods
	// too, so a missing launcher pod says nothing either). Only when fenced does the crawler
	// start elsewhere: never two copies at once (the RT-NIC's MAC and address, two crawls
	// of the same buildings).
	Fenced bool
	// Wait is, for a node not ready for less than the grace, when it would be lost.
	Wait time.Duration
	// Since is when the crawler there was last known up: the kubelet's last renewal of
	// its Lease before the node stopped being ready, else when it stopped being ready
	// (zero when it was deleted or fenced while ready).
	Since time.Time
	// Why says what happened to the node, for the crawler's Ready condition.
	Why string
}

// Node judges node, the Node named name that the crawler is placed on (nil when it is
// gone), for the crawler whose VMI is vmi (nil for none), at now; attested says the
// crawler carries isov1.AnnotationFencedNode naming the node. lastRenew is when the
// node's kubelet last renewed its Lease (kube-node-lease), zero when unknown: a lost
// node's crawlers were last known up then, --node-monitor-grace-period (50 s by default in 1.34)
// before the node controller marks the node not ready; the grace counts from that mark.
func Node(node *corev1.Node, name string, vmi *kubevirtv1.VirtualMachineInstance, lastRenew, now time.Time, grace time.Duration, attested bool) NodeState {
	if node == nil {
		if attested {
			return NodeState{Lost: true, Fenced: true, Why: fmt.Sprintf("node %s was deleted, and its machine is off (annotation %s)", name, isov1.AnnotationFencedNode)}
		}
		return NodeState{Lost: true, Why: fmt.Sprintf("node %s was deleted; deleting a Node does not stop its machine, and the crawler may still run there: it starts elsewhere once the machine is known to be off. Taint a Node %s before deleting it (as a fence agent does); deleted already, annotate the CrawlerVM %s=%s once the machine is off", name, corev1.TaintNodeOutOfService, isov1.AnnotationFencedNode, name)}
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			return NodeState{Lost: true, Fenced: true, Why: fmt.Sprintf("node %s is fenced (taint %s)", name, corev1.TaintNodeOutOfService)}
		}
	}
	var ready *corev1.NodeCondition
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			ready = &node.Status.Conditions[i]
		}
	}
	if ready == nil || ready.Status == corev1.ConditionTrue {
		return NodeState{}
	}
	since := ready.LastTransitionTime.Time
	down := now.Sub(since)
	if down < grace {
		return NodeState{Wait: grace - down}
	}
	why := fmt.Sprintf("node %s has not been ready since %s (%s, reason %s)", name, since.UTC().Format(time.RFC3339), ready.Status, ready.Reason)
	if !lastRenew.IsZero() && lastRenew.Before(since) {
		since = lastRenew
		why += fmt.Sprintf(", its kubelet last heard from at %s", since.UTC().Format(time.RFC3339))
	}
	if vmi == nil || vmi.Status.NodeName != name || vmi.IsFinal() || !vmi.DeletionTimestamp.IsZero() {
		return NodeState{Lost: true, Fenced: true, Since: since, Why: why + ", and the crawler's VMI no longer runs there (its launcher pod is gone)"}
	}
	return NodeState{Lost: true, Since: since, Why: why}
}
