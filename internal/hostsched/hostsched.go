// Package hostsched reads how the host schedules a KubeVirt domain's vCPU threads (under
// /proc), taking only the threads of the QEMU in the compute container of the VMI's own
// virt-launcher pod (Launcher, InContainer), and decides which of a realtime crawler's vCPUs are due for the policy KubeVirt's
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

// ErrNoDomain is returned by VCPUs when no QEMU of the launcher runs the domain under
// proc (not on this node, or not started yet).
var ErrNoDomain = errors.New("no QEMU runs the domain")

// Launcher is what proves a QEMU is a crawler's: the domain it runs (KubeVirt's
// "<namespace>_<VMI name>", QEMU's "-name guest=<domain>,..."), and the pod and container
// it must run in: the UID of the VMI's virt-launcher pod and the ID of that pod's compute
// container, as the kubelet reports it ("containerd://<id>" or the bare ID). Any pod can
// name a process "qemu-..." with "-name guest=<any domain>" and a thread "CPU 0/KVM"; no
// pod can put a process into another pod's container cgroup.
type Launcher struct {
	Domain      string
	PodUID      string
	ContainerID string
}

func (l Launcher) String() string {
	return fmt.Sprintf("domain %s in container %s of pod %s", l.Domain, containerIDWithoutScheme(l.ContainerID), l.PodUID)
}

// VCPUs finds the QEMU that runs l's domain in l's container under proc, a /proc file
// system, and reads its vCPU threads. A process or thread whose cgroup is not l's
// container's is never taken, whatever its name (InContainer). A thread that ends while
// it is read is left out.
func VCPUs(proc fs.FS, l Launcher) (pid int, vcpus []Thread, err error) {
	if l.Domain == "" || l.PodUID == "" || containerIDWithoutScheme(l.ContainerID) == "" {
		return 0, nil, fmt.Errorf("%w %s: no launcher pod and container to prove it by", ErrNoDomain, l.Domain)
	}
	entries, err := fs.ReadDir(proc, ".")
	if err != nil {
		return 0, nil, fmt.Errorf("listing /proc: %w", err)
	}
	impostors := 0
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := fs.ReadFile(proc, path.Join(e.Name(), "cmdline"))
		if err != nil || !runs(cmdline, l.Domain) {
			continue
		}
		cgroup, err := fs.ReadFile(proc, path.Join(e.Name(), "cgroup"))
		if err != nil || !InContainer(string(cgroup), l.PodUID, l.ContainerID) {
			impostors++
			continue
		}
		pid = p
		break
	}
	if pid == 0 {
		if impostors > 0 {
			return 0, nil, fmt.Errorf("%w %s: %d process(es) name themselves so outside the launcher's container, none in it", ErrNoDomain, l, impostors)
		}
		return 0, nil, fmt.Errorf("%w %s", ErrNoDomain, l)
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
		// Each thread's own cgroup too: under cgroup v1 a thread can be moved apart from
		// its process.
		cgroup, err := fs.ReadFile(proc, path.Join(dir, "cgroup"))
		if err != nil || !InContainer(string(cgroup), l.PodUID, l.ContainerID) {
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

// containerIDWithoutScheme is a container ID without the runtime's scheme ("containerd://").
func containerIDWithoutScheme(id string) string {
	if _, after, ok := strings.Cut(id, "://"); ok {
		return after
	}
	return id
}

// InContainer tells whether a /proc/<pid>/cgroup (or task/<tid>/cgroup) file places the
// task in the container containerID of the pod podUID, or in a cgroup below it (KubeVirt
// moves a dedicated VMI's non-vCPU threads into a child "housekeeping" cgroup). It knows
// the kubelet's layouts under both of its cgroup drivers and both cgroup versions:
//
//	cgroupfs: /kubepods[/burstable|/besteffort]/pod<uid>/<id>
//	systemd:  /kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid with _>.slice/<runtime>-<id>.scope
//
// Every hierarchy that places the task in a kubepods tree must place it there (under
// cgroup v1 each controller has its own), and at least one must.
func InContainer(cgroup, podUID, containerID string) bool {
	id := strings.TrimSpace(containerIDWithoutScheme(containerID))
	if podUID == "" || id == "" {
		return false
	}
	proved := false
	for _, line := range strings.Split(strings.TrimSpace(cgroup), "\n") {
		// hierarchy-ID:controller-list:cgroup-path; the path may itself hold colons.
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		segs := strings.Split(parts[2], "/")
		if !slices.ContainsFunc(segs, func(s string) bool { return strings.HasPrefix(s, "kubepods") }) {
			continue
		}
		if !inPodContainer(segs, podUID, id) {
			return false
		}
		proved = true
	}
	return proved
}

// inPodContainer tells whether the path segments hold the pod's segment followed by the
// container's.
func inPodContainer(segs []string, podUID, id string) bool {
	systemdUID := strings.ReplaceAll(podUID, "-", "_")
	for i := 0; i+1 < len(segs); i++ {
		s := segs[i]
		pod := s == "pod"+podUID ||
			(strings.HasPrefix(s, "kubepods") && strings.HasSuffix(s, "-pod"+systemdUID+".slice"))
		if !pod {
			continue
		}
		c := segs[i+1]
		if c == id {
			return true
		}
		// <runtime>-<id>.scope: cri-containerd-, crio-, docker-.
		if strings.HasSuffix(c, "-"+id+".scope") {
			return true
		}
		return false
	}
	return false
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
