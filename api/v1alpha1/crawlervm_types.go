package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CPUPlacement says whether a crawler's vCPUs get host CPUs of their own.
// +kubebuilder:validation:Enum=dedicated;shared
type CPUPlacement string

const (
	// CPUPlacementDedicated pins every vCPU to an exclusive host CPU (kubelet CPU Manager
	// static policy), isolates the emulator thread and runs the guest as realtime.
	CPUPlacementDedicated CPUPlacement = "dedicated"
	// CPUPlacementShared runs the vCPUs on the node's shared pool, protected by CPU requests
	// (cgroup weights).
	CPUPlacementShared CPUPlacement = "shared"
)

// PlacementPolicy chooses among the nodes that can host a crawler.
// +kubebuilder:validation:Enum=pack;spread
type PlacementPolicy string

const (
	// PlacementPolicyPack fills nodes before using new ones (fewest nodes).
	PlacementPolicyPack PlacementPolicy = "pack"
	// PlacementPolicySpread prefers the node with the most headroom.
	PlacementPolicySpread PlacementPolicy = "spread"
)

// RefutedAction is what isochron does when a probe refutes a crawler's SLO on its node.
// +kubebuilder:validation:Enum=Report;Replace
type RefutedAction string

const (
	// RefutedReport: report only (SLOConfirmed, Events, metrics); the crawler stays.
	RefutedReport RefutedAction = "Report"
	// RefutedReplace: re-place the crawler where the corrected contention model predicts
	// it fits, within spec.placement's constraints, and recreate its VMI there; at most
	// once per refuting probe and once per minimum move interval (docs/probes.md).
	RefutedReplace RefutedAction = "Replace"
)

// CrawlerVMSpec is what a crawler needs: its request rate, its timing budget, its guest
// and, optionally, a real-time NIC, placement constraints and probe settings.
type CrawlerVMSpec struct {
	// rps is the number of requests per second the crawler sends, 1 to 100000.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	RPS int32 `json:"rps,omitempty"`

	// errorBudget is the largest acceptable measurement-interval error and the share of
	// intervals that must stay within it.
	// +required
	ErrorBudget ErrorBudget `json:"errorBudget,omitzero"` //nolint:kubeapilinter // requiredfields: a zero tolerance is refused by its CEL rule (> 0), which the linter cannot read.

	// guest describes the crawler's virtual machine: disk image, memory, cloud-init.
	// +required
	Guest Guest `json:"guest,omitzero"`

	// cpuPlacement is dedicated (exclusive host CPUs, realtime guest; the default) or
	// shared (the node's shared CPU pool, protected by CPU requests).
	// +optional
	// +kubebuilder:default=dedicated
	CPUPlacement CPUPlacement `json:"cpuPlacement,omitempty"`

	// rtNIC attaches a real-time secondary network with a transfer deadline and a
	// guaranteed bandwidth.
	// +optional
	RTNIC *RTNIC `json:"rtNIC,omitempty"`

	// placement constrains and steers the choice of node.
	// +optional
	// +kubebuilder:default={}
	Placement *Placement `json:"placement,omitempty"`

	// probe sets when and for how long the SLO is measured.
	// +optional
	// +kubebuilder:default={}
	Probe *Probe `json:"probe,omitempty"`
}

// ErrorBudget is the crawler's timing requirement: at objective percent of intervals the
// interval error stays within tolerance.
type ErrorBudget struct {
	// tolerance is the largest acceptable interval error, a duration > 0 and <= 10s
	// (for example 10ms).
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('10s')",message="spec.errorBudget.tolerance must be greater than 0 and at most 10s, for example 10ms"
	Tolerance metav1.Duration `json:"tolerance,omitzero"` //nolint:kubeapilinter // requiredfields: zero is refused by the CEL rule (> 0), which the linter cannot read.

	// objective is the percentage of intervals that must meet the tolerance, a decimal
	// >= 90 and < 100 with at most six decimals. Default "99.999" (IEC 61508 SIL 1,
	// continuous mode).
	// +optional
	// +kubebuilder:default="99.999"
	// +kubebuilder:validation:XValidation:rule="double(self) >= 90.0 && double(self) < 100.0",message="spec.errorBudget.objective must be a percentage >= 90 and < 100, for example \"99.999\""
	// +kubebuilder:validation:XValidation:rule="!self.contains('.') || size(self) - self.indexOf('.') <= 7",message="spec.errorBudget.objective has at most six decimals, for example \"99.9999\""
	Objective Decimal `json:"objective,omitempty"`
}

// DefaultObjective is spec.errorBudget.objective when it is not set: 99.999%.
const DefaultObjective = 99.999

