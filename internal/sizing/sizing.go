// Package sizing decides how big a crawler's VM must be, on a node class described by
// contention-model parameters. It is pure: plain values in, plain values out.
//
// vCPUs come from the contention model (internal/model.Size): the crawler's peak CPU
// demand at a window equal to its tolerance, under a target utilisation. A dedicated VM
// holds its vCPUs plus one exclusive CPU for the isolated emulator thread, and its memory
// in 2Mi hugepages; a shared VM requests its peak demand as a CPU weight.
package sizing

import (
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/api/resource"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/model"
)

// HugepageSize is the page size that backs dedicated crawlers' memory.
const HugepageSize = 2 << 20

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

// Size returns the size of the crawler described by spec on a node class with params p.
func Size(spec *isov1.CrawlerVMSpec, p model.Params) (Result, error) {
	if spec.RPS < 1 {
		return Result{}, fmt.Errorf("spec.rps must be at least 1, got %d", spec.RPS)
	}
	mem := spec.Guest.Memory.Value()
	if mem <= 0 {
		return Result{}, fmt.Errorf("spec.guest.memory must be positive, got %s", spec.Guest.Memory.String())
	}
	tol, obj := spec.ErrorBudget.Tolerance.Duration, spec.ErrorBudget.ObjectivePercent()
	vcpus := model.Size(spec.RPS, tol, obj, p)

	if spec.CPUPlacement == isov1.CPUPlacementShared {
		// Shares, not priorities, protect a VM (KVM cgroups study): request the peak as the
		// cgroup weight, at least 100m so an idle crawler still has a real share.
		milli := int64(math.Max(100, math.Ceil(model.PeakCPUs(spec.RPS, tol, obj, p)*1000-1e-6))) // -1e-6: float noise
		return Result{VCPUs: vcpus, CPURequestMilli: milli, MemoryBytes: mem}, nil
	}
	pages := RoundUpToPage(mem)
	return Result{
		VCPUs:           vcpus,
		HostCPUs:        model.HostCPUs(vcpus, false),
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
