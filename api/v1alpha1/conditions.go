package v1alpha1

// Condition types of a CrawlerVM (status.conditions).
const (
	// ConditionPlaced is True when a node holds the crawler's resources (status.sizing
	// and status.placement are its reservation); False, with the reason
	// ReasonUnschedulable, when no node can.
	ConditionPlaced = "Placed"
	// ConditionReady is True when the crawler's VMI runs, started by KubeVirt from the
	// crawler's VirtualMachine.
	ConditionReady = "Ready"
	// ConditionSLOConfirmed is True when the last probe of the current spec measured the
	// SLO as met, False when it measured it broken or could not judge it, Unknown while no
	// probe of the current spec has finished.
	ConditionSLOConfirmed = "SLOConfirmed"
	// ConditionAtRisk is True when the crawler's prediction on its node, refreshed for
	// what is there now (neighbours, profiles, calibration), exceeds its tolerance: the
	// message gives the figure and the model's term; False while it is within; absent
	// while the crawler holds no node.
	ConditionAtRisk = "AtRisk"
	// ConditionMoving is True while isochron moves the crawler to another node
	// (status.move; Ready stays True through a live migration), False once the last move
	// ended (status.lastMove: moved, or failed and when it is tried again, or blocked:
	// no node can take it); absent until the crawler first moves.
	ConditionMoving = "Moving"
	// ConditionDowntimeWithinBudget is True while the crawler's outages of the last 30
	// days (status.outages) took less time than its objective allows (about 26 s at
	// 99.999%), False once they alone have spent it; absent until its first outage.
	ConditionDowntimeWithinBudget = "DowntimeWithinBudget"
	// ConditionReconciling is present (True) while the crawler is being placed or its
	// VMI is starting or being replaced: kstatus reads it as InProgress.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is present (True) while the crawler cannot reach Ready without a
	// change (no node fits, its network is missing, its VMI failed): kstatus reads it as
	// Failed.
	ConditionStalled = "Stalled"
)

// Reasons of the Placed condition.
const (
	// ReasonPlaced: a node holds the crawler; the message names it, what the crawler holds
	// there and the predicted interval error.
	ReasonPlaced = "Placed"
	// ReasonUnschedulable: no node can host the crawler within every crawler's budget;
	// the message gives each node's binding constraint.
	ReasonUnschedulable = "Unschedulable"
	// ReasonOverbooked: the crawler's node held more than it has (reservations written by
	// a manager replica that had lost its lease, or by hand), and this crawler's
	// reservation, the youngest there, was released; no other node fits it yet. Also the
	// reason of the Warning Event that tells what became of it (released, re-placed or
	// moved).
	ReasonOverbooked = "Overbooked"
	// ReasonReleased: the crawler was down for longer than the manager's --release-after
	// because a person stopped it (VMStopped) or the API server refuses its launcher pod
	// (LauncherRefused: a ResourceQuota, a LimitRange, an admission policy), and its
	// reservation was released: capacity is held by what runs. Its VM's template is
	// pinned to no node meanwhile; once a launcher pod of it exists again (virtctl start,
	// the quota raised) it is placed anew, where a node still fits it. Also the reason of
	// the Event that tells the release.
	ReasonReleased = "Released"
)

// Reasons of the AtRisk condition.
const (
	// ReasonPredictedWithinTolerance: the refreshed prediction is within the tolerance.
	ReasonPredictedWithinTolerance = "PredictedWithinTolerance"
	// ReasonPredictedOverTolerance: the refreshed prediction exceeds the tolerance (or an
	// RT-NIC deadline cannot be met); also the reason of the Warning Event when it turns so.
	ReasonPredictedOverTolerance = "PredictedOverTolerance"
)