// ObjectivePercent is objective as a number, DefaultObjective when it is unset (the
// schema defaults it and refuses anything outside [90, 100)).
func (b ErrorBudget) ObjectivePercent() float64 {
	if v, ok := b.Objective.Float64(); ok && v > 0 && v < 100 {
		return v
	}
	return DefaultObjective
}

// Guest is the crawler's virtual machine.
type Guest struct {
	// image is the containerDisk image that holds the crawler's disk.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// memory is the guest's memory, at least 256Mi. Dedicated crawlers back it with 2Mi
	// hugepages, rounded up to a whole page.
	// +required
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('256Mi')) >= 0",message="spec.guest.memory must be at least 256Mi"
	Memory resource.Quantity `json:"memory,omitzero"` //nolint:kubeapilinter // requiredfields: zero is refused by the CEL rule (at least 256Mi), which the linter cannot read.

	// cloudInitUserData is the guest's own cloud-init user data. When rtNIC is set,
	// isochron adds a part that marks the RT-NIC's traffic with its DSCP class; the two are
	// combined as a MIME multipart document, and yours is passed on unchanged. At most
	// 1024 characters, so that the combined document stays within KubeVirt's 2048-byte
	// limit for inline user data.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	CloudInitUserData string `json:"cloudInitUserData,omitempty"` //nolint:kubeapilinter // optionalfields: "" means no user data of the guest's own, as unset does; no pointer needed to tell them apart.
}

// RTNIC is a real-time secondary network interface (a Multus NetworkAttachmentDefinition).
type RTNIC struct {
	// networkName is the NetworkAttachmentDefinition, as name or namespace/name; without a
	// namespace it is looked up in the CrawlerVM's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="spec.rtNIC.networkName must be name or namespace/name of a NetworkAttachmentDefinition (lower-case DNS names), for example bms/rt-net"
	NetworkName string `json:"networkName,omitempty"`

	// deadline is the largest acceptable transfer delay on this NIC, > 0 and <= 1s. It
	// selects the DSCP class that marks the crawler's traffic.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('1s')",message="spec.rtNIC.deadline must be greater than 0 and at most 1s, for example 5ms"
	Deadline metav1.Duration `json:"deadline,omitzero"` //nolint:kubeapilinter // requiredfields: zero is refused by the CEL rule (> 0), which the linter cannot read.

	// minBandwidth is the bandwidth the crawler's traffic needs on this NIC, in bits per
	// second (for example 100M), > 0.
	// +required
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="spec.rtNIC.minBandwidth must be a positive number of bits per second, for example 100M"
	MinBandwidth resource.Quantity `json:"minBandwidth,omitzero"` //nolint:kubeapilinter // requiredfields: zero is refused by the CEL rule (> 0), which the linter cannot read.
}

// Placement constrains and steers the choice of node.
type Placement struct {
	// nodeSelector restricts the crawler to nodes with these labels.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations let the crawler run on nodes with matching taints.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// policy chooses among the nodes that fit: pack (fewest nodes; the default) or spread
	// (most headroom).
	// +optional
	// +kubebuilder:default=pack
	Policy PlacementPolicy `json:"policy,omitempty"`

	// onRefuted is what isochron does when a probe refutes the crawler's SLO on its
	// node: Report (the default) only reports; Replace moves the crawler to a node where
	// the corrected contention model predicts it fits, recreating its VMI there (a
	// restart of the guest), at most once per refuting probe and once per minimum move
	// interval; when no node fits, it stays and says so.
	// +optional
	// +kubebuilder:default=Report
	OnRefuted RefutedAction `json:"onRefuted,omitempty"`
}

// OnRefuted is what the crawler asks for when a probe refutes its SLO (Report if unset).
func (s *CrawlerVMSpec) OnRefuted() RefutedAction {
	if s.Placement != nil && s.Placement.OnRefuted == RefutedReplace {
		return RefutedReplace
	}
	return RefutedReport
}

// ProbeTraffic is whose requests a probe measures.
// +kubebuilder:validation:Enum=Agent;Crawler
type ProbeTraffic string

const (
	// ProbeTrafficAgent: isochron's agent in the guest sends the crawler's schedule
	// (spec.rps requests a second, each point once a second) to the probe gateway while
	// the probe runs, beside the real crawler, whose traffic is never touched. It
	// measures what the VM gives a crawler of this rate (vCPU waits, the host's I/O path,
	// the network), not the crawler's own code.
	ProbeTrafficAgent ProbeTraffic = "Agent"
	// ProbeTrafficCrawler: the guest's own crawler copies its requests to the probe
	// gateway while the window file the agent writes exists (docs/probes.md has the
	// contract). It measures the crawler end to end, its own code included.
	ProbeTrafficCrawler ProbeTraffic = "Crawler"
)

