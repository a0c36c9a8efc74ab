//go:build e2e

package e2e

import (
	"encoding/xml"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

// qemuThread is one thread of a guest's QEMU, read under /proc in its compute container.
type qemuThread struct {
	TID  int
	Name string
	CPUs []int
	// Policy is the thread's scheduling policy (sched(7)): 0 SCHED_OTHER, 1 SCHED_FIFO,
	// 2 SCHED_RR.
	Policy int
}

// vCPUThread matches QEMU's name for a vCPU thread: "CPU 0/KVM", "CPU 1/TCG".
var vCPUThread = regexp.MustCompile(`^CPU [0-9]+/`)

// qemuProcess is what the domain runs as, read from inside the compute container of a
// virt-launcher pod: the QEMU's PID, its threads and the bytes of hugetlb pages it maps
// (HugetlbPages in its status: its smaps is not readable, QEMU is not dumpable).
type qemuProcess struct {
	PID       int
	Threads   []qemuThread
	HugeBytes int64
}

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

// parseQEMU parses readQEMU's script output.
func parseQEMU(out string) (qemuProcess, error) {
	var q qemuProcess
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "P|"):
			q.PID, _ = strconv.Atoi(line[2:])
		case strings.HasPrefix(line, "T|"):
			f := strings.SplitN(line[2:], "|", 4)
			if len(f) != 4 {
				return q, fmt.Errorf("thread line %q", line)
			}
			tid, err := strconv.Atoi(f[0])
			if err != nil {
				return q, fmt.Errorf("thread line %q: %w", line, err)
			}
			cpus, err := parseCPUList(f[2])
			if err != nil {
				return q, err
			}
			// stat: "tid (comm) state ...": the policy is field 41, the 39th after the
			// comm's closing parenthesis (the comm may hold spaces and parentheses).
			_, rest, ok := cutLast(f[3], ") ")
			fields := strings.Fields(rest)
			if !ok || len(fields) < 39 {
				return q, fmt.Errorf("stat of thread %d: %q", tid, f[3])
			}
			policy, err := strconv.Atoi(fields[38])
			if err != nil {
				return q, fmt.Errorf("stat of thread %d: %w", tid, err)
			}
			q.Threads = append(q.Threads, qemuThread{TID: tid, Name: f[1], CPUs: cpus, Policy: policy})
		case strings.HasPrefix(line, "HugetlbPages:"):
			f := strings.Fields(line)
			if len(f) != 3 || f[2] != "kB" {
				return q, fmt.Errorf("status line %q", line)
			}
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return q, fmt.Errorf("status line %q: %w", line, err)
			}
			q.HugeBytes = kb << 10
		}
	}
	if q.PID == 0 || len(q.Threads) == 0 {
		return q, fmt.Errorf("no QEMU PID or threads")
	}
	return q, nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// vCPUs and emulator split q's threads into its vCPU threads and the rest (the main
// loop, I/O and RCU threads: what KubeVirt's isolated emulator thread pins).
func (q qemuProcess) vCPUs() (vcpus, emulator []qemuThread) {
	for _, th := range q.Threads {
		if vCPUThread.MatchString(th.Name) {
			vcpus = append(vcpus, th)
		} else {
			emulator = append(emulator, th)
		}
	}
	return vcpus, emulator
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
