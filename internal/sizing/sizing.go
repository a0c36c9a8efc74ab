// Package sizing decides how big a crawler's VM must be. It is pure: plain values in,
// plain values out, no client and no clock.
//
// The rule (until the contention model of docs/contention-model.md replaces it) follows
// the BMS crawler study: the crawler's CPU demand is proportional to its request rate
// (about 1.4 ms of CPU per request: 140% of one CPU at 1,000 rps), its short-window peaks
// are about twice its 1 s average, and vCPUs are sized so that the peak stays under a
// target utilisation:
//
//	vcpus = max(1, ceil(rps × cpuPerRequest × peakFactor / targetUtilisation))
//
// With the defaults this gives 4 vCPUs at 1,000 rps (the study's bare-metal-equivalent
// size), 3 at 700 rps (where 1 vCPU failed) and 1 at 100 rps.
package sizing

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// HugepageSize is the page size that backs dedicated crawlers' memory.
const HugepageSize = 2 << 20

// Params are the calibrated constants of the sizing rule.
type Params struct {
	// CPUPerRequest is the CPU time one request costs the crawler.
	CPUPerRequest time.Duration
	// PeakFactor is the ratio of the peak demand at the tolerance window to the 1 s mean.
	PeakFactor float64
	// TargetUtilisation is the share of its vCPUs the peak may use.
	TargetUtilisation float64
}

// DefaultParams reproduce the BMS crawler study's crawler.
func DefaultParams() Params {
	return Params{CPUPerRequest: 1400 * time.Microsecond, PeakFactor: 2.0, TargetUtilisation: 0.7}
}

// Result is the size of one crawler VM.
type Result struct {
	// VCPUs is the number of guest vCPUs.
	VCPUs int32
	// HostCPUs is the number of exclusive host CPUs: vCPUs plus the emulator thread for
	// dedicated placement, 0 for shared.
	HostCPUs int32
	// CPURequestMilli is the pod's CPU request in millicores.
	CPURequestMilli int64
	// MemoryBytes is the memory the pod requests for the guest.
	MemoryBytes int64
	// HugepagesBytes is the guest memory in hugepages (0 for shared placement).
	HugepagesBytes int64
}

// Dedicated reports whether the crawler holds exclusive host CPUs.
func (r Result) Dedicated() bool { return r.HostCPUs > 0 }

// Size returns the size of the crawler described by spec.
func Size(spec *isov1.CrawlerVMSpec, p Params) (Result, error) {
	if spec.RPS < 1 {
		return Result{}, fmt.Errorf("spec.rps must be at least 1, got %d", spec.RPS)
	}
	mem := spec.Guest.Memory.Value()
	if mem <= 0 {
		return Result{}, fmt.Errorf("spec.guest.memory must be positive, got %s", spec.Guest.Memory.String())
	}
	peakCPUs := float64(spec.RPS) * p.CPUPerRequest.Seconds() * p.PeakFactor
	vcpus := int32(math.Max(1, math.Ceil(peakCPUs/p.TargetUtilisation)))

	if spec.CPUPlacement == isov1.CPUPlacementShared {
		// Shares, not priorities, protect a VM (KVM cgroups study): request the peak as the
		// cgroup weight, at least 100m so an idle crawler still has a real share.
		milli := int64(math.Max(100, math.Ceil(peakCPUs*1000)))
		return Result{VCPUs: vcpus, CPURequestMilli: milli, MemoryBytes: mem}, nil
	}
	pages := RoundUpToPage(mem)
	return Result{
		VCPUs:           vcpus,
		HostCPUs:        vcpus + 1, // the isolated emulator thread gets its own CPU
		CPURequestMilli: int64(vcpus) * 1000,
		MemoryBytes:     pages,
		HugepagesBytes:  pages,
	}, nil
}

// RoundUpToPage rounds bytes up to a whole number of hugepages.
func RoundUpToPage(bytes int64) int64 {
	return (bytes + HugepageSize - 1) / HugepageSize * HugepageSize
}

// Status converts r into the CrawlerVM status form.
func (r Result) Status() *isov1.Sizing {
	s := &isov1.Sizing{
		VCPUs:      r.VCPUs,
		HostCPUs:   r.HostCPUs,
		CPURequest: *resource.NewMilliQuantity(r.CPURequestMilli, resource.DecimalSI),
		Memory:     *resource.NewQuantity(r.MemoryBytes, resource.BinarySI),
	}
	if r.HugepagesBytes > 0 {
		s.Hugepages = resource.NewQuantity(r.HugepagesBytes, resource.BinarySI)
	}
	return s
}