// Probe sets when and for how long the crawler's SLO is measured.
type Probe struct {
	// schedule is a cron schedule (five fields, or @hourly, @daily...) for repeated probes.
	// Empty: probe after each start and each spec change only.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^@(yearly|annually|monthly|weekly|daily|hourly)$') || self.matches('^[^ ]+( +[^ ]+){4}$')",message="spec.probe.schedule must be a cron schedule of five fields (for example \"0 3 * * *\") or one of @yearly, @monthly, @weekly, @daily, @hourly"
	Schedule string `json:"schedule,omitempty"` //nolint:kubeapilinter // optionalfields: "" means no schedule, as unset does (the CEL rule accepts it); no pointer needed to tell them apart.

	// traffic is whose requests a probe measures: Agent (the default: isochron's agent in
	// the guest sends the crawler's schedule to the probe gateway) or Crawler (the guest's
	// own crawler copies its requests there while a probe runs; docs/probes.md has the
	// contract).
	// +optional
	// +kubebuilder:default=Agent
	Traffic ProbeTraffic `json:"traffic,omitempty"`

	// duration is how long each probe measures, >= 10s and <= 24h. Default 20m (10^5
	// samples at 100 rps, enough for a p99.999).
	// +optional
	// +kubebuilder:default="20m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('24h')",message="spec.probe.duration must be at least 10s and at most 24h, for example 20m"
	Duration *metav1.Duration `json:"duration,omitempty"`
}

// ProbeVerdict is what a probe run concluded about the SLO.
// +kubebuilder:validation:Enum=Confirmed;Refuted;Inconclusive;Failed;TimedOut
type ProbeVerdict string

const (
	// VerdictConfirmed: every figure the SLO needs was measured and met it.
	VerdictConfirmed ProbeVerdict = "Confirmed"
	// VerdictRefuted: a measured figure broke the SLO.
	VerdictRefuted ProbeVerdict = "Refuted"
	// VerdictInconclusive: the probe ran but measured too little to decide (no traffic,
	// too few samples for the objective, RT-NIC not reachable).
	VerdictInconclusive ProbeVerdict = "Inconclusive"
	// VerdictFailed: the probe did not complete (its pod failed); nothing was judged.
	VerdictFailed ProbeVerdict = "Failed"
	// VerdictTimedOut: the probe Job passed its active deadline; nothing was judged.
	VerdictTimedOut ProbeVerdict = "TimedOut"
)

// ProbeTrigger is why a probe ran.
// +kubebuilder:validation:Enum=Start;SpecChange;Moved;Schedule;Retry;Requested
type ProbeTrigger string

const (
	// TriggerStart: the crawler's VMI started running.
	TriggerStart ProbeTrigger = "Start"
	// TriggerSpecChange: the spec changed while the VMI ran.
	TriggerSpecChange ProbeTrigger = "SpecChange"
	// TriggerMoved: the VMI was live-migrated to another node, where no probe has
	// measured it yet.
	TriggerMoved ProbeTrigger = "Moved"
	// TriggerSchedule: spec.probe.schedule fired.
	TriggerSchedule ProbeTrigger = "Schedule"
	// TriggerRetry: the last probe of the spec failed, timed out or received no traffic,
	// and its backoff passed.
	TriggerRetry ProbeTrigger = "Retry"
	// TriggerRequested: someone asked for a probe now (AnnotationProbeRequested).
	TriggerRequested ProbeTrigger = "Requested"
)

// ProbeResult is the outcome of one probe run.
type ProbeResult struct {
	// job is the name of the probe Job, in the CrawlerVM's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Job string `json:"job,omitempty"`
	// trigger is why the probe ran: Start, SpecChange, Moved, Schedule, Retry or Requested.
	// +required
	Trigger ProbeTrigger `json:"trigger,omitempty"`
	// observedGeneration is the spec generation the probe measured.
	// +required
	ObservedGeneration int64 `json:"observedGeneration"`
	// vmiUID is the UID of the VMI the probe measured.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	VMIUID string `json:"vmiUID,omitempty"`
	// node is the node the VMI ran on while the probe measured it (a live migration moves
	// the same VMI); absent for probes of releases that did not record it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`
	// startTime is when the probe Job was created.
	// +required
	StartTime metav1.Time `json:"startTime,omitzero"` //nolint:kubeapilinter // requiredfields: the operator always sets it from the Job's creation time; omitzero omits an unset one, which the API server then refuses.
	// completionTime is when the probe's result was read.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// verdict is Confirmed, Refuted, Inconclusive, Failed or TimedOut.
	// +required
	Verdict ProbeVerdict `json:"verdict,omitempty"`
	// reason is the SLOConfirmed condition's reason for this result (SLOMet,
	// SLORefuted, DeadlineMissed, InsufficientSamples, NoTraffic, RTNICNotMeasured,
	// ProbeFailed or ProbeTimedOut).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
	// intervalError is the measurement-interval error of the crawler's requests to the
	// probe's gateway; absent when none arrived.
	// +optional
	IntervalError *MeasuredIntervalError `json:"intervalError,omitempty"`
	// rtNIC is the round trips to the crawler's RT-NIC; absent without an RT-NIC or when
	// none was measured.
	// +optional
	RTNIC *MeasuredRoundTrips `json:"rtNIC,omitempty"`
	// message explains the verdict with the figures against the budget.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`
	// consecutiveFailures is how many probes of this spec and VMI in a row, this one
	// included, failed, timed out or received no traffic (NoTraffic); absent after one
	// that judged. It sets the backoff before the next try.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`
	// foreignRequests is how many requests reached the probe's gateway without the
	// crawler's probe credential (from another pod, or a guest agent without the
	// crawler's key): counted here, never in the verdict. Absent when there were none.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ForeignRequests int64 `json:"foreignRequests,omitempty"`
}

