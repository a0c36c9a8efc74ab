package hostsched

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"testing"
	"testing/fstest"
	"time"
)

// stat is a task's stat line up to its policy (field 41), as the kernel writes it.
func stat(tid int, comm string, prio, policy int) string {
	return fmt.Sprintf("%d (%s) S 1 93 93 0 -1 138412224 7 0 0 0 339 263 0 0 20 0 10 0 144166 951676928 15284 18446744073709551615 1 1 0 0 0 0 2147220087 4096 16963 0 0 0 -1 1 %d %d 0 0 0 0\n", tid, comm, prio, policy)
}

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name         string
		line         string
		policy, prio int
		err          bool
	}{
		{name: "fifo", line: stat(7, "CPU 0/KVM", 1, 1), policy: 1, prio: 1},
		{name: "other", line: stat(7, "CPU 0/KVM", 0, 0), policy: 0, prio: 0},
		{name: "comm with parentheses", line: stat(7, "a) b (c", 5, 2), policy: 2, prio: 5},
		{name: "short", line: "7 (x) S 1 2 3", err: true},
		{name: "no comm", line: "7 x S", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy, prio, err := ParseStat(tc.line)
			if (err != nil) != tc.err || policy != tc.policy || prio != tc.prio {
				t.Errorf("ParseStat = %d, %d, %v; want %d, %d, error %v", policy, prio, err, tc.policy, tc.prio, tc.err)
			}
		})
	}
}

const (
	podA  = "8f2c1d0e-1111-4222-8333-944455556666"
	ctrA  = "4d5e6f"
	podB  = "0a0b0c0d-1111-4222-8333-944455556666"
	ctrB  = "7a8b9c"
	other = "deadbeef"
)

// launcherA is the launcher of domain ns_a: pod podA, its compute container ctrA.
var launcherA = Launcher{Domain: "ns_a", PodUID: podA, ContainerID: "containerd://" + ctrA}

// cgroupfs is a task's cgroup file under the kubelet's cgroupfs driver, cgroup v1: the
// task in container ctr of pod pod (Guaranteed QoS).
func cgroupfs(pod, ctr string) string {
	return fmt.Sprintf("12:cpuset:/kubepods/pod%[1]s/%[2]s\n4:memory:/kubepods/pod%[1]s/%[2]s\n1:name=systemd:/kubepods/pod%[1]s/%[2]s\n0::/\n", pod, ctr)
}

// proc is a /proc with a QEMU (PID 40) running domain ns_a in launcherA's container and
// another (41) running ns_b in pod podB's, with the threads given to 40 (all in its
// container).
func proc(threads map[int][2]string) fstest.MapFS {
	fsys := fstest.MapFS{
		"1/cmdline":         {Data: []byte("/sbin/init\x00")},
		"1/cgroup":          {Data: []byte("0::/init.scope\n")},
		"40/cmdline":        {Data: []byte("/usr/bin/qemu-system-x86_64\x00-name\x00guest=ns_a,debug-threads=on\x00-S\x00")},
		"40/cgroup":         {Data: []byte(cgroupfs(podA, ctrA))},
		"41/cmdline":        {Data: []byte("/usr/libexec/qemu-kvm\x00-name\x00guest=ns_b,debug-threads=on\x00")},
		"41/cgroup":         {Data: []byte(cgroupfs(podB, ctrB))},
		"41/task/50/comm":   {Data: []byte("CPU 0/KVM\n")},
		"41/task/50/cgroup": {Data: []byte(cgroupfs(podB, ctrB))},
		"41/task/50/stat":   {Data: []byte(stat(50, "CPU 0/KVM", 1, 1))},
	}
	for tid, th := range threads {
		fsys[fmt.Sprintf("40/task/%d/comm", tid)] = &fstest.MapFile{Data: []byte(th[0] + "\n")}
		fsys[fmt.Sprintf("40/task/%d/cgroup", tid)] = &fstest.MapFile{Data: []byte(cgroupfs(podA, ctrA))}
		if th[1] != "" {
			fsys[fmt.Sprintf("40/task/%d/stat", tid)] = &fstest.MapFile{Data: []byte(th[1])}
		}
	}
	return fsys
}

