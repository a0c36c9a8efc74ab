package sizing

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	"isochron.io/isochron/internal/model"
)

const (
	dedicated = true
	shared    = false
)

func demand(rps int32, dedicated bool, mem string) Demand {
	m := resource.MustParse(mem)
	return Demand{RPS: rps, Tolerance: 10 * time.Millisecond, Objective: 99.999, Dedicated: dedicated, MemoryBytes: m.Value()}
}

func withNIC(d Demand, vfio bool) Demand {
	d.NIC = &model.NICFlow{Deadline: 20 * time.Millisecond, MinBandwidthBitsPerSecond: 10_000_000}
	d.VFIO = vfio
	return d
}

func TestSize(t *testing.T) {
	const gi = int64(1) << 30
	cases := map[string]struct {
		demand Demand
		want   Result
	}{
		"1000 rps dedicated needs 4 vCPUs like bare metal in the BMS study": {
			demand: demand(1000, dedicated, "2Gi"),
			want:   Result{VCPUs: 4, HostCPUs: 5, CPURequestMilli: 4000, MemoryBytes: 2 * gi, HugepagesBytes: 2 * gi},
		},
		"700 rps, where 1 vCPU failed, gets 3": {
			demand: demand(700, dedicated, "1Gi"),
			want:   Result{VCPUs: 3, HostCPUs: 4, CPURequestMilli: 3000, MemoryBytes: gi, HugepagesBytes: gi},
		},
		"100 rps gets 1 vCPU and an emulator CPU": {
			demand: demand(100, dedicated, "256Mi"),
			want:   Result{VCPUs: 1, HostCPUs: 2, CPURequestMilli: 1000, MemoryBytes: 256 << 20, HugepagesBytes: 256 << 20},
		},
		"memory rounds up to a whole 2Mi page": {
			demand: demand(1, dedicated, "1000Mi"),
			want:   Result{VCPUs: 1, HostCPUs: 2, CPURequestMilli: 1000, MemoryBytes: 1000 << 20, HugepagesBytes: 1000 << 20},
		},
		"decimal megabytes round up: 257M is 245.1Mi": {
			demand: demand(1, dedicated, "257M"),
			want:   Result{VCPUs: 1, HostCPUs: 2, CPURequestMilli: 1000, MemoryBytes: 246 << 20, HugepagesBytes: 246 << 20},
		},
		"shared requests its peak as a weight and holds no exclusive CPU": {
			demand: demand(400, shared, "1Gi"),
			want:   Result{VCPUs: 2, CPURequestMilli: 1120, MemoryBytes: gi},
		},
		"an idle shared crawler still requests 100m": {
			demand: demand(1, shared, "1Gi"),
			want:   Result{VCPUs: 1, CPURequestMilli: 100, MemoryBytes: gi},
		},
		"an SR-IOV RT-NIC holds KubeVirt's 1Gi for VFIO": {
			demand: withNIC(demand(100, dedicated, "256Mi"), true),
			want:   Result{VCPUs: 1, HostCPUs: 2, CPURequestMilli: 1000, MemoryBytes: 256 << 20, HugepagesBytes: 256 << 20, VFIOBytes: gi},
		},
		"shared, with an SR-IOV RT-NIC, too": {
			demand: withNIC(demand(1, shared, "1Gi"), true),
			want:   Result{VCPUs: 1, CPURequestMilli: 100, MemoryBytes: gi, VFIOBytes: gi},
		},
		"a bridge RT-NIC holds none": {
			demand: withNIC(demand(100, dedicated, "256Mi"), false),
			want:   Result{VCPUs: 1, HostCPUs: 2, CPURequestMilli: 1000, MemoryBytes: 256 << 20, HugepagesBytes: 256 << 20},
		},
		"VFIO without an RT-NIC holds none": {
			demand: func() Demand { d := demand(100, dedicated, "256Mi"); d.VFIO = true; return d }(),
			want:   Result{VCPUs: 1, HostCPUs: 2, CPURequestMilli: 1000, MemoryBytes: 256 << 20, HugepagesBytes: 256 << 20},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Size(tc.demand, model.DefaultParams())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Size() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSizeNeverShrinksWithRPS(t *testing.T) {
	prev := int32(0)
	for rps := int32(1); rps <= 100000; rps += 97 {
		got, err := Size(demand(rps, dedicated, "1Gi"), model.DefaultParams())
		if err != nil {
			t.Fatal(err)
		}
		if got.VCPUs < prev {
			t.Fatalf("vCPUs fell from %d to %d at %d rps", prev, got.VCPUs, rps)
		}
		prev = got.VCPUs
	}
}

func TestSizeRejectsNonsense(t *testing.T) {
	if _, err := Size(demand(0, dedicated, "1Gi"), model.DefaultParams()); err == nil {
		t.Error("rps 0 accepted")
	}
	if _, err := Size(demand(10, dedicated, "0"), model.DefaultParams()); err == nil {
		t.Error("memory 0 accepted")
	}
}

// A launcher pod requests its guest's memory unless hugepages back it, and KubeVirt's
// overhead either way (test/kubevirt checks the overhead against KubeVirt's code).
func TestPodMemoryBytes(t *testing.T) {
	const mi = int64(1) << 20
	ded, err := Size(demand(1000, dedicated, "1Gi"), model.DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	shr, err := Size(demand(400, shared, "1Gi"), model.DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	// 1Gi of guest: 2,097,152 bytes of page tables; 220Mi of processes; 8Mi per vCPU and
	// for the IO thread; 32Mi of video; 100Mi for dedicated CPUs.
	if got, want := LauncherOverheadBytes(ded), 2097152+(220+4*8+8+32+100)*mi; got != want {
		t.Errorf("dedicated 4 vCPUs: overhead %d, want %d", got, want)
	}
	if got, want := ded.PodMemoryBytes(), LauncherOverheadBytes(ded); got != want {
		t.Errorf("dedicated (hugepages): pod memory %d, want the overhead alone %d", got, want)
	}
	if got, want := shr.PodMemoryBytes(), 1024*mi+2097152+(220+2*8+8+32)*mi; got != want {
		t.Errorf("shared 2 vCPUs: pod memory %d, want %d", got, want)
	}
	vfio := ded
	vfio.VFIOBytes = VFIOOverheadBytes
	if got, want := vfio.PodMemoryBytes(), ded.PodMemoryBytes()+1024*mi; got != want {
		t.Errorf("dedicated with an SR-IOV RT-NIC: pod memory %d, want %d (1Gi more for VFIO)", got, want)
	}
}