// ActiveProbe is the probe Job isochron created for the crawler and has not recorded in
// lastProbe yet: the one Job whose result isochron believes.
type ActiveProbe struct {
	// job is the probe Job's name, in the CrawlerVM's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Job string `json:"job,omitempty"`
	// uid is the UID the API server gave the Job when isochron created it. Only that Job,
	// and only a pod its Job controller made from it, count as the crawler's probe: a Job
	// or pod anyone else creates with a probe's labels and owner reference does not.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid,omitempty"`
	// cancelTime is when isochron cancelled the probe (it measured an outdated spec or
	// VMI); absent while it measures. A cancelled probe holds the next one back until its
	// Job is gone, or for at most two minutes (docs/probes.md).
	// +optional
	CancelTime *metav1.Time `json:"cancelTime,omitempty"`
}

// MeasuredIntervalError is what a probe's gateway measured of a crawler's requests.
// Each error is the absolute difference between an interval (the time between two
// requests for the same point) and the period.
type MeasuredIntervalError struct {
	// intervals is the number of intervals measured.
	// +required
	// +kubebuilder:validation:Minimum=1
	Intervals int64 `json:"intervals,omitempty"`
	// missing is the number of requests that never arrived (gaps of a period or more).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Missing *int64 `json:"missing,omitempty"`
	// p50 is the median interval error.
	// +required
	P50 metav1.Duration `json:"p50"`
	// p99 is the interval error at the 99th percentile.
	// +required
	P99 metav1.Duration `json:"p99"`
	// p99999 is the interval error at the 99.999th percentile.
	// +required
	P99999 metav1.Duration `json:"p99999"`
	// atObjective is the interval error at spec.errorBudget.objective, the figure judged
	// against the tolerance.
	// +required
	AtObjective metav1.Duration `json:"atObjective"`
	// max is the largest interval error.
	// +required
	Max metav1.Duration `json:"max"`
	// overTolerance is the number of intervals whose error exceeded the tolerance.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OverTolerance *int64 `json:"overTolerance,omitempty"`
}

// MeasuredRoundTrips is what a probe measured of round trips to a crawler's RT-NIC.
type MeasuredRoundTrips struct {
	// sent is the number of round trips tried.
	// +required
	// +kubebuilder:validation:Minimum=1
	Sent int64 `json:"sent,omitempty"`
	// misses is the number that missed the deadline, lost ones included.
	// +required
	// +kubebuilder:validation:Minimum=0
	Misses int64 `json:"misses"`
	// lost is the number never answered.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Lost *int64 `json:"lost,omitempty"`
	// deadline is the RT-NIC deadline the round trips were held to.
	// +required
	Deadline metav1.Duration `json:"deadline"`
	// p99 is the round trip of the answered probes at the 99th percentile.
	// +required
	P99 metav1.Duration `json:"p99"`
	// atObjective is the round trip of the answered probes at
	// spec.errorBudget.objective.
	// +required
	AtObjective metav1.Duration `json:"atObjective"`
	// max is the longest answered round trip.
	// +required
	Max metav1.Duration `json:"max"`
}