// Reasons of the Ready condition (also the Stalled and Reconciling conditions', which
// copy Ready's while it explains why the crawler is not running).
const (
	// ReasonNotPlaced: no node holds the crawler yet, so no VMI is created.
	ReasonNotPlaced = "NotPlaced"
	// ReasonVMIPending: the VMI is created and KubeVirt has not started it yet.
	ReasonVMIPending = "VMIPending"
	// ReasonVMIRunning: the VMI runs on its node.
	ReasonVMIRunning = "VMIRunning"
	// ReasonVMIFailed: the VMI failed or stopped (the guest crashed or shut down, its
	// launcher was killed); KubeVirt starts a new one at once (runStrategy Always).
	ReasonVMIFailed = "VMIFailed"
	// ReasonVMCrashLoop: the VM's VMIs keep failing before they run, and KubeVirt waits
	// out its crash-loop backoff before the next start (the message says when).
	ReasonVMCrashLoop = "VMCrashLoop"
	// ReasonNodeLost: the crawler's node has not been ready for longer than the grace
	// (--node-lost-grace): the crawler is presumed down. It starts on another node once the
	// node is fenced (the node.kubernetes.io/out-of-service taint, the Node deleted, or
	// its launcher pod gone), never before: two copies must never run at once.
	ReasonNodeLost = "NodeLost"
	// ReasonVMStopped: a person stopped the VM (virtctl stop sets runStrategy Halted);
	// virtctl start runs it again.
	ReasonVMStopped = "VMStopped"
	// ReasonVMIReplacing: a spec change that KubeVirt cannot apply to the running VMI
	// (VMI specs are immutable but for what KubeVirt live-updates): isochron restarts the
	// VMI once, and KubeVirt starts the new one from the VM's new template.
	ReasonVMIReplacing = "VMIReplacing"
	// ReasonLauncherUnschedulable: the VMI's virt-launcher pod cannot be scheduled on the
	// crawler's node (kube-scheduler's reason, e.g. Insufficient cpu): something outside
	// isochron holds what the reservation counted on.
	ReasonLauncherUnschedulable = "LauncherUnschedulable"
	// ReasonLauncherRefused: KubeVirt cannot create the VMI's virt-launcher pod because the
	// API server refuses it (KubeVirt's Synchronized condition, reason FailedCreate: a
	// ResourceQuota, a LimitRange, an admission policy); the message has the API server's
	// words. What the namespace may run is its administrator's to say: raise the quota or
	// change the policy, or the crawler's spec. After --release-after the crawler's
	// reservation is released (Placed=False, Released).
	ReasonLauncherRefused = "LauncherRefused"
	// ReasonRTNetworkNotFound: spec.rtNIC.networkName names no NetworkAttachmentDefinition.
	ReasonRTNetworkNotFound = "RTNetworkNotFound"
	// ReasonRTUplinkNotAllowed: the RT network's NetworkAttachmentDefinition names, with
	// AnnotationRTUplink, a host interface that is not one of the RT uplinks the cluster
	// administrator named (ConfigMap isochron-networks, rtUplinks).
	ReasonRTUplinkNotAllowed = "RTUplinkNotAllowed"
	// ReasonRTNetworkNotAllowed: spec.rtNIC.networkName names a network of another
	// namespace that an administrator does not share.
	ReasonRTNetworkNotAllowed = "RTNetworkNotAllowed"
	// ReasonNodeAccessNotAllowed: spec.placement reaches beyond the nodes the
	// administrator lets the crawler's namespace reach (a toleration of a taint it may not
	// tolerate, a node selector against the namespace's; ConfigMap isochron-node-access):
	// the crawler is not placed by this spec.
	ReasonNodeAccessNotAllowed = "NodeAccessNotAllowed"
	// ReasonMultusNotInstalled: the crawler has an RT-NIC and the cluster does not serve
	// Multus' NetworkAttachmentDefinition API; the crawler starts once it does.
	ReasonMultusNotInstalled = "MultusNotInstalled"
	// ReasonKubeVirtNotInstalled: the cluster does not serve KubeVirt's API; the manager
	// waits for it and then places and starts the crawler.
	ReasonKubeVirtNotInstalled = "KubeVirtNotInstalled"
	// ReasonInvalid: the VMI cannot be rendered from the spec, or a VMI of the crawler's
	// name exists that this CrawlerVM does not own.
	ReasonInvalid = "Invalid"
)

// Reasons of the Moving condition.
const (
	// ReasonMigrating: a live migration moves the running VMI to the node the model chose.
	ReasonMigrating = "Migrating"
	// ReasonRestartingElsewhere: the VMI restarts on the node the model chose (it did not
	// run, or KubeVirt reports it not live-migratable; the message says which).
	ReasonRestartingElsewhere = "RestartingElsewhere"
	// ReasonMoved: the last move ended with the crawler running on its new node.
	ReasonMoved = "Moved"
	// ReasonMoveFailed: the last move failed (the migration's reason); the crawler runs
	// where it ran, and the move is tried again at the time the message gives.
	ReasonMoveFailed = "MoveFailed"
	// ReasonMoveBlocked: the crawler must leave its node (a drain) and no node can take it
	// within every crawler's budget; the message says what is missing. The drain waits.
	ReasonMoveBlocked = "MoveBlocked"
)

