package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ContentionProfileSpec calibrates the contention model for the nodes it selects. Every
// parameter is optional: an unset one keeps the built-in default, which reproduces the
// measurement studies (docs/contention-model.md lists each default and its source).
type ContentionProfileSpec struct {
	// nodeSelector selects the nodes this profile describes; an empty one ({}) selects
	// every node.
	// +required
	NodeSelector metav1.LabelSelector `json:"nodeSelector"` //nolint:kubeapilinter // requiredfields: {} (every node) is a valid choice the user must still write; the value type serialises it, so no pointer is needed.

	// precedence orders profiles that select the same node: the highest wins, and names
	// break ties. Default 0.
	// +optional
	// +kubebuilder:validation:Minimum=-1000
	// +kubebuilder:validation:Maximum=1000
	Precedence int32 `json:"precedence,omitempty"` //nolint:kubeapilinter // optionalfields: unset means 0, the default; no pointer needed to tell them apart.

	// crawler describes the crawler's CPU demand.
	// +optional
	Crawler *CrawlerProfile `json:"crawler,omitempty"`

	// host describes the node's scheduler and host I/O path.
	// +optional
	Host *HostProfile `json:"host,omitempty"`

	// nic describes the node NIC that RT-NICs share.
	// +optional
	NIC *NICProfile `json:"nic,omitempty"`
}

// CrawlerProfile is the crawler's CPU demand.
type CrawlerProfile struct {
	// cpuPerRequest is the CPU time one request costs the crawler, greater than 0 and at
	// most 10s (default 1400us).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('10s')",message="crawler.cpuPerRequest must be greater than 0 and at most 10s, for example 1400us"
	CPUPerRequest *metav1.Duration `json:"cpuPerRequest,omitempty"`

	// peakFactor1s is the crawler's CPU demand at the objective percentile over 1 s
	// windows divided by its mean, a decimal >= 1 (default "1.1").
	// +optional
	// +kubebuilder:validation:XValidation:rule="double(self) >= 1.0 && double(self) <= 100.0",message="crawler.peakFactor1s must be a decimal from 1 to 100, for example \"1.1\""
	PeakFactor1s Decimal `json:"peakFactor1s,omitempty"`

	// peakExponent is how fast the peak factor grows as the window shrinks:
	// F(w) = 1 + (peakFactor1s - 1) x (1s/w)^peakExponent, a decimal in (0, 4] (default "0.5").
	// +optional
	// +kubebuilder:validation:XValidation:rule="double(self) > 0.0 && double(self) <= 4.0",message="crawler.peakExponent must be a decimal greater than 0 and at most 4, for example \"0.5\""
	PeakExponent Decimal `json:"peakExponent,omitempty"`

	// peakFactorMax caps the peak factor at short windows, a decimal >= 1 (default "4").
	// +optional
	// +kubebuilder:validation:XValidation:rule="double(self) >= 1.0 && double(self) <= 1000.0",message="crawler.peakFactorMax must be a decimal from 1 to 1000, for example \"4\""
	PeakFactorMax Decimal `json:"peakFactorMax,omitempty"`

	// targetUtilisation is the share of its vCPUs a crawler's peak may use, a decimal in
	// (0, 1] (default "0.7").
	// +optional
	// +kubebuilder:validation:XValidation:rule="double(self) > 0.0 && double(self) <= 1.0",message="crawler.targetUtilisation must be a decimal greater than 0 and at most 1, for example \"0.7\""
	TargetUtilisation Decimal `json:"targetUtilisation,omitempty"`

	// overloadPenalty is what a request pays at the objective percentile once the peak
	// exceeds the vCPUs, on top of the overload episode, greater than 0 and at most 1m
	// (default 200ms).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('1m')",message="crawler.overloadPenalty must be greater than 0 and at most 1m, for example 200ms"
	OverloadPenalty *metav1.Duration `json:"overloadPenalty,omitempty"`
}

