// Package model is isochron's contention model: how many vCPUs a crawler needs, and the
// measurement-interval error at the objective percentile of every crawler on a node given
// all the crawlers placed there together. It is pure: plain values in, plain values out,
// no client, no clock, no randomness. docs/contention-model.md gives the equations, their
// derivation and the source of every default.
//
// A prediction is the sum of four delays a request meets in series:
//
//	error = headroom + contention + hostIO + nic
//
// headroom is the crawler's own vCPUs against its peak demand at the tolerance window;
// contention is the wait for a physical CPU when the shared pool holds more runnable
// vCPUs and host I/O threads than CPUs; hostIO is the queue on the host's I/O path, whose
// load is the node's total request rate; nic is the worst-case queueing on the RT-NIC
// under strict priority by deadline.
package model

import (
	"math"
	"sort"
	"time"
)

// Unbounded is the error reported when a queue has no steady state (its load is 1 or
// more) or a resource is missing altogether; every error is capped at it.
const Unbounded = time.Hour

// DefaultObjective is the objective percentile used when a workload gives none.
const DefaultObjective = 99.999

// The causes a Prediction names: the term that dominates its error.
const (
	CauseVCPUHeadroom  = "vcpu-headroom"
	CauseCPUContention = "cpu-contention"
	CauseHostIO        = "host-io"
	CauseNICBandwidth  = "nic-bandwidth"
	CauseNICDeadline   = "nic-deadline"
)

// Params are the calibrated constants of one node class (a ContentionProfile overrides
// them). A zero (or negative) field takes its DefaultParams value, so a profile sets only
// what it measured.
type Params struct {
	// CPUPerRequest is the crawler's CPU time per request.
	CPUPerRequest time.Duration
	// PeakFactor1s, PeakExponent and PeakFactorMax define the peak-to-average curve: the
	// crawler's CPU demand at the objective percentile over a window w, divided by its 1 s
	// mean, is
	//	F(w) = min(PeakFactorMax, 1 + (PeakFactor1s-1) × (1s/w)^PeakExponent × z(objective)/z(99.999))
	// (z is the standard normal quantile), so F never falls as w shrinks.
	PeakFactor1s  float64
	PeakExponent  float64
	PeakFactorMax float64
	// TargetUtilisation is the share of its vCPUs the sizing lets the peak use.
	TargetUtilisation float64
	// OverloadPenalty is what a request pays at the objective percentile, on top of the
	// overload episode itself, once the crawler's peak exceeds its vCPUs.
	OverloadPenalty time.Duration
	// HostIOCostPerRequest is the CPU the host's I/O path (vhost and emulator threads,
	// Xen's Dom0) spends per request.
	HostIOCostPerRequest time.Duration
	// SchedulerGranularity is how long a runnable-but-not-running vCPU waits for a CPU
	// (the scheduler's timeslice; Xen credit: 30 ms).
	SchedulerGranularity time.Duration
	// HostReservedCPUs are the CPUs the host I/O path and housekeeping run on (kubelet
	// reservedSystemCPUs, Xen's Dom0 vCPUs).
	HostReservedCPUs float64
	// HostIOIsolated is true when the host I/O path has its HostReservedCPUs to itself (Dom0
	// pinned with hard affinity, CPUs no vCPU may use). False (the default, and the BMS
	// study's host) means its threads compete with the shared vCPUs for the shared pool.
	HostIOIsolated bool
	// NICCapacityBitsPerSecond is the node NIC capacity available to RT-NICs.
	NICCapacityBitsPerSecond int64
	// LinkRateBitsPerSecond is the link rate of the deadline test.
	LinkRateBitsPerSecond int64
	// BestEffortPacketBits is one MTU-sized best-effort packet, which a real-time packet
	// may find in transmission.
	BestEffortPacketBits int64
	// RequestBits is what one crawler request puts on the RT-NIC.
	RequestBits int64
}

// DefaultParams reproduce the measurement studies (docs/contention-model.md, "Parameters"):
// the BMS crawler study's crawler and Xen host, and the RTvNIC study's 1 Gbit/s NIC.
func DefaultParams() Params {
	return Params{
		CPUPerRequest:            1400 * time.Microsecond,
		PeakFactor1s:             1.1,
		PeakExponent:             0.5,
		PeakFactorMax:            4,
		TargetUtilisation:        0.7,
		OverloadPenalty:          200 * time.Millisecond,
		HostIOCostPerRequest:     300 * time.Microsecond,
		SchedulerGranularity:     30 * time.Millisecond,
		HostReservedCPUs:         1,
		HostIOIsolated:           false,
		NICCapacityBitsPerSecond: 1_000_000_000,
		LinkRateBitsPerSecond:    1_000_000_000,
		BestEffortPacketBits:     12_000,
		RequestBits:              16_000,
	}
}