// Reasons of the DowntimeWithinBudget condition.
const (
	// ReasonWithinBudget: the outages of the window took less than the budget.
	ReasonWithinBudget = "WithinBudget"
	// ReasonBudgetSpent: the outages of the window alone took the whole budget.
	ReasonBudgetSpent = "BudgetSpent"
)

// Reasons of the Reconciling condition of their own (it otherwise copies Ready's).
const (
	// ReasonPlacing: the crawler waits for its first placement decision.
	ReasonPlacing = "Placing"
	// ReasonStarting: the crawler is placed and its VMI is being created.
	ReasonStarting = "Starting"
	// ReasonSpecChanged: the Ready condition speaks of an earlier spec generation; the
	// current one is being applied.
	ReasonSpecChanged = "SpecChanged"
)

// Reasons of the SLOConfirmed condition (also status.lastProbe.reason).
const (
	// ReasonProbePending: no probe of the current spec has run yet; one starts once the
	// VMI runs the current spec.
	ReasonProbePending = "ProbePending"
	// ReasonProbeRunning: a probe of the current spec is measuring.
	ReasonProbeRunning = "ProbeRunning"
	// ReasonSLOMet: the probe measured every figure of the SLO and each met it.
	ReasonSLOMet = "SLOMet"
	// ReasonSLORefuted: the interval error at the objective percentile exceeded the
	// tolerance.
	ReasonSLORefuted = "SLORefuted"
	// ReasonDeadlineMissed: more RT-NIC round trips missed the deadline than the
	// objective allows.
	ReasonDeadlineMissed = "DeadlineMissed"
	// ReasonInsufficientSamples: too few intervals or round trips to judge the objective
	// percentile; the message says how long a probe would need.
	ReasonInsufficientSamples = "InsufficientSamples"
	// ReasonNoTraffic: the probe gateway received no requests from the crawler.
	ReasonNoTraffic = "NoTraffic"
	// ReasonRTNICNotMeasured: the crawler has an RT-NIC but no round trip was measured
	// (no address reported on it, or the probe could not reach it).
	ReasonRTNICNotMeasured = "RTNICNotMeasured"
	// ReasonProbeFailed: the probe did not complete (its pod failed) or left no readable
	// report; nothing was judged.
	ReasonProbeFailed = "ProbeFailed"
	// ReasonProbeTimedOut: the probe Job passed its active deadline; nothing was judged.
	ReasonProbeTimedOut = "ProbeTimedOut"
	// ReasonInvalidSchedule: spec.probe.schedule is not a cron schedule the operator can
	// read.
	ReasonInvalidSchedule = "InvalidSchedule"
)

