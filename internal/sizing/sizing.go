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
	"time"

	"isochron.io/isochron/internal/model"
)

// HugepageSize is the page size that backs dedicated crawlers' memory.
const HugepageSize = 2 << 20

// Demand is what a crawler asks for, in plain values: a CrawlerVM's spec converted once
// (inventory.Demand), its objective parsed.
type Demand struct {
	// RPS is the crawler's request rate (spec.rps).
	RPS int32
	// Tolerance is the interval-error budget (spec.errorBudget.tolerance).
	Tolerance time.Duration
	// Objective is the percentile the budget must hold at, e.g. 99.999.
	Objective float64
	// Dedicated is set for exclusive pinned CPUs (spec.cpuPlacement dedicated).
	Dedicated bool
	// MemoryBytes is the guest's memory (spec.guest.memory).
	MemoryBytes int64
	// NIC is the RT-NIC's flow (spec.rtNIC), nil for none.
	NIC *model.NICFlow
	// VFIO is set when the RT-NIC is an SR-IOV virtual function passed through with
	// VFIO (its NetworkAttachmentDefinition says so), for which KubeVirt locks the guest's
	// memory and adds VFIOOverheadBytes to the pod.
	VFIO bool
	// Support is what the launcher's support containers request (SupportConfig.Requests
	// for the crawler's placement and its containerDisk volumes).
	Support Resources
}

// VFIOOverheadBytes is what KubeVirt v1.8 adds to a virt-launcher pod's memory request
// for a VMI with a VFIO device (an SR-IOV interface): the locked guest memory's MMIO
// space, 1Gi.
const VFIOOverheadBytes = 1 << 30

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
	// VFIOBytes is the memory KubeVirt adds to the pod for VFIO (VFIOOverheadBytes for an
	// SR-IOV RT-NIC, 0 otherwise).
	VFIOBytes int64
	// SupportCPUMilli and SupportMemoryBytes are what the pod requests for KubeVirt's
	// support containers (Demand.Support), from the node's shared pool and its memory.
	SupportCPUMilli, SupportMemoryBytes int64
}

// PodMemoryBytes is what the crawler's virt-launcher pod requests of its node's memory:
// the guest's memory unless hugepages back it, and KubeVirt's overhead and support
// containers in every case (LauncherOverheadBytes, SupportMemoryBytes).
func (r Result) PodMemoryBytes() int64 {
	overhead := LauncherOverheadBytes(r) + r.SupportMemoryBytes
	if r.HugepagesBytes > 0 {
		return overhead
	}
	return r.MemoryBytes + overhead
}

// PodCPUMilli is what the crawler's virt-launcher pod requests of its node's CPU: its
// exclusive host CPUs (dedicated) or its shared request, and its support containers'.
func (r Result) PodCPUMilli() int64 {
	own := r.CPURequestMilli
	if r.Dedicated() {
		own = int64(r.HostCPUs) * 1000
	}
	return own + r.SupportCPUMilli
}

// LauncherOverheadBytes is the memory KubeVirt v1.8 adds to a virt-launcher pod's request
// beyond the guest's, for the VMIs isochron renders (x86, no probes, no TPM, the default
// video device; the kvm backend's GetMemoryOverhead): page tables (a byte per 512 of
// guest memory, counted in kB), 220Mi for virt-launcher-monitor, virt-launcher, virtlogd,
// virtqemud and qemu, 8Mi per vCPU and 8Mi for the IO thread, 32Mi of video RAM, and 100Mi
// more for dedicated CPUs, and 1Gi for an SR-IOV RT-NIC (VFIO). test/kubevirt checks it
// against KubeVirt's own GetMemoryOverhead.
func LauncherOverheadBytes(r Result) int64 {
	const mi = 1 << 20
	kilo := (r.MemoryBytes + 999) / 1000 // resource.Quantity.ScaledValue(Kilo) rounds up
	overhead := kilo*1000/512 + 220*mi + int64(max(r.VCPUs, 1))*8*mi + 8*mi + 32*mi
	if r.Dedicated() {
		overhead += 100 * mi
	}
	return overhead + r.VFIOBytes
}

// Dedicated reports whether the crawler holds exclusive host CPUs.
func (r Result) Dedicated() bool { return r.HostCPUs > 0 }

// Size returns the size of the crawler that demands d on a node class with params p.
func Size(d Demand, p model.Params) (Result, error) {
	if d.RPS < 1 {
		return Result{}, fmt.Errorf("spec.rps must be at least 1, got %d", d.RPS)
	}
	mem := d.MemoryBytes
	if mem <= 0 {
		return Result{}, fmt.Errorf("spec.guest.memory must be positive, got %d bytes", mem)
	}
	vcpus := model.Size(d.RPS, d.Tolerance, d.Objective, p)
	var vfio int64
	if d.VFIO && d.NIC != nil {
		vfio = VFIOOverheadBytes
	}

	if !d.Dedicated {
		// Shares, not priorities, protect a VM (KVM cgroups study): request the peak as the
		// cgroup weight, at least 100m so an idle crawler still has a real share.
		milli := int64(math.Max(100, math.Ceil(model.PeakCPUs(d.RPS, d.Tolerance, d.Objective, p)*1000-1e-6))) // -1e-6: float noise
		return Result{VCPUs: vcpus, CPURequestMilli: milli, MemoryBytes: mem, VFIOBytes: vfio,
			SupportCPUMilli: d.Support.CPUMilli, SupportMemoryBytes: d.Support.MemoryBytes}, nil
	}
	pages := RoundUpToPage(mem)
	return Result{
		VCPUs:              vcpus,
		HostCPUs:           model.HostCPUs(vcpus, false),
		CPURequestMilli:    int64(vcpus) * 1000,
		MemoryBytes:        pages,
		HugepagesBytes:     pages,
		VFIOBytes:          vfio,
		SupportCPUMilli:    d.Support.CPUMilli,
		SupportMemoryBytes: d.Support.MemoryBytes,
	}, nil
}

// RoundUpToPage rounds bytes up to a whole number of hugepages.
func RoundUpToPage(bytes int64) int64 {
	return (bytes + HugepageSize - 1) / HugepageSize * HugepageSize
}