// CrawlerVMStatus is what isochron decided and observed for a crawler.
type CrawlerVMStatus struct {
	// conditions are Placed, Ready and SLOConfirmed, and the kstatus conditions
	// Reconciling and Stalled (present only while True). Their reasons are the Reason
	// constants of this package.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=12
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the spec generation the status describes.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// sizing is the size chosen for the crawler's VM. With placement it is the
	// reservation the crawler holds on its node.
	// +optional
	Sizing *Sizing `json:"sizing,omitempty"`

	// placement is the node chosen and what is predicted there.
	// +optional
	Placement *PlacementStatus `json:"placement,omitempty"`

	// decidedBy is the leader-election identity of the manager replica that last changed
	// the crawler's reservation (status.sizing, status.placement.node, status.move.from):
	// the holder of the manager's Lease when it decided. The API server's leader fence
	// (the isochron-leader-fence ValidatingAdmissionPolicy) admits a change to the
	// reservation only when decidedBy is the Lease's holder as the write lands.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=320
	DecidedBy string `json:"decidedBy,omitempty"`

	// vmi is the KubeVirt VirtualMachineInstance that runs the crawler.
	// +optional
	VMI *VMIStatus `json:"vmi,omitempty"`

	// lastProbe is the outcome of the last probe run that finished.
	// +optional
	LastProbe *ProbeResult `json:"lastProbe,omitempty"`

	// activeProbe is the probe Job isochron created and has not recorded yet.
	// +optional
	ActiveProbe *ActiveProbe `json:"activeProbe,omitempty"`

	// lastRemediation is what isochron last did about a refuting probe under
	// spec.placement.onRefuted Replace: the move, or why the crawler stayed.
	// +optional
	LastRemediation *Remediation `json:"lastRemediation,omitempty"`

	// move is the move of the crawler to another node that isochron is carrying out: the
	// crawler holds its reservation on both nodes until it ends (status.placement is the
	// node it moves to).
	// +optional
	Move *Move `json:"move,omitempty"`

	// lastMove is how the crawler's last move ended.
	// +optional
	LastMove *MoveRecord `json:"lastMove,omitempty"`

	// outages are the crawler's last outages, newest first: each time it stopped running,
	// why, and for how long (the one that lasts has no end yet). An outage spends the same
	// error budget as intervals measured late (docs/availability.md).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Outages []Outage `json:"outages,omitempty"`

	// refutedOn are the nodes where a probe refuted the crawler's SLO recently, newest
	// first: no move takes the crawler back to one of them while it is remembered
	// (docs/availability.md says for how long).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	RefutedOn []Refutation `json:"refutedOn,omitempty"`

	// rtNIC is how the NIC agent of the crawler's node schedules its RT-NIC on the
	// host's uplink, and what its feedback changed. Written by the agent alone.
	// +optional
	RTNIC *RTNICStatus `json:"rtNIC,omitempty"`
}

// RTNICStatus is the host side of a crawler's RT-NIC: the class its traffic is
// scheduled and marked in, and the feedback of the RTvNIC study: a flow that misses its
// deadline is raised one class, and lowered again after observations within it.
type RTNICStatus struct {
	// class is the DSCP class (EF, AF41, AF31 or AF21) the host schedules the RT-NIC's
	// traffic in and marks it with.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8
	Class string `json:"class,omitempty"`
	// raise is how many classes above its deadline's class the feedback moved the
	// RT-NIC (0 for none).
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3
	Raise int32 `json:"raise"`
	// deadline is the spec.rtNIC.deadline the feedback applies to; a changed deadline
	// starts again from its own class.
	// +required
	Deadline metav1.Duration `json:"deadline"`
	// clean is the number of observations within the deadline since the last change
	// (the feedback lowers a raised class after enough of them).
	// +required
	// +kubebuilder:validation:Minimum=0
	Clean int32 `json:"clean"`
	// evidence identifies the last observation counted (a probe Job's name, or the
	// host's drop counter of the class), so that none counts twice.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Evidence string `json:"evidence,omitempty"`
	// lastChange is when raise last changed.
	// +optional
	LastChange *metav1.Time `json:"lastChange,omitempty"`
	// message says why raise has its value: the evidence of the last change.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// uplink is the host interface on which the NIC agent of the crawler's node schedules
	// and marks the RT-NIC's traffic: one of the RT uplinks the cluster administrator
	// named. Unset while the agent schedules none of it (notScheduled says why).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	Uplink string `json:"uplink,omitempty"`
	// notScheduled says why the NIC agent of the crawler's node schedules none of the
	// RT-NIC's traffic on the host (the network's uplink is not one the administrator
	// named, an SR-IOV network, no such network), and what to do. Unset while it does.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	NotScheduled string `json:"notScheduled,omitempty"`
}

// Remediation is what isochron did about one refuting probe.
type Remediation struct {
	// job is the refuting probe Job acted on: a probe is acted on once.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Job string `json:"job,omitempty"`
	// time is when isochron acted.
	// +required
	Time metav1.Time `json:"time,omitzero"` //nolint:kubeapilinter // requiredfields: the operator always sets it; omitzero omits an unset one, which the API server then refuses.
	// from is the node the probe refuted the crawler on.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	From string `json:"from,omitempty"`
	// to is the node the crawler moved to; absent when no node fitted and it stayed.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	To string `json:"to,omitempty"`
	// message says why it moved there, or why it stayed.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`
}

// MoveReason is why isochron moves a crawler to another node.
// +kubebuilder:validation:Enum=Refuted;Evacuation;SpecChange;NodeLost;Requested;NodeRejected;NodeUnschedulable;Overbooked
type MoveReason string