func TestVCPUs(t *testing.T) {
	fsys := proc(map[int][2]string{
		40: {"qemu-system-x86", stat(40, "qemu-system-x86", 0, 0)},
		43: {"CPU 1/KVM", stat(43, "CPU 1/KVM", 0, 0)},
		42: {"CPU 0/KVM", stat(42, "CPU 0/KVM", 1, 1)},
		44: {"IO mon_iothread", stat(44, "IO mon_iothread", 0, 0)},
		45: {"CPU 2/KVM", ""}, // ended between its comm and its stat
	})
	pid, vcpus, err := VCPUs(fsys, launcherA)
	want := []Thread{{TID: 42, Name: "CPU 0/KVM", Policy: PolicyFIFO, Priority: 1}, {TID: 43, Name: "CPU 1/KVM"}}
	if err != nil || pid != 40 || !reflect.DeepEqual(vcpus, want) {
		t.Errorf("VCPUs(ns_a) = %d, %+v, %v; want 40, %+v", pid, vcpus, err, want)
	}
	if _, _, err := VCPUs(fsys, Launcher{Domain: "ns", PodUID: podA, ContainerID: ctrA}); !errors.Is(err, ErrNoDomain) {
		t.Errorf("VCPUs(ns) = %v, want ErrNoDomain (ns_a is another domain)", err)
	}
	if pid, vcpus, err := VCPUs(fsys, Launcher{Domain: "ns_b", PodUID: podB, ContainerID: "cri-o://" + ctrB}); err != nil || pid != 41 || len(vcpus) != 1 {
		t.Errorf("VCPUs(ns_b) = %d, %+v, %v; want QEMU 41 with one vCPU", pid, vcpus, err)
	}
	// A guest under software emulation has "CPU 0/TCG" threads: none is KubeVirt's realtime.
	tcg := proc(map[int][2]string{42: {"CPU 0/TCG", stat(42, "CPU 0/TCG", 0, 0)}})
	if _, vcpus, err := VCPUs(tcg, launcherA); err != nil || len(vcpus) != 0 {
		t.Errorf("VCPUs of a TCG guest = %+v, %v; want none", vcpus, err)
	}
	bad := proc(map[int][2]string{42: {"CPU 0/KVM", "42 (CPU 0/KVM) S 1"}})
	if _, _, err := VCPUs(bad, launcherA); err == nil {
		t.Error("VCPUs with an unreadable stat: no error")
	}
	if _, _, err := VCPUs(fsys, Launcher{Domain: "ns_a"}); !errors.Is(err, ErrNoDomain) {
		t.Errorf("VCPUs without a launcher pod to prove it by = %v, want ErrNoDomain", err)
	}
}