// HostProfile is the node's scheduler and host I/O path.
type HostProfile struct {
	// ioCostPerRequest is the CPU the host I/O path (vhost and emulator threads) spends
	// per crawler request, greater than 0 and at most 10s (default 300us).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('10s')",message="host.ioCostPerRequest must be greater than 0 and at most 10s, for example 300us"
	IOCostPerRequest *metav1.Duration `json:"ioCostPerRequest,omitempty"`

	// schedulerGranularity is how long a runnable vCPU waits for a CPU when the shared
	// pool is oversubscribed: the scheduler's timeslice, greater than 0 and at most 10s
	// (default 30ms, Xen's credit scheduler in the BMS crawler study).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('10s')",message="host.schedulerGranularity must be greater than 0 and at most 10s, for example 30ms"
	SchedulerGranularity *metav1.Duration `json:"schedulerGranularity,omitempty"`

	// reservedCPUs are the CPUs the host I/O path and housekeeping run on (kubelet
	// reservedSystemCPUs). Default: the node's CPU capacity minus its allocatable CPUs,
	// or 1 when they are equal.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="host.reservedCPUs must be positive, for example 2 or 500m"
	ReservedCPUs *resource.Quantity `json:"reservedCPUs,omitempty"`

	// ioIsolated is true when the host I/O path has its reserved CPUs to itself; false
	// (the default) when its threads compete with shared vCPUs.
	// +optional
	IOIsolated bool `json:"ioIsolated,omitempty"` //nolint:kubeapilinter // optionalfields: unset means false, the default; no pointer needed to tell them apart.
}

// NICProfile is the node NIC that RT-NICs share.
type NICProfile struct {
	// capacity is the NIC bandwidth available to RT-NICs, in bits per second (default 1G).
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="nic.capacity must be a positive number of bits per second, for example 10G"
	Capacity *resource.Quantity `json:"capacity,omitempty"`

	// linkRate is the link rate of the deadline test, in bits per second (default 1G).
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="nic.linkRate must be a positive number of bits per second, for example 10G"
	LinkRate *resource.Quantity `json:"linkRate,omitempty"`

	// bestEffortPacketBits is one best-effort packet a real-time one may wait behind, in
	// bits (default 12000: a 1500-byte MTU).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	BestEffortPacketBits int64 `json:"bestEffortPacketBits,omitempty"`

	// requestBits is what one crawler request puts on the RT-NIC, in bits (default 16000).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000000
	RequestBits int64 `json:"requestBits,omitempty"`
}

// ContentionProfileStatus is the class calibration: what probes on every node the
// profile selects measured against the model with its parameters.
type ContentionProfileStatus struct {
	// conditions are Calibrated: True when the class's samples make a class correction
	// (reason EnoughNamespaces), False when they do not (TooFewNamespaces: the message
	// says how many namespaces there are and how many are needed).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the profile generation the calibration is of; a correction
	// of an earlier generation is not applied.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// correction is the class correction, from the latest samples of every node of the
	// class (their NodeCalibrations) pooled: each namespace's samples give one value,
	// the median of their ratios (a namespace with crawlers on many nodes still counts
	// once), and the correction is the median of those values, bounded to [0.5, 4]. A
	// node whose own samples are from fewer than 3 namespaces takes it. Absent with
	// samples from fewer than 3 namespaces in the class.
	// +optional
	Correction Decimal `json:"correction,omitempty"`
	// samples is how many samples the correction rests on.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Samples *int32 `json:"samples,omitempty"`
	// nodes is how many of the class's nodes have samples.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Nodes *int32 `json:"nodes,omitempty"`
	// namespaces is how many namespaces the samples are from; the class correction
	// needs 3.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Namespaces *int32 `json:"namespaces,omitempty"`
}

// ContentionProfile calibrates isochron's contention model for a class of nodes.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cprof,categories=isochron
// +kubebuilder:printcolumn:name="PRECEDENCE",type=integer,JSONPath=`.spec.precedence`
// +kubebuilder:printcolumn:name="CORRECTION",type=string,JSONPath=`.status.correction`
// +kubebuilder:printcolumn:name="NAMESPACES",type=integer,JSONPath=`.status.namespaces`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type ContentionProfile struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec selects nodes and sets the model's parameters for them.
	// +required
	Spec ContentionProfileSpec `json:"spec"` //nolint:kubeapilinter // requiredfields: its zero value, nodeSelector {} (every node), is a valid profile; see NodeSelector.

	// status is the class calibration isochron derives from probes.
	// +optional
	Status ContentionProfileStatus `json:"status,omitempty"` //nolint:kubeapilinter // optionalfields: the status of a Kubernetes object is a value, by convention.
}

// ContentionProfileList is a list of ContentionProfiles.
// +kubebuilder:object:root=true
type ContentionProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ContentionProfile `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &ContentionProfile{}, &ContentionProfileList{})
}
