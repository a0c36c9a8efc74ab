package hostsched

import (
	"errors"
	"fmt"
	"reflect"
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

// proc is a /proc with a QEMU (PID 40) running domain ns_a and another (41) running
// ns_b, with the threads given to 40.
func proc(threads map[int][2]string) fstest.MapFS {
	fsys := fstest.MapFS{
		"1/cmdline":       {Data: []byte("/sbin/init\x00")},
		"40/cmdline":      {Data: []byte("/usr/bin/qemu-system-x86_64\x00-name\x00guest=ns_a,debug-threads=on\x00-S\x00")},
		"41/cmdline":      {Data: []byte("/usr/libexec/qemu-kvm\x00-name\x00guest=ns_b,debug-threads=on\x00")},
		"41/task/50/comm": {Data: []byte("CPU 0/KVM\n")},
		"41/task/50/stat": {Data: []byte(stat(50, "CPU 0/KVM", 1, 1))},
	}
	for tid, th := range threads {
		fsys[fmt.Sprintf("40/task/%d/comm", tid)] = &fstest.MapFile{Data: []byte(th[0] + "\n")}
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
	pid, vcpus, err := VCPUs(fsys, "ns_a")
	want := []Thread{{TID: 42, Name: "CPU 0/KVM", Policy: PolicyFIFO, Priority: 1}, {TID: 43, Name: "CPU 1/KVM"}}
	if err != nil || pid != 40 || !reflect.DeepEqual(vcpus, want) {
		t.Errorf("VCPUs(ns_a) = %d, %+v, %v; want 40, %+v", pid, vcpus, err, want)
	}
	if _, _, err := VCPUs(fsys, "ns"); !errors.Is(err, ErrNoDomain) {
		t.Errorf("VCPUs(ns) = %v, want ErrNoDomain (ns_a is another domain)", err)
	}
	if pid, vcpus, err := VCPUs(fsys, "ns_b"); err != nil || pid != 41 || len(vcpus) != 1 {
		t.Errorf("VCPUs(ns_b) = %d, %+v, %v; want QEMU 41 with one vCPU", pid, vcpus, err)
	}
	// A guest under software emulation has "CPU 0/TCG" threads: none is KubeVirt's realtime.
	tcg := proc(map[int][2]string{42: {"CPU 0/TCG", stat(42, "CPU 0/TCG", 0, 0)}})
	if _, vcpus, err := VCPUs(tcg, "ns_a"); err != nil || len(vcpus) != 0 {
		t.Errorf("VCPUs of a TCG guest = %+v, %v; want none", vcpus, err)
	}
	bad := proc(map[int][2]string{42: {"CPU 0/KVM", "42 (CPU 0/KVM) S 1"}})
	if _, _, err := VCPUs(bad, "ns_a"); err == nil {
		t.Error("VCPUs with an unreadable stat: no error")
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