const (
	// MoveRefuted: a probe refuted the crawler's SLO on its node, and its
	// spec.placement.onRefuted is Replace.
	MoveRefuted MoveReason = "Refuted"
	// MoveEvacuation: the crawler's node is being drained: it is cordoned, and an
	// eviction of its launcher pod marked the VMI for evacuation (evictionStrategy
	// External).
	MoveEvacuation MoveReason = "Evacuation"
	// MoveSpecChange: a spec change no longer fits the node the crawler runs on (its
	// node selector, its tolerations, or the size it needs now).
	MoveSpecChange MoveReason = "SpecChange"
	// MoveNodeLost: the crawler's node was lost and has been fenced: the crawler starts
	// on another node (a cold move: its first copy is gone).
	MoveNodeLost MoveReason = "NodeLost"
	// MoveRequested: someone asked KubeVirt to migrate the crawler's VMI (virtctl
	// migrate, KubeVirt's workload updater after its upgrade), or evicted its launcher on a
	// node nobody cordoned; isochron took the request over, to a node the model chose,
	// within the manager's budget of requested moves.
	MoveRequested MoveReason = "Requested"
	// MoveNodeRejected: the kubelet of the crawler's node refused to run its launcher for
	// a reason of the node (it cannot pin its CPUs, it is out of a resource, it evicted
	// it): KubeVirt's crash-loop backoff cannot cure that, so the crawler starts on
	// another node.
	MoveNodeRejected MoveReason = "NodeRejected"
	// MoveNodeUnschedulable: kube-scheduler could not put the crawler's launcher on its
	// node for a reason of the node (cordoned, a taint the launcher does not tolerate, its
	// CPUs taken by a pod that preempted it) for longer than the manager's
	// --unschedulable-grace: the crawler starts on another node, once (a second such
	// move within the minimum move interval waits for a person).
	MoveNodeUnschedulable MoveReason = "NodeUnschedulable"
	// MoveOverbooked: the crawler's node held more than it has (reservations written by a
	// manager replica that had lost its lease, or by hand), and this crawler's VM, the
	// youngest reservation there, moves to a node the model chose.
	MoveOverbooked MoveReason = "Overbooked"
)

// MoveMode is how a move is carried out.
// +kubebuilder:validation:Enum=Live;Cold
type MoveMode string

const (
	// MoveLive: a live migration of the running VMI (the same VMI, one stop-and-copy
	// pause of the guest).
	MoveLive MoveMode = "Live"
	// MoveCold: the VMI restarts on the new node (it does not run, or KubeVirt reports it
	// not live-migratable).
	MoveCold MoveMode = "Cold"
)

// MoveResult is how a move ended.
// +kubebuilder:validation:Enum=Succeeded;Failed
type MoveResult string

const (
	// MoveSucceeded: the crawler runs on the node it moved to.
	MoveSucceeded MoveResult = "Succeeded"
	// MoveFailed: the migration failed or was aborted; the crawler runs where it ran, and
	// the move is tried again after a backoff while its reason holds.
	MoveFailed MoveResult = "Failed"
)

// Move is a move of the crawler from one node to another.
type Move struct {
	// reason is why the crawler moves: Refuted, Evacuation, SpecChange, NodeLost,
	// Requested or NodeRejected.
	// +required
	Reason MoveReason `json:"reason,omitempty"`
	// mode is Live (a live migration) or Cold (a restart on the new node).
	// +required
	Mode MoveMode `json:"mode,omitempty"`
	// from is the node the crawler leaves; it holds its reservation there until the move
	// ends.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	From string `json:"from,omitempty"`
	// to is the node the crawler moves to, chosen by the contention model.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	To string `json:"to,omitempty"`
	// migration is the VirtualMachineInstanceMigration that carries out a live move, in
	// the crawler's namespace, once created.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Migration string `json:"migration,omitempty"`
	// startTime is when isochron decided the move.
	// +required
	StartTime metav1.Time `json:"startTime,omitzero"` //nolint:kubeapilinter // requiredfields: the operator always sets it; omitzero omits an unset one, which the API server then refuses.
	// message says why the crawler moves there, and why cold when it does.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`
}