// WithDefaults fills every unset field from DefaultParams and clamps the rest into range.
func (p Params) WithDefaults() Params {
	d := DefaultParams()
	dur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	num := func(v *float64, def float64) {
		if !(*v > 0) || math.IsInf(*v, 0) { // also NaN
			*v = def
		}
	}
	i64 := func(v *int64, def int64) {
		if *v <= 0 {
			*v = def
		}
	}
	dur(&p.CPUPerRequest, d.CPUPerRequest)
	num(&p.PeakFactor1s, d.PeakFactor1s)
	num(&p.PeakExponent, d.PeakExponent)
	num(&p.PeakFactorMax, d.PeakFactorMax)
	num(&p.TargetUtilisation, d.TargetUtilisation)
	dur(&p.OverloadPenalty, d.OverloadPenalty)
	dur(&p.HostIOCostPerRequest, d.HostIOCostPerRequest)
	dur(&p.SchedulerGranularity, d.SchedulerGranularity)
	num(&p.HostReservedCPUs, d.HostReservedCPUs)
	i64(&p.NICCapacityBitsPerSecond, d.NICCapacityBitsPerSecond)
	i64(&p.LinkRateBitsPerSecond, d.LinkRateBitsPerSecond)
	i64(&p.BestEffortPacketBits, d.BestEffortPacketBits)
	i64(&p.RequestBits, d.RequestBits)
	p.PeakFactor1s = math.Max(1, p.PeakFactor1s)
	p.PeakFactorMax = math.Max(p.PeakFactor1s, p.PeakFactorMax)
	p.TargetUtilisation = math.Min(1, p.TargetUtilisation)
	return p
}

// NICFlow is a workload's RT-NIC.
type NICFlow struct {
	// Deadline is the flow's maximum transfer delay; 0 means none (the flow then only
	// counts against the NIC's capacity).
	Deadline time.Duration
	// MinBandwidthBitsPerSecond is the bandwidth the flow is guaranteed.
	MinBandwidthBitsPerSecond int64
	// Raise is how many classes the NIC agent's feedback raised the flow above its
	// deadline's class (rtnet.ForDeadline).
	Raise int
}

// Workload is one crawler VM as the model sees it.
type Workload struct {
	// Key is namespace/name.
	Key string
	// RPS is the crawler's request rate.
	RPS int32
	// Tolerance is the interval-error budget.
	Tolerance time.Duration
	// Objective is the percentile the budget must hold at, e.g. 99.999; 0 means
	// DefaultObjective.
	Objective float64
	// VCPUs is the VM's vCPU count as sized.
	VCPUs int32
	// Dedicated is true for exclusive pinned CPUs (+ an isolated emulator thread CPU),
	// false for the node's shared pool.
	Dedicated bool
	// HostCPUs is the number of exclusive CPUs a dedicated workload holds; 0 means
	// HostCPUs(VCPUs, false). Ignored for shared workloads.
	HostCPUs int32
	// NIC is the workload's RT-NIC, nil for none.
	NIC *NICFlow
}

// Node is the host the workloads share.
type Node struct {
	// CPUs is what the node gives to VMs and the host: the physical CPUs of the study's
	// host, a Kubernetes node's CPU capacity.
	CPUs float64
	// Params are the node class's calibrated constants.
	Params Params
	// Correction multiplies every prediction's error on the node: what probes measured
	// there against the model (package calibration). 0 means 1.
	Correction float64
}

// Terms are the delays that make up a prediction, each at the objective percentile.
type Terms struct {
	// Headroom is the crawler's own vCPUs against its peak demand.
	Headroom time.Duration
	// Contention is the wait for a physical CPU: the vCPU's own (shared placement) plus the
	// host I/O path's when its threads compete in an oversubscribed shared pool.
	Contention time.Duration
	// HostIO is the queueing on the host I/O path.
	HostIO time.Duration
	// NIC is the worst-case queueing on the RT-NIC.
	NIC time.Duration
}

// Prediction is the predicted interval error of one workload on a node.
type Prediction struct {
	Key string
	// Error is the predicted interval error at the objective percentile: Uncorrected
	// times the node's Correction.
	Error time.Duration
	// Uncorrected is the sum of the Terms, before the node's correction.
	Uncorrected time.Duration
	// Correction is the node's correction that Error includes (1 for none).
	Correction float64
	// Cause is the dominant term: vcpu-headroom, cpu-contention, host-io, nic-bandwidth or
	// nic-deadline.
	Cause string
	// Within is true when Error is within the tolerance and the RT-NIC (if any) is
	// feasible.
	Within bool
	// Message is one line a person can act on, naming the term and its figures.
	Message string
	// Terms are the delays Error sums.
	Terms Terms
}