// An impostor: any pod can run a process named like QEMU with the crawler's domain and
// a thread named "CPU 0/KVM". Only the one in the launcher's compute container is taken.
func TestVCPUsTakesNoImpostor(t *testing.T) {
	impostor := func(pid int, cgroup string) fstest.MapFS {
		p := strconv.Itoa(pid)
		return fstest.MapFS{
			p + "/cmdline":                {Data: []byte("/tmp/qemu-system-x86_64\x00-name\x00guest=ns_a\x00")},
			p + "/cgroup":                 {Data: []byte(cgroup)},
			p + "/task/" + p + "1/comm":   {Data: []byte("CPU 0/KVM\n")},
			p + "/task/" + p + "1/cgroup": {Data: []byte(cgroup)},
			p + "/task/" + p + "1/stat":   {Data: []byte(stat(pid*10+1, "CPU 0/KVM", 0, 0))},
		}
	}
	merge := func(fss ...fstest.MapFS) fstest.MapFS {
		out := fstest.MapFS{}
		for _, f := range fss {
			maps.Copy(out, f)
		}
		return out
	}
	genuine := proc(map[int][2]string{42: {"CPU 0/KVM", stat(42, "CPU 0/KVM", 0, 0)}})
	for name, tc := range map[string]struct {
		fsys    fstest.MapFS
		wantPID int
	}{
		"another pod's container, listed before the launcher's": {
			fsys: merge(genuine, impostor(30, cgroupfs(podB, ctrB))), wantPID: 40,
		},
		"alone, in another pod": {fsys: impostor(30, cgroupfs(podB, ctrB))},
		"another container of the launcher pod (a sidecar)": {
			fsys: impostor(30, cgroupfs(podA, other)),
		},
		"the host, outside any pod": {fsys: impostor(30, "0::/system.slice/evil.service\n")},
		"no cgroup file":            {fsys: fstest.MapFS{"30/cmdline": {Data: []byte("qemu-x\x00-name\x00guest=ns_a\x00")}}},
		"one hierarchy in the container, another in another pod": {
			fsys: impostor(30, fmt.Sprintf("4:memory:/kubepods/pod%s/%s\n3:cpuset:/kubepods/pod%s/%s\n", podA, ctrA, podB, ctrB)),
		},
	} {
		t.Run(name, func(t *testing.T) {
			pid, vcpus, err := VCPUs(tc.fsys, launcherA)
			if tc.wantPID == 0 {
				if !errors.Is(err, ErrNoDomain) || len(vcpus) != 0 {
					t.Errorf("VCPUs = %d, %+v, %v; want ErrNoDomain and no thread", pid, vcpus, err)
				}
				return
			}
			if err != nil || pid != tc.wantPID {
				t.Errorf("VCPUs = %d, %v; want the launcher's QEMU %d", pid, err, tc.wantPID)
			}
			for _, v := range vcpus {
				if v.TID != 42 {
					t.Errorf("VCPUs took thread %+v, not the launcher's", v)
				}
			}
		})
	}
	// A thread of the genuine QEMU moved into another cgroup (cgroup v1 moves threads one
	// by one) is not taken.
	moved := proc(map[int][2]string{42: {"CPU 0/KVM", stat(42, "CPU 0/KVM", 0, 0)}, 43: {"CPU 1/KVM", stat(43, "CPU 1/KVM", 0, 0)}})
	moved["40/task/43/cgroup"] = &fstest.MapFile{Data: []byte(cgroupfs(podB, ctrB))}
	if _, vcpus, err := VCPUs(moved, launcherA); err != nil || len(vcpus) != 1 || vcpus[0].TID != 42 {
		t.Errorf("VCPUs with thread 43 in another pod's cgroup = %+v, %v; want thread 42 alone", vcpus, err)
	}
}

func TestInContainer(t *testing.T) {
	const (
		uid = "8f2c1d0e-1111-4222-8333-944455556666"
		id  = "0123abcd"
		sys = "8f2c1d0e_1111_4222_8333_944455556666"
	)
	for name, tc := range map[string]struct {
		cgroup string
		want   bool
	}{
		"cgroupfs v1, Guaranteed":    {cgroup: cgroupfs(uid, id), want: true},
		"cgroupfs v1, Burstable":     {cgroup: "3:cpu,cpuacct:/kubepods/burstable/pod" + uid + "/" + id + "\n", want: true},
		"cgroupfs v2, BestEffort":    {cgroup: "0::/kubepods/besteffort/pod" + uid + "/" + id + "\n", want: true},
		"systemd v2, Guaranteed":     {cgroup: "0::/kubepods.slice/kubepods-pod" + sys + ".slice/cri-containerd-" + id + ".scope\n", want: true},
		"systemd v2, Burstable":      {cgroup: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + sys + ".slice/crio-" + id + ".scope\n", want: true},
		"systemd v1, housekeeping":   {cgroup: "5:cpuset:/kubepods.slice/kubepods-pod" + sys + ".slice/cri-containerd-" + id + ".scope/housekeeping\n", want: true},
		"below the container":        {cgroup: "0::/kubepods/pod" + uid + "/" + id + "/housekeeping\n", want: true},
		"another container":          {cgroup: "0::/kubepods/pod" + uid + "/ffff\n"},
		"the pod's own cgroup":       {cgroup: "0::/kubepods/pod" + uid + "\n"},
		"another pod":                {cgroup: cgroupfs("11111111-1111-4222-8333-944455556666", id)},
		"a prefix of the ID":         {cgroup: "0::/kubepods/pod" + uid + "/" + id + "ff\n"},
		"not in kubepods":            {cgroup: "0::/system.slice/containerd.service\n"},
		"the ID elsewhere in a path": {cgroup: "0::/user.slice/pod" + uid + "/" + id + "\n"},
		"empty":                      {},
	} {
		t.Run(name, func(t *testing.T) {
			if got := InContainer(tc.cgroup, uid, "containerd://"+id); got != tc.want {
				t.Errorf("InContainer(%q) = %v, want %v", tc.cgroup, got, tc.want)
			}
		})
	}
	if InContainer(cgroupfs(uid, id), "", id) || InContainer(cgroupfs(uid, id), uid, "containerd://") {
		t.Error("InContainer without a pod UID or a container ID proved something")
	}
}