// MoveRecord is how a move ended.
type MoveRecord struct {
	// reason is why the crawler moved: Refuted, Evacuation, SpecChange, NodeLost,
	// Requested or NodeRejected.
	// +required
	Reason MoveReason `json:"reason,omitempty"`
	// mode is Live or Cold.
	// +required
	Mode MoveMode `json:"mode,omitempty"`
	// from is the node the crawler left, or was to leave.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	From string `json:"from,omitempty"`
	// to is the node the crawler moved, or was to move, to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	To string `json:"to,omitempty"`
	// migration is the VirtualMachineInstanceMigration of a live move.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Migration string `json:"migration,omitempty"`
	// result is Succeeded or Failed.
	// +required
	Result MoveResult `json:"result,omitempty"`
	// startTime is when isochron decided the move.
	// +required
	StartTime metav1.Time `json:"startTime,omitzero"` //nolint:kubeapilinter // requiredfields: the operator always sets it; omitzero omits an unset one, which the API server then refuses.
	// endTime is when the move ended.
	// +required
	EndTime metav1.Time `json:"endTime,omitzero"` //nolint:kubeapilinter // requiredfields: the operator always sets it; omitzero omits an unset one, which the API server then refuses.
	// migrationTime is how long KubeVirt's live migration ran, from the start of the
	// transfer to the guest running on the new node (the VMI's migration state); absent
	// for a cold move.
	// +optional
	MigrationTime *metav1.Duration `json:"migrationTime,omitempty"`
	// failures is how many moves in a row, this one included, failed; absent after one
	// that succeeded. It sets the backoff before the next try (retryAfter).
	// +optional
	// +kubebuilder:validation:Minimum=1
	Failures int32 `json:"failures,omitempty"`
	// retryAfter is when a failed move may be tried again.
	// +optional
	RetryAfter *metav1.Time `json:"retryAfter,omitempty"`
	// message says how the move went: what it cost, or why it failed.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`
}

// OutageCause is why a crawler stopped running.
// +kubebuilder:validation:Enum=Crash;Move;Drain;NodeLoss;SpecChange;Unplaceable;Stopped
type OutageCause string

const (
	// OutageCrash: the guest or its VMI failed, or its launcher was killed; KubeVirt
	// started it again.
	OutageCrash OutageCause = "Crash"
	// OutageMove: a move restarted it on another node (a cold move).
	OutageMove OutageCause = "Move"
	// OutageDrain: a drain's move restarted it on another node (a cold move).
	OutageDrain OutageCause = "Drain"
	// OutageNodeLoss: its node was lost; it ran again once the node was fenced and it
	// started elsewhere.
	OutageNodeLoss OutageCause = "NodeLoss"
	// OutageSpecChange: a spec change KubeVirt could not apply to the running VMI
	// restarted it.
	OutageSpecChange OutageCause = "SpecChange"
	// OutageUnplaceable: no node could hold it, or its launcher pod could not be
	// scheduled there or was refused by the API server (a quota, a policy).
	OutageUnplaceable OutageCause = "Unplaceable"
	// OutageStopped: a person stopped it (virtctl stop).
	OutageStopped OutageCause = "Stopped"
)