// PeakFactor is F(window): the crawler's CPU demand at the objective percentile over
// window, divided by its 1 s mean. It never decreases as window shrinks.
func PeakFactor(window time.Duration, objective float64, p Params) float64 {
	return peakFactor(window, objective, p.WithDefaults())
}

// peakFactor is PeakFactor for Params that already have their defaults.
func peakFactor(window time.Duration, objective float64, p Params) float64 {
	if window <= 0 {
		return p.PeakFactorMax
	}
	a := (p.PeakFactor1s - 1) * zScale(objective)
	f := 1 + a*math.Pow(float64(time.Second)/float64(window), p.PeakExponent)
	return math.Min(p.PeakFactorMax, math.Max(1, f))
}

// PeakCPUs is the crawler's CPU demand, in CPUs, at the objective percentile over a
// window equal to tolerance.
func PeakCPUs(rps int32, tolerance time.Duration, objective float64, p Params) float64 {
	p = p.WithDefaults()
	return meanCPUs(rps, p) * peakFactor(tolerance, objective, p)
}

// Size returns the vCPUs a crawler needs: its peak demand at a window equal to the
// tolerance, over the target utilisation, at least 1. It never decreases with rps or
// with a tighter tolerance.
func Size(rps int32, tolerance time.Duration, objective float64, p Params) int32 {
	p = p.WithDefaults()
	// The epsilon keeps float noise (1.4000000000000001 CPUs) from adding a vCPU.
	v := math.Ceil(meanCPUs(rps, p)*peakFactor(tolerance, objective, p)/p.TargetUtilisation - 1e-9)
	switch {
	case !(v >= 1):
		return 1
	case v > math.MaxInt32:
		return math.MaxInt32
	}
	return int32(v)
}

// HostCPUs is the number of exclusive host CPUs a dedicated VM holds: its vCPUs and the
// isolated emulator thread, rounded up to an even count when KubeVirt's AlignCPUs is on
// (so +2 instead of +1 when vcpus is even).
func HostCPUs(vcpus int32, alignCPUs bool) int32 {
	n := vcpus + 1
	if alignCPUs && n%2 != 0 {
		n++
	}
	return n
}

// Predict returns the interval error at its objective percentile of every workload on
// the node, given all of them together, sorted by Key.
func Predict(n Node, ws []Workload) []Prediction { return predict(n, ws, true) }

// Evaluate is Predict without the messages: the same Error, Cause, Within and Terms at a
// fraction of the cost, for placement's inner loop over candidate nodes. Call Predict for
// the node whose outcome is reported.
func Evaluate(n Node, ws []Workload) []Prediction { return predict(n, ws, false) }

func predict(n Node, ws []Workload, messages bool) []Prediction {
	s := newNodeState(n, ws)
	out := make([]Prediction, len(ws))
	for i := range ws {
		out[i] = s.predict(i, &ws[i], headroom(&ws[i], s.p), messages)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// objectiveOf returns the objective percentile clamped to [50, 100) and the tail
// probability 1-q it leaves.
func objectiveOf(objective float64) (pct, tail float64) {
	switch {
	case !(objective > 0) || math.IsInf(objective, 0):
		objective = DefaultObjective
	case objective < 50:
		objective = 50
	case objective > 100-1e-7:
		objective = 100 - 1e-7
	}
	return objective, (100 - objective) / 100
}

// zScale is z(objective)/z(DefaultObjective), the standard normal quantiles' ratio.
func zScale(objective float64) float64 {
	pct, _ := objectiveOf(objective)
	if pct == DefaultObjective {
		return 1
	}
	return normalQuantile(pct/100) / normalQuantile(DefaultObjective/100)
}

func normalQuantile(q float64) float64 { return math.Sqrt2 * math.Erfinv(2*q-1) }

func meanCPUs(rps int32, p Params) float64 {
	return math.Max(0, float64(rps)) * p.CPUPerRequest.Seconds()
}

// seconds converts a non-negative delay in seconds to a Duration, capped at Unbounded.
func seconds(x float64) time.Duration {
	if !(x < Unbounded.Seconds()) { // also NaN and +Inf
		return Unbounded
	}
	if x <= 0 {
		return 0
	}
	return time.Duration(x * float64(time.Second))
}