// Reasons of the Events isochron records on a CrawlerVM, besides the condition reasons
// it also records as Events when a condition changes (ReasonPlaced, ReasonUnschedulable,
// ReasonVMIRunning, ReasonVMIReplacing, ReasonInvalidSchedule).
const (
	// EventReasonRTUplinkUnavailable (on a Node): isochron's NIC agent cannot program the
	// node's RT uplink (none found, or a kernel without traffic control).
	EventReasonRTUplinkUnavailable = "RTUplinkUnavailable"
	// EventReasonRTNICNotScheduled (on a CrawlerVM): the NIC agent of its node schedules
	// none of its RT-NIC's traffic on the host (status.rtNIC.notScheduled says why).
	EventReasonRTNICNotScheduled = "RTNICNotScheduled"
	// EventReasonRTNICRaised and EventReasonRTNICLowered: the NIC agent's feedback moved
	// a crawler's RT-NIC one class up (it missed its deadline) or down (it kept it).
	EventReasonRTNICRaised  = "RTNICRaised"
	EventReasonRTNICLowered = "RTNICLowered"
	// EventReasonVCPUsMadeRealtime: the NIC agent found vCPU threads of a dedicated
	// crawler's QEMU without SCHED_FIFO past its grace and gave them the policy KubeVirt's
	// realtime asks for; EventReasonVCPUsNotRealtime: it could not (the message says why).
	EventReasonVCPUsMadeRealtime = "VCPUsMadeRealtime"
	EventReasonVCPUsNotRealtime  = "VCPUsNotRealtime"
	// EventReasonVMICreated: the crawler's VirtualMachine was created, pinned to its
	// node; KubeVirt starts its VMI.
	EventReasonVMICreated = "VMICreated"
	// EventReasonVMIAdopted: a bare VMI an earlier release of isochron created from the
	// current spec keeps running, adopted by the crawler's new VirtualMachine.
	EventReasonVMIAdopted = "VMIAdopted"
	// EventReasonOutageBegan and EventReasonOutageEnded: the crawler stopped running, and
	// runs again (status.outages).
	EventReasonOutageBegan = "OutageBegan"
	EventReasonOutageEnded = "OutageEnded"
	// EventReasonProbeStarted: a probe Job was created.
	EventReasonProbeStarted = "ProbeStarted"
	// EventReasonProbeCancelled: a probe Job of an outdated spec or VMI was deleted.
	EventReasonProbeCancelled = "ProbeCancelled"
	// EventReasonProbeAbandoned: a cancelled probe Job was still being deleted when the
	// wait for it ended (its pod's node does not answer): it no longer holds back the
	// crawler's next probe.
	EventReasonProbeAbandoned = "ProbeAbandoned"
	// EventReasonProbeForeignTraffic: a probe's gateway received requests without the
	// crawler's probe credential, which it did not count.
	EventReasonProbeForeignTraffic = "ProbeForeignTraffic"
	// EventReasonProbeConfirmed, EventReasonProbeRefuted, EventReasonProbeInconclusive,
	// EventReasonProbeFailed and EventReasonProbeTimedOut record a finished probe's
	// verdict (ProbeVerdict.EventReason).
	EventReasonProbeConfirmed    = "ProbeConfirmed"
	EventReasonProbeRefuted      = "ProbeRefuted"
	EventReasonProbeInconclusive = "ProbeInconclusive"
	EventReasonProbeFailed       = "ProbeFailed"
	EventReasonProbeTimedOut     = "ProbeTimedOut"
	// EventReasonMoving: isochron re-placed the crawler on another node (a refuting probe
	// under onRefuted Replace, a drain, a spec change) and moves it there; the Events
	// ReasonMoved and ReasonMoveFailed tell how the move ended.
	EventReasonMoving = "Moving"
	// EventReasonNoBetterNode: under onRefuted Replace, no other node is predicted to
	// fit a refuted crawler; it stays where it is.
	EventReasonNoBetterNode = "NoBetterNode"
	// EventReasonMoveDeferred: a move waits: under onRefuted Replace, a refuted crawler
	// moved less than the minimum move interval ago; or an eviction of its launcher on a
	// node nobody cordoned (a request to move it) finds the budget of requested moves
	// spent. It moves when the wait has passed.
	EventReasonMoveDeferred = "MoveDeferred"
	// EventReasonMigrationTakenOver: someone else's migration of the crawler's VMI
	// (virtctl migrate, KubeVirt's workload updater) was deleted, and isochron moves the
	// crawler to a node the model chose instead.
	EventReasonMigrationTakenOver = "MigrationTakenOver"
	// EventReasonMigrationRefused: someone else's migration of the crawler's VMI was
	// deleted, and the crawler stays: a move of isochron's is under way, the budget of
	// requested moves is spent, or no other node can hold it (the message says which).
	EventReasonMigrationRefused = "MigrationRefused"
	// EventReasonRecalibrated: a conclusive probe changed the correction of the
	// crawler's node (recorded on the CrawlerVM whose probe it was).
	EventReasonRecalibrated = "Recalibrated"
)

// The condition of a NodeCalibration's and a ContentionProfile's status.
const (
	// ConditionCalibrated is True when the samples make a correction (the node's own, or
	// the class's), False when they come from too few namespaces: no namespace moves the
	// shared model alone (docs/contention-model.md, "Recalibration").
	ConditionCalibrated = "Calibrated"
	// ReasonEnoughNamespaces: the samples are from enough namespaces; the message gives
	// the correction and what it rests on.
	ReasonEnoughNamespaces = "EnoughNamespaces"
	// ReasonTooFewNamespaces: the samples are from too few namespaces to make a
	// correction; the message says how many there are and how many are needed.
	ReasonTooFewNamespaces = "TooFewNamespaces"
)

// EventReason is the reason of the Event that records a probe with verdict v.
func (v ProbeVerdict) EventReason() string {
	switch v {
	case VerdictConfirmed:
		return EventReasonProbeConfirmed
	case VerdictRefuted:
		return EventReasonProbeRefuted
	case VerdictInconclusive:
		return EventReasonProbeInconclusive
	case VerdictFailed:
		return EventReasonProbeFailed
	case VerdictTimedOut:
		return EventReasonProbeTimedOut
	}
	return "Probe" + string(v)
}
