// Package hostsched reads how the host schedules a KubeVirt domain's vCPU threads (under
// /proc) and decides which of a realtime crawler's vCPUs are due for the policy KubeVirt's
// realtime asks for: SCHED_FIFO, priority 1.
//
// KubeVirt 1.8.4's virt-handler sets that policy only in the sync pass that finds the VMI
// not yet Running (pkg/hypervisor/kvm/runtime.go, HandleHousekeeping): when the domain's
// first start outlasts that pass's 20 s deadline and the VMI is Running by the next one,
// its vCPUs stay SCHED_OTHER for the VMI's life. docs/availability.md.
package hostsched

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Scheduling policies (sched(7)).
const (
	PolicyOther = 0
	PolicyFIFO  = 1
	PolicyRR    = 2
)

// RealtimePriority is the SCHED_FIFO priority KubeVirt gives a realtime VMI's vCPUs.
const RealtimePriority = 1

// PolicyName is the kernel's name of a scheduling policy.
func PolicyName(p int) string {
	switch p {
	case PolicyOther:
		return "SCHED_OTHER"
	case PolicyFIFO:
		return "SCHED_FIFO"
	case PolicyRR:
		return "SCHED_RR"
	case 3:
		return "SCHED_BATCH"
	case 5:
		return "SCHED_IDLE"
	case 6:
		return "SCHED_DEADLINE"
	}
	return "policy " + strconv.Itoa(p)
}

// Thread is one vCPU thread of a domain's QEMU.
type Thread struct {
	TID int
	// Name is its comm, "CPU 0/KVM".
	Name     string
	Policy   int
	Priority int
}

func (t Thread) String() string {
	return fmt.Sprintf("%s (TID %d, %s priority %d)", t.Name, t.TID, PolicyName(t.Policy), t.Priority)
}

// vCPUName is KubeVirt's pattern for the vCPU threads it makes realtime
// (pkg/hypervisor/kvm/realtime.go VcpuRegex): QEMU's "CPU <n>/KVM". A guest under
// software emulation ("CPU 0/TCG") is none of KubeVirt's realtime, nor of isochron's.
var vCPUName = regexp.MustCompile(`^CPU [0-9]+/KVM$`)

// ErrNoDomain is returned by VCPUs when no QEMU under proc runs the domain (not on this
// node, or not started yet).
var ErrNoDomain = errors.New("no QEMU runs the domain")

// VCPUs finds the QEMU that runs domain (KubeVirt's "<namespace>_<VMI name>", QEMU's
// "-name guest=<domain>,...") under proc, a /proc file system, and reads its vCPU threads.
// A thread that ends while it is read is left out.
func VCPUs(proc fs.FS, domain string) (pid int, vcpus []Thread, err error) {
	entries, err := fs.ReadDir(proc, ".")
	if err != nil {
		return 0, nil, fmt.Errorf("listing /proc: %w", err)
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := fs.ReadFile(proc, path.Join(e.Name(), "cmdline"))
		if err != nil || !runs(cmdline, domain) {
			continue
		}
		pid = p
		break
	}
	if pid == 0 {
		return 0, nil, fmt.Errorf("%w %s", ErrNoDomain, domain)
	}
	tasks, err := fs.ReadDir(proc, path.Join(strconv.Itoa(pid), "task"))
	if err != nil {
		return 0, nil, fmt.Errorf("listing the threads of QEMU %d: %w", pid, err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		dir := path.Join(strconv.Itoa(pid), "task", t.Name())
		comm, err := fs.ReadFile(proc, path.Join(dir, "comm"))
		if err != nil {
			continue // ended
		}
		name := strings.TrimSuffix(string(comm), "\n")
		if !vCPUName.MatchString(name) {
			continue
		}
		stat, err := fs.ReadFile(proc, path.Join(dir, "stat"))
		if err != nil {
			continue // ended
		}
		policy, prio, err := ParseStat(string(stat))
		if err != nil {
			return 0, nil, fmt.Errorf("thread %d of QEMU %d: %w", tid, pid, err)
		}
		vcpus = append(vcpus, Thread{TID: tid, Name: name, Policy: policy, Priority: prio})
	}
	slices.SortFunc(vcpus, func(a, b Thread) int { return a.TID - b.TID })
	return pid, vcpus, nil
}

// runs tells whether cmdline (NUL-separated) is a QEMU's that runs domain.
func runs(cmdline []byte, domain string) bool {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) == 0 || !strings.HasPrefix(path.Base(args[0]), "qemu-") {
		return false
	}
	for i := 1; i+1 < len(args); i++ {
		if args[i] != "-name" {
			continue
		}
		for _, opt := range strings.Split(args[i+1], ",") {
			if opt == "guest="+domain {
				return true
			}
		}
	}
	return false
}

// ParseStat reads the scheduling policy (field 41) and realtime priority (field 40) of a
// /proc/<pid>/task/<tid>/stat line. The comm (field 2) may hold spaces and parentheses:
// the fields are counted from its last closing parenthesis.
func ParseStat(stat string) (policy, priority int, err error) {
	i := strings.LastIndex(stat, ") ")
	if i < 0 {
		return 0, 0, fmt.Errorf("stat %q: no comm", stat)
	}
	f := strings.Fields(stat[i+2:])
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 41-3+1 {
		return 0, 0, fmt.Errorf("stat %q: %d fields, want 41 or more", stat, len(f)+2)
	}
	if priority, err = strconv.Atoi(f[40-3]); err != nil {
		return 0, 0, fmt.Errorf("stat: rt_priority %q: %w", f[40-3], err)
	}
	if policy, err = strconv.Atoi(f[41-3]); err != nil {
		return 0, 0, fmt.Errorf("stat: policy %q: %w", f[41-3], err)
	}
	return policy, priority, nil
}

// Realtime tells whether a vCPU thread has what KubeVirt's realtime gives it.
func Realtime(t Thread) bool { return t.Policy == PolicyFIFO && t.Priority >= RealtimePriority }

// Verdict is what Due decides at one look at a realtime domain's vCPU threads.
type Verdict struct {
	// Due are the threads to be made realtime now.
	Due []Thread
	// Since is when the longest-waiting of them was first seen not realtime.
	Since time.Time
	// Seen holds when each thread not realtime (by TID) was first seen so: the since of
	// the next look.
	Seen map[int]time.Time
}

// Due decides which of a realtime domain's vCPUs are to be made realtime now: those seen
// without SCHED_FIFO for grace or longer. since holds when each thread was first seen so
// at earlier looks (Verdict.Seen of the last one); threads realtime again or gone are
// forgotten. The grace leaves KubeVirt its own start (it sets the policy seconds after
// the domain runs) and a migration's target its handover.
func Due(since map[int]time.Time, vcpus []Thread, now time.Time, grace time.Duration) Verdict {
	v := Verdict{Seen: map[int]time.Time{}}
	for _, t := range vcpus {
		if Realtime(t) {
			continue
		}
		first, ok := since[t.TID]
		if !ok {
			first = now
		}
		v.Seen[t.TID] = first
		if now.Sub(first) >= grace {
			if len(v.Due) == 0 || first.Before(v.Since) {
				v.Since = first
			}
			v.Due = append(v.Due, t)
		}
	}
	return v
}