// Outage is a time the crawler did not run.
type Outage struct {
	// cause is why it stopped: Crash, Move, Drain, NodeLoss, SpecChange, Unplaceable or
	// Stopped.
	// +required
	Cause OutageCause `json:"cause,omitempty"`
	// start is when it stopped running, as KubeVirt and the node report it.
	// +required
	Start metav1.Time `json:"start,omitzero"` //nolint:kubeapilinter // requiredfields: the operator always sets it; omitzero omits an unset one, which the API server then refuses.
	// end is when it ran again; absent while the outage lasts.
	// +optional
	End *metav1.Time `json:"end,omitempty"`
	// duration is end - start, once it ended.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// message says what happened.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// Refutation is a node where a probe refuted the crawler's SLO.
type Refutation struct {
	// node is the node the probe measured the crawler on.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`
	// job is the refuting probe Job.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Job string `json:"job,omitempty"`
	// time is when the probe's result was read.
	// +required
	Time metav1.Time `json:"time,omitzero"` //nolint:kubeapilinter // requiredfields: the operator always sets it; omitzero omits an unset one, which the API server then refuses.
	// intervalError is the interval error the probe measured at the objective percentile.
	// +optional
	IntervalError *metav1.Duration `json:"intervalError,omitempty"`
}

// Sizing is the size chosen for a crawler's VM.
type Sizing struct {
	// vcpus is the number of guest vCPUs.
	// +required
	// +kubebuilder:validation:Minimum=1
	VCPUs int32 `json:"vcpus,omitempty"`
	// hostCPUs is the number of exclusive host CPUs the VM holds: its vCPUs plus the
	// isolated emulator thread; 0 for shared placement.
	// +required
	// +kubebuilder:validation:Minimum=0
	HostCPUs int32 `json:"hostCPUs"`
	// cpuRequest is the CPU the VM's pod requests: a whole number for dedicated
	// placement, the peak demand (a cgroup weight) for shared placement.
	// +required
	CPURequest resource.Quantity `json:"cpuRequest,omitzero"` //nolint:kubeapilinter // requiredfields: sizing never requests less than 100m; omitzero omits an unset one, which the API server then refuses.
	// hugepages is the guest memory in 2Mi hugepages; absent for shared placement.
	// +optional
	Hugepages *resource.Quantity `json:"hugepages,omitempty"`
	// memory is the memory the VM's pod requests for the guest.
	// +required
	Memory resource.Quantity `json:"memory,omitzero"` //nolint:kubeapilinter // requiredfields: at least spec.guest.memory (256Mi); omitzero omits an unset one, which the API server then refuses.
	// vfioMemory is the memory KubeVirt adds to the VM's pod because its RT-NIC is an
	// SR-IOV virtual function passed through with VFIO (1Gi: the guest's memory is locked
	// for DMA, with room for MMIO); placement counts it on the node. Absent for a bridge
	// RT-NIC or none.
	// +optional
	VFIOMemory *resource.Quantity `json:"vfioMemory,omitempty"`
	// supportCPU is the CPU the VM's pod requests for KubeVirt's support containers: one
	// per container disk (the guest's and the probe agent's) and the guest console log's,
	// as the KubeVirt resource's supportContainerResources and virtualMachineOptions set
	// them (their limits for dedicated placement, whose pod is Guaranteed). Placement
	// counts it on the node's shared pool beside cpuRequest. Absent when none.
	// +optional
	SupportCPU *resource.Quantity `json:"supportCPU,omitempty"`
	// supportMemory is the memory the VM's pod requests for the same support containers;
	// placement counts it on the node beside memory. Absent when none.
	// +optional
	SupportMemory *resource.Quantity `json:"supportMemory,omitempty"`
}

// PlacementStatus is the node chosen for a crawler and what is predicted there.
type PlacementStatus struct {
	// node is the name of the chosen node.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`
	// predictedError is the interval error the contention model predicts at the
	// objective percentile, with every crawler on the node (absent until it predicts
	// one).
	// +optional
	PredictedError *metav1.Duration `json:"predictedError,omitempty"`
	// headroom is tolerance minus predictedError; negative when a change on the node
	// (neighbours, a profile, a calibration) pushed the prediction past the tolerance.
	// +optional
	Headroom *metav1.Duration `json:"headroom,omitempty"`
	// correction is the node's calibration from probes that predictedError includes (the
	// contention model's figure times it); absent for none (1). The node's
	// NodeCalibration, or its ContentionProfile's status for a class correction, shows
	// what it rests on.
	// +optional
	Correction Decimal `json:"correction,omitempty"`
}

// VMIStatus names the crawler's VirtualMachineInstance and its phase.
type VMIStatus struct {
	// name is the VirtualMachineInstance's name, in the CrawlerVM's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// phase is the VirtualMachineInstance's phase as KubeVirt reports it (Pending,
	// Scheduling, Scheduled, Running, Succeeded, Failed), for display; the Ready
	// condition is what isochron concludes from it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	Phase string `json:"phase,omitempty"` //nolint:kubeapilinter // nophase: it mirrors KubeVirt's VMI phase for display; the Ready condition is the contract.
}

// CrawlerVM is a real-time crawler VM: isochron sizes it from its request rate and error
// budget, places it on a node where it and every neighbour stay within budget, runs it as
// a KubeVirt VirtualMachineInstance and measures its timing.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cvm,categories=isochron
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 57",message="metadata.name must start with a lower-case letter, hold only lower-case letters, digits and '-', and be at most 57 characters, because isochron names the crawler's probe Service <name>-probe (a DNS label)"
// +kubebuilder:printcolumn:name="RPS",type=integer,JSONPath=`.spec.rps`
// +kubebuilder:printcolumn:name="TOLERANCE",type=string,JSONPath=`.spec.errorBudget.tolerance`
// +kubebuilder:printcolumn:name="NODE",type=string,JSONPath=`.status.placement.node`
// +kubebuilder:printcolumn:name="VCPUS",type=integer,JSONPath=`.status.sizing.vcpus`
// +kubebuilder:printcolumn:name="PREDICTED",type=string,JSONPath=`.status.placement.predictedError`
// +kubebuilder:printcolumn:name="MEASURED",type=string,JSONPath=`.status.lastProbe.intervalError.atObjective`
// +kubebuilder:printcolumn:name="READY",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="SLO",type=string,JSONPath=`.status.conditions[?(@.type=="SLOConfirmed")].status`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.status.placement.node`
// +kubebuilder:selectablefield:JSONPath=`.status.move.from`
type CrawlerVM struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the crawler needs.
	// +required
	Spec CrawlerVMSpec `json:"spec,omitzero"`
	// status is what isochron decided and observed.
	// +optional
	Status CrawlerVMStatus `json:"status,omitempty"` //nolint:kubeapilinter // optionalfields: the status of a Kubernetes object is a value, by convention (the API server resets it on create).
}

// CrawlerVMList is a list of CrawlerVMs.
// +kubebuilder:object:root=true
type CrawlerVMList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CrawlerVM `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &CrawlerVM{}, &CrawlerVMList{})
}
