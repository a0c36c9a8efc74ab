package render

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/model"
	"isochron.io/isochron/internal/sizing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

type cvmOption func(*isov1.CrawlerVM)

func crawler(opts ...cvmOption) *isov1.CrawlerVM {
	c := &isov1.CrawlerVM{
		ObjectMeta: metav1.ObjectMeta{Name: "tower-a", Namespace: "bms", UID: "6f1c2b9e-0000-4000-8000-000000000001"},
		Spec: isov1.CrawlerVMSpec{
			RPS:          400,
			ErrorBudget:  isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 10 * time.Millisecond}, Objective: "99.999"},
			Guest:        isov1.Guest{Image: "quay.io/org/crawler:1", Memory: resource.MustParse("2Gi")},
			CPUPlacement: isov1.CPUPlacementDedicated,
			Placement:    &isov1.Placement{Policy: isov1.PlacementPolicyPack},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func withRTNIC(deadline time.Duration) cvmOption {
	return func(c *isov1.CrawlerVM) {
		c.Spec.RTNIC = &isov1.RTNIC{NetworkName: "bms/rt-net", Deadline: metav1.Duration{Duration: deadline}, MinBandwidth: resource.MustParse("100M")}
	}
}

func withUserData(s string) cvmOption {
	return func(c *isov1.CrawlerVM) { c.Spec.Guest.CloudInitUserData = s }
}

func shared(c *isov1.CrawlerVM) { c.Spec.CPUPlacement = isov1.CPUPlacementShared }

func constrained(c *isov1.CrawlerVM) {
	c.Spec.Placement.NodeSelector = map[string]string{"isochron.io/rt": "true"}
	c.Spec.Placement.Tolerations = []corev1.Toleration{{Key: "isochron.io/rt", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
}

func input(c *isov1.CrawlerVM, b Binding) Input {
	s, err := sizing.Size(&c.Spec, model.DefaultParams())
	if err != nil {
		panic(err)
	}
	return Input{CrawlerVM: c, Sizing: s, Node: "rt-node-1", RTBinding: b}
}

func TestVMIGolden(t *testing.T) {
	cases := map[string]Input{
		"dedicated":                  input(crawler(), ""),
		"dedicated-rtnic-bridge":     input(crawler(withRTNIC(5*time.Millisecond)), BindingBridge),
		"dedicated-rtnic-sriov":      input(crawler(withRTNIC(20*time.Millisecond)), BindingSRIOV),
		"rtnic-with-user-data":       input(crawler(withRTNIC(50*time.Millisecond), withUserData("#cloud-config\npackages: [chrony]\n")), BindingBridge),
		"user-data-passed-unchanged": input(crawler(withUserData("#cloud-config\npackages: [chrony]\n")), ""),
		"shared":                     input(crawler(shared), ""),
		"selector-and-tolerations":   input(crawler(constrained), ""),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			vmi, err := VMI(in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := YAML(vmi)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", name+".yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/render -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("VMI %s (-want +got):\n%s", name, diff)
			}
		})
	}
}

func TestVMIIsDeterministic(t *testing.T) {
	in := input(crawler(withRTNIC(5*time.Millisecond), constrained, withUserData("#!/bin/sh\necho hi\n")), BindingBridge)
	first, _ := VMI(in)
	a, _ := YAML(first)
	for i := 0; i < 20; i++ {
		v, _ := VMI(in)
		b, _ := YAML(v)
		if string(a) != string(b) {
			t.Fatalf("rendering %d differs:\n%s", i, cmp.Diff(string(a), string(b)))
		}
	}
}

// A running VMI is replaced when what it was rendered from changes, and only then: a
// VMI that an older release rendered differently from the same inputs keeps running.
func TestCompare(t *testing.T) {
	base := func() *isov1.CrawlerVM {
		return crawler(withRTNIC(5*time.Millisecond), constrained, withUserData("#cloud-config\nruncmd: [crawler]\n"))
	}
	rendered := func(c *isov1.CrawlerVM, b Binding) *kubevirtv1.VirtualMachineInstance {
		v, err := VMI(input(c, b))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// legacy is a VMI as a release before the inputs hash rendered it: no hash, and a
	// rendering that differs in what the inputs do not decide (here isochron's own
	// cloud-init part, a script of an older release).
	legacy := func(c *isov1.CrawlerVM, b Binding) *kubevirtv1.VirtualMachineInstance {
		v := rendered(c, b)
		delete(v.Annotations, isov1.AnnotationVMIInputs)
		for i := range v.Spec.Volumes {
			if ci := v.Spec.Volumes[i].CloudInitNoCloud; ci != nil {
				ci.UserData = strings.Replace(ci.UserData, "if command -v nft", "# an older release's script\nif command -v nft", 1)
			}
		}
		return v
	}
	cases := map[string]struct {
		running *kubevirtv1.VirtualMachineInstance
		now     Input
		want    Fit
	}{
		"same inputs": {running: rendered(base(), BindingBridge), now: input(base(), BindingBridge), want: Current},
		"another size": {
			running: rendered(base(), BindingBridge),
			now:     input(func() *isov1.CrawlerVM { c := base(); c.Spec.RPS = 1000; return c }(), BindingBridge),
			want:    Outdated,
		},
		"the user's cloud-init changed": {
			running: rendered(base(), BindingBridge),
			now:     input(func() *isov1.CrawlerVM { c := base(); c.Spec.Guest.CloudInitUserData = "#cloud-config\n"; return c }(), BindingBridge),
			want:    Outdated,
		},
		"another binding": {running: rendered(base(), BindingBridge), now: input(base(), BindingSRIOV), want: Outdated},
		"an older release's VMI of the same inputs is adopted": {running: legacy(base(), BindingBridge), now: input(base(), BindingBridge), want: Adopt},
		"an older release's shared VMI is adopted": {
			running: legacy(crawler(shared), ""), now: input(crawler(shared), ""), want: Adopt,
		},
		"an older release's VMI with the user's data alone is adopted": {
			running: legacy(crawler(withUserData("#!/bin/sh\necho hi")), ""), now: input(crawler(withUserData("#!/bin/sh\necho hi")), ""), want: Adopt,
		},
		"an older release's VMI of another image is replaced": {
			running: legacy(base(), BindingBridge),
			now:     input(func() *isov1.CrawlerVM { c := base(); c.Spec.Guest.Image = "quay.io/org/crawler:2"; return c }(), BindingBridge),
			want:    Outdated,
		},
		"an older release's VMI on another node is replaced": {
			running: legacy(base(), BindingBridge),
			now:     func() Input { in := input(base(), BindingBridge); in.Node = "elsewhere"; return in }(),
			want:    Outdated,
		},
		"an older release's VMI of another DSCP class is replaced": {
			running: legacy(base(), BindingBridge), now: input(crawler(withRTNIC(50*time.Millisecond), constrained, withUserData("#cloud-config\nruncmd: [crawler]\n")), BindingBridge), want: Outdated,
		},
		"an older release's VMI of other user data is replaced": {
			running: legacy(base(), BindingBridge),
			now:     input(func() *isov1.CrawlerVM { c := base(); c.Spec.Guest.CloudInitUserData = ""; return c }(), BindingBridge),
			want:    Outdated,
		},
		"an older release's VMI without the RT-NIC now asked for is replaced": {
			running: legacy(crawler(constrained, withUserData("#cloud-config\nruncmd: [crawler]\n")), ""), now: input(base(), BindingBridge), want: Outdated,
		},
		"an older release's VMI with tolerations no longer wanted is replaced": {
			running: legacy(base(), BindingBridge),
			now:     input(func() *isov1.CrawlerVM { c := base(); c.Spec.Placement.Tolerations = nil; return c }(), BindingBridge),
			want:    Outdated,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Compare(tc.running, tc.now); got != tc.want {
				t.Errorf("Compare = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVMIErrors(t *testing.T) {
	cases := map[string]struct {
		in   Input
		want string
	}{
		"no node": {
			in:   Input{CrawlerVM: crawler()},
			want: "no node chosen",
		},
		"user data too long with the RT-NIC part": {
			in:   input(crawler(withRTNIC(5*time.Millisecond), withUserData("#cloud-config\n"+strings.Repeat("#", 1900))), BindingBridge),
			want: "over KubeVirt's 2048-byte limit",
		},
		"user data carrying our boundary": {
			in:   input(crawler(withRTNIC(5*time.Millisecond), withUserData("#!/bin/sh\n# "+mimeBoundary+"\n")), BindingBridge),
			want: "contains isochron's MIME boundary",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := VMI(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("VMI() error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The largest user data the API accepts still fits KubeVirt's limit with our part.
func TestLargestAcceptedUserDataFits(t *testing.T) {
	user := "#cloud-config\n" + strings.Repeat("#", 1024-len("#cloud-config\n"))
	if _, err := VMI(input(crawler(withRTNIC(5*time.Millisecond), withUserData(user)), BindingBridge)); err != nil {
		t.Fatal(err)
	}
}

func TestDSCPForDeadline(t *testing.T) {
	cases := map[time.Duration]string{
		time.Millisecond: "EF", 5 * time.Millisecond: "EF", 5*time.Millisecond + 1: "AF41",
		20 * time.Millisecond: "AF41", 100 * time.Millisecond: "AF31", time.Second: "AF21",
	}
	for d, want := range cases {
		if got := DSCPForDeadline(d).Name; got != want {
			t.Errorf("DSCPForDeadline(%v) = %s, want %s", d, got, want)
		}
	}
}

func TestMACIsLocallyAdministeredUnicast(t *testing.T) {
	mac := MAC(crawler())
	if !strings.HasPrefix(mac, "02:") || len(mac) != 17 {
		t.Errorf("MAC() = %q", mac)
	}
}
