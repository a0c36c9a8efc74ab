package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeCalibrationStatus is what probes measured on one node against what the contention
// model predicted there, and the correction isochron derives from it
// (docs/contention-model.md, "Recalibration").
type NodeCalibrationStatus struct {
	// conditions are Calibrated: True when the samples make a correction of the node's
	// own (reason EnoughNamespaces), False when they do not (TooFewNamespaces: the
	// message says how many namespaces there are and how many are needed).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// profile is the ContentionProfile whose parameters the samples' predictions used;
	// absent for the built-in defaults. A sample of another profile, or of another
	// generation of it, is dropped: it measured a different model.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Profile string `json:"profile,omitempty"`
	// profileGeneration is the generation of the profile the samples' predictions used.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ProfileGeneration int64 `json:"profileGeneration,omitempty"`
	// samples are the latest conclusive probes (Confirmed or Refuted) of crawlers on the
	// node, newest first: the 3 newest of each namespace, of the 5 namespaces whose
	// newest sample is newest, so at most 15. A namespace that probes often keeps only
	// its own 3 and never pushes another namespace's out.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=15
	Samples []CalibrationSample `json:"samples,omitempty"`
	// namespaces is how many namespaces the samples are from; the node's own correction
	// needs 3.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=5
	Namespaces *int32 `json:"namespaces,omitempty"`
	// correction is the node's own correction, which multiplies every prediction on the
	// node: each namespace's samples give one value, the median of their ratios, and the
	// correction is the median of those values (of an even count, the middle one nearer
	// 1), bounded to [0.5, 4]. Absent with samples from fewer than 3 namespaces (the node
	// then takes its class's correction, if its profile has one): no namespace moves it
	// alone.
	// +optional
	Correction Decimal `json:"correction,omitempty"`
}

// CalibrationSample is one conclusive probe of a crawler on a node.
type CalibrationSample struct {
	// job is the probe Job, in the crawler's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Job string `json:"job,omitempty"`
	// crawler is the CrawlerVM probed, as namespace/name.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=317
	Crawler string `json:"crawler,omitempty"`
	// time is when the probe's result was read.
	// +required
	Time metav1.Time `json:"time,omitzero"` //nolint:kubeapilinter // requiredfields: the operator always sets it; omitzero omits an unset one, which the API server then refuses.
	// measured is the interval error the probe measured at the crawler's objective
	// percentile.
	// +required
	Measured metav1.Duration `json:"measured"`
	// predicted is the contention model's prediction for the crawler, with what the node
	// held when the result was read, before any correction.
	// +required
	Predicted metav1.Duration `json:"predicted"`
	// ratio is measured over predicted, each raised to a tenth of the crawler's tolerance
	// first.
	// +required
	Ratio Decimal `json:"ratio,omitempty"`
}

// NodeCalibration holds, for one node (of the same name), the probe results isochron's
// contention model is recalibrated from. isochron writes it; it is deleted with its Node.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ncal,categories=isochron
// +kubebuilder:printcolumn:name="CORRECTION",type=string,JSONPath=`.status.correction`
// +kubebuilder:printcolumn:name="NAMESPACES",type=integer,JSONPath=`.status.namespaces`
// +kubebuilder:printcolumn:name="PROFILE",type=string,JSONPath=`.status.profile`
// +kubebuilder:printcolumn:name="MEASURED",type=string,JSONPath=`.status.samples[0].measured`
// +kubebuilder:printcolumn:name="PREDICTED",type=string,JSONPath=`.status.samples[0].predicted`
// +kubebuilder:printcolumn:name="LAST",type=date,JSONPath=`.status.samples[0].time`
type NodeCalibration struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// status is the node's samples and correction.
	// +optional
	Status NodeCalibrationStatus `json:"status,omitempty"` //nolint:kubeapilinter // optionalfields: the status of a Kubernetes object is a value, by convention.
}

// NodeCalibrationList is a list of NodeCalibrations.
// +kubebuilder:object:root=true
type NodeCalibrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeCalibration `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &NodeCalibration{}, &NodeCalibrationList{})
}
