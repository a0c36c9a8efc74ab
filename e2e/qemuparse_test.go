package e2e

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"isochron.io/isochron/internal/hostsched"
)

// Parsing what readQEMU reads has no build tag: make test runs TestParseQEMU without a
// cluster.

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
			if f[3] == "" {
				// The thread ended between the listing and the reads (QEMU's worker
				// threads come and go), before or after its comm was read ("T|487|||",
				// "T|126|worker||"): nothing of it is left to judge. Its stat is read
				// last; one cut short is an error below.
				continue
			}
			cpus, err := parseCPUList(f[2])
			if err != nil {
				return q, err
			}
			policy, _, err := hostsched.ParseStat(f[3])
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

// parseCPUList parses the kernel's list format, "0-2,5".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	sort.Ints(cpus)
	return cpus, nil
}

// statLine is /proc/<pid>/task/<tid>/stat up to its policy field (41): processor 1,
// rt_priority, policy.
func statLine(tid int, comm string, policy int) string {
	return fmt.Sprintf("%d (%s) S 1 93 93 0 -1 138412224 7 0 0 0 339 263 0 0 20 0 10 0 144166 951676928 15284 18446744073709551615 1 1 0 0 0 0 2147220087 4096 16963 0 0 0 -1 1 %d %d 0 0 0 0", tid, comm, map[bool]int{true: 1}[policy != 0], policy)
}

func TestParseQEMU(t *testing.T) {
	vcpu := "T|103|CPU 0/KVM|1|" + statLine(103, "CPU 0/KVM", 1)
	main := "T|94|qemu-system-x86|2|" + statLine(94, "qemu-system-x86", 0)
	cases := []struct {
		name    string
		out     string
		want    qemuProcess
		wantErr string
	}{{
		name: "vCPU and emulator threads, hugepages",
		out:  strings.Join([]string{"P|94", main, vcpu, "HugetlbPages:\t  262144 kB", ""}, "\n"),
		want: qemuProcess{PID: 94, HugeBytes: 256 << 20, Threads: []qemuThread{
			{TID: 94, Name: "qemu-system-x86", CPUs: []int{2}, Policy: 0},
			{TID: 103, Name: "CPU 0/KVM", CPUs: []int{1}, Policy: 1},
		}},
	}, {
		// A worker thread ended between the listing and its reads (seen on the node VMs:
		// "T|487|||"): it is skipped, not an error.
		name: "a thread that ended while read",
		out:  strings.Join([]string{"P|94", main, "T|487|||", vcpu}, "\n"),
		want: qemuProcess{PID: 94, Threads: []qemuThread{
			{TID: 94, Name: "qemu-system-x86", CPUs: []int{2}, Policy: 0},
			{TID: 103, Name: "CPU 0/KVM", CPUs: []int{1}, Policy: 1},
		}},
	}, {
		// The same after its comm was read (session 16, second whole run: "T|126|worker||"
		// failed the dedicated test).
		name: "a thread that ended after its comm was read",
		out:  strings.Join([]string{"P|94", main, "T|126|worker||", vcpu}, "\n"),
		want: qemuProcess{PID: 94, Threads: []qemuThread{
			{TID: 94, Name: "qemu-system-x86", CPUs: []int{2}, Policy: 0},
			{TID: 103, Name: "CPU 0/KVM", CPUs: []int{1}, Policy: 1},
		}},
	}, {
		name: "a comm with parentheses and spaces",
		out:  "P|5\nT|5|a) (b|0-1|" + statLine(5, "a) (b", 2),
		want: qemuProcess{PID: 5, Threads: []qemuThread{{TID: 5, Name: "a) (b", CPUs: []int{0, 1}, Policy: 2}}},
	}, {
		name:    "a stat cut short",
		out:     "P|94\nT|94|qemu-system-x86|2|94 (qemu-system-x86) S 1 93",
		wantErr: "stat of thread 94",
	}, {
		name:    "no QEMU",
		out:     "HugetlbPages:\t 0 kB\n",
		wantErr: "no QEMU PID or threads",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseQEMU(c.out)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("parseQEMU: error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseQEMU: %v", err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("parseQEMU:\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}
