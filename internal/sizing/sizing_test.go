package sizing

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/model"
)

func spec(rps int32, placement isov1.CPUPlacement, mem string) *isov1.CrawlerVMSpec {
	return &isov1.CrawlerVMSpec{
		RPS:          rps,
		ErrorBudget:  isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}, Objective: "99.999"},
		CPUPlacement: placement,
		Guest:        isov1.Guest{Image: "img", Memory: resource.MustParse(mem)},
	}
}

func TestSize(t *testing.T) {
	const gi = int64(1) << 30
	cases := map[string]struct {
		spec *isov1.CrawlerVMSpec
		want Result
	}{
		"1000 rps dedicated needs 4 vCPUs like bare metal in the BMS study": {
			spec: spec(1000, isov1.CPUPlacementDedicated, "2Gi"),
			want: Result{VCPUs: 4, HostCPUs: 5, CPURequestMilli: 4000, MemoryBytes: 2 * gi, HugepagesBytes: 2 * gi},
		},
		"700 rps, where 1 vCPU failed, gets 3": {
			spec: spec(700, isov1.CPUPlacementDedicated, "1Gi"),
			want: Result{VCPUs: 3, HostCPUs: 4, CPURequestMilli: 3000, MemoryBytes: gi, HugepagesBytes: gi},
		},
		"100 rps gets 1 vCPU and an emulator CPU": {
			spec: spec(100, isov1.CPUPlacementDedicated, "256Mi"),
			want: Result{VCPUs: 1, HostCPUs: 2, CPURequestMilli: 1000, MemoryBytes: 256 << 20, HugepagesBytes: 256 << 20},
		},
		"memory rounds up to a whole 2Mi page": {
			spec: spec(1, isov1.CPUPlacementDedicated, "1000Mi"),
			want: Result{VCPUs: 1, HostCPUs: 2, CPURequestMilli: 1000, MemoryBytes: 1000 << 20, HugepagesBytes: 1000 << 20},
		},
		"decimal megabytes round up: 257M is 245.1Mi": {
			spec: spec(1, isov1.CPUPlacementDedicated, "257M"),
			want: Result{VCPUs: 1, HostCPUs: 2, CPURequestMilli: 1000, MemoryBytes: 246 << 20, HugepagesBytes: 246 << 20},
		},
		"shared requests its peak as a weight and holds no exclusive CPU": {
			spec: spec(400, isov1.CPUPlacementShared, "1Gi"),
			want: Result{VCPUs: 2, CPURequestMilli: 1120, MemoryBytes: gi},
		},
		"an idle shared crawler still requests 100m": {
			spec: spec(1, isov1.CPUPlacementShared, "1Gi"),
			want: Result{VCPUs: 1, CPURequestMilli: 100, MemoryBytes: gi},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Size(tc.spec, model.DefaultParams())
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
		got, err := Size(spec(rps, isov1.CPUPlacementDedicated, "1Gi"), model.DefaultParams())
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
	if _, err := Size(spec(0, isov1.CPUPlacementDedicated, "1Gi"), model.DefaultParams()); err == nil {
		t.Error("rps 0 accepted")
	}
	if _, err := Size(spec(10, isov1.CPUPlacementDedicated, "0"), model.DefaultParams()); err == nil {
		t.Error("memory 0 accepted")
	}
}
