//go:build e2e

package e2e

import (
	"encoding/xml"
	"os/exec"
	"strings"
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

// readQEMU reads the guest's QEMU in the compute container of pod.
func readQEMU(t *testing.T, ns, pod string) qemuProcess {
	t.Helper()
	// One line per thread, "T|tid|comm|cpus|stat", then its status' HugetlbPages.
	script := `for d in /proc/[0-9]*; do if tr '\0' ' ' < $d/cmdline 2>/dev/null | grep -q '^/usr/[a-z]*/qemu-system'; then p=${d#/proc/}; break; fi; done
[ -n "$p" ] || { echo "no QEMU process" >&2; exit 1; }
echo "P|$p"
for t in /proc/$p/task/*; do
  echo "T|${t##*/}|$(cat $t/comm)|$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' $t/status)|$(cat $t/stat)"
done
grep '^HugetlbPages:' /proc/$p/status`
	args := []string{"exec", "-n", ns, pod, "-c", "compute", "--", "sh", "-c", script}
	out, err := exec.Command(kubectl, args...).Output()
	if err != nil {
		t.Fatalf("reading QEMU's threads: kubectl %s: %v%s", strings.Join(args[:6], " "), err, stderrOf(err))
	}
	q, err := parseQEMU(string(out))
	if err != nil {
		t.Fatalf("reading QEMU's threads in %s/%s: %v\n%s", ns, pod, err, out)
	}
	return q
}

// domain is what libvirt's XML of a running domain says of its CPUs and memory.
type domain struct {
	// VCPUPins are the CPUs each vCPU is pinned to, by vCPU.
	VCPUPins map[int][]int
	// EmulatorPin is the CPUs the emulator is pinned to.
	EmulatorPin []int
	// HugePageSize is the size of the pages backing the memory ("2048 KiB"), empty for
	// none.
	HugePageSize string
}

// readDomain reads the domain XML of vmi from libvirt in the compute container of its
// launcher pod (virsh, on KubeVirt's virtqemud socket).
func readDomain(t *testing.T, vmi *kubevirtv1.VirtualMachineInstance, pod string) domain {
	t.Helper()
	args := []string{"exec", "-n", vmi.Namespace, pod, "-c", "compute", "--", "virsh", "-c", "qemu+unix:///session?socket=/var/run/libvirt/virtqemud-sock", "dumpxml", vmi.Namespace + "_" + vmi.Name}
	out, err := exec.Command(kubectl, args...).Output()
	if err != nil {
		t.Fatalf("reading the domain XML: kubectl %s: %v%s", strings.Join(args, " "), err, stderrOf(err))
	}
	d, err := parseDomain(out)
	if err != nil {
		t.Fatalf("the domain XML of %s: %v", vmi.Name, err)
	}
	return d
}

func parseDomain(b []byte) (domain, error) {
	var x struct {
		CPUTune struct {
			VCPUPins []struct {
				VCPU   int    `xml:"vcpu,attr"`
				CPUSet string `xml:"cpuset,attr"`
			} `xml:"vcpupin"`
			EmulatorPin *struct {
				CPUSet string `xml:"cpuset,attr"`
			} `xml:"emulatorpin"`
		} `xml:"cputune"`
		MemoryBacking struct {
			Pages []struct {
				Size string `xml:"size,attr"`
				Unit string `xml:"unit,attr"`
			} `xml:"hugepages>page"`
		} `xml:"memoryBacking"`
	}
	if err := xml.Unmarshal(b, &x); err != nil {
		return domain{}, err
	}
	d := domain{VCPUPins: map[int][]int{}}
	for _, p := range x.CPUTune.VCPUPins {
		cpus, err := parseCPUList(p.CPUSet)
		if err != nil {
			return d, err
		}
		d.VCPUPins[p.VCPU] = cpus
	}
	if e := x.CPUTune.EmulatorPin; e != nil {
		cpus, err := parseCPUList(e.CPUSet)
		if err != nil {
			return d, err
		}
		d.EmulatorPin = cpus
	}
	if len(x.MemoryBacking.Pages) > 0 {
		d.HugePageSize = x.MemoryBacking.Pages[0].Size + " " + x.MemoryBacking.Pages[0].Unit
	}
	return d, nil
}