func TestDue(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	grace := 30 * time.Second
	fifo := func(tid int) Thread { return Thread{TID: tid, Name: "CPU 0/KVM", Policy: PolicyFIFO, Priority: 1} }
	other := func(tid int) Thread { return Thread{TID: tid, Name: "CPU 0/KVM", Policy: PolicyOther} }
	for _, tc := range []struct {
		name      string
		since     map[int]time.Time
		vcpus     []Thread
		now       time.Time
		wantDue   []int
		wantFirst time.Time
		wantSince map[int]time.Time
	}{
		{name: "all realtime", vcpus: []Thread{fifo(1), fifo(2)}, now: t0, wantSince: map[int]time.Time{}},
		{name: "first seen: its grace starts", vcpus: []Thread{fifo(1), other(2)}, now: t0,
			wantSince: map[int]time.Time{2: t0}},
		{name: "within its grace", since: map[int]time.Time{2: t0}, vcpus: []Thread{other(2)}, now: t0.Add(grace - time.Second),
			wantSince: map[int]time.Time{2: t0}},
		{name: "grace over: due", since: map[int]time.Time{2: t0}, vcpus: []Thread{other(2), other(3)}, now: t0.Add(grace),
			wantDue: []int{2}, wantFirst: t0, wantSince: map[int]time.Time{2: t0, 3: t0.Add(grace)}},
		{name: "several due: since the longest-waiting", since: map[int]time.Time{2: t0.Add(time.Minute), 3: t0}, vcpus: []Thread{other(2), other(3)}, now: t0.Add(time.Hour),
			wantDue: []int{2, 3}, wantFirst: t0, wantSince: map[int]time.Time{2: t0.Add(time.Minute), 3: t0}},
		{name: "realtime again or gone: forgotten", since: map[int]time.Time{2: t0, 3: t0}, vcpus: []Thread{fifo(2)}, now: t0.Add(time.Hour),
			wantSince: map[int]time.Time{}},
		{name: "FIFO at priority 0 is not KubeVirt's realtime", vcpus: []Thread{{TID: 4, Policy: PolicyFIFO}}, since: map[int]time.Time{4: t0}, now: t0.Add(grace),
			wantDue: []int{4}, wantFirst: t0, wantSince: map[int]time.Time{4: t0}},
		{name: "SCHED_RR is not FIFO", vcpus: []Thread{{TID: 5, Policy: PolicyRR, Priority: 1}}, now: t0,
			wantSince: map[int]time.Time{5: t0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Due(tc.since, tc.vcpus, tc.now, grace)
			var tids []int
			for _, d := range v.Due {
				tids = append(tids, d.TID)
			}
			if !reflect.DeepEqual(tids, tc.wantDue) || !v.Since.Equal(tc.wantFirst) || !reflect.DeepEqual(v.Seen, tc.wantSince) {
				t.Errorf("Due = %v since %v, seen %v; want %v since %v, seen %v", tids, v.Since, v.Seen, tc.wantDue, tc.wantFirst, tc.wantSince)
			}
		})
	}
}
