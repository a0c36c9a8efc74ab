package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"isochron.io/isochron/internal/hostsched"
)

// fakeQEMU is set in the environment of this test binary run as a stand-in QEMU.
const fakeQEMU = "ISOCHRON_FAKE_QEMU"

func TestMain(m *testing.M) {
	if os.Getenv(fakeQEMU) != "" {
		runFakeQEMU()
		return
	}
	os.Exit(m.Run())
}

// runFakeQEMU names one of its threads as QEMU names a KVM vCPU thread, prints its
// thread ID and blocks until killed.
func runFakeQEMU() {
	ready := make(chan int)
	go func() {
		runtime.LockOSThread() // the thread stays this goroutine's, and ends with it
		tid := unix.Gettid()
		if err := os.WriteFile(fmt.Sprintf("/proc/self/task/%d/comm", tid), []byte("CPU 0/KVM"), 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ready <- tid
		select {}
	}()
	fmt.Println(<-ready)
	select {}
}

// standIn starts this test binary again with the command line KubeVirt gives QEMU for
// domain, as a stand-in QEMU with one thread named "CPU 0/KVM"; its PID and that thread's.
func standIn(t *testing.T, domain string) (pid, tid int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Args = []string{"/usr/bin/qemu-system-x86_64", "-name", "guest=" + domain + ",debug-threads=on", "-S"}
	cmd.Env = append(os.Environ(), fakeQEMU+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the stand-in QEMU: %v", err)
	}
	tid, err = strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the stand-in QEMU printed %q", line)
	}
	return cmd.Process.Pid, tid
}

// launcherCgroup makes a cgroup v1 pids cgroup laid out as the kubelet's cgroupfs driver
// lays out a container's (.../kubepods/pod<uid>/<id>, under a root of the test's own that
// no kubelet cleans up) and moves pid into it; the Launcher it proves. It skips the test
// where this process may not make cgroups.
func launcherCgroup(t *testing.T, domain string, pid int) hostsched.Launcher {
	t.Helper()
	const uid, id = "5e1f0c2a-7b3d-4e8f-9a6b-1c2d3e4f5a6b", "c0ffee"
	root := fmt.Sprintf("/sys/fs/cgroup/pids/isochron-test-%d", os.Getpid())
	dir := root + "/kubepods/pod" + uid + "/" + id
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup v1 pids cgroup here: %v", err)
	}
	t.Cleanup(func() {
		// Back to the hierarchy's root first: this runs before the stand-in is killed.
		_ = os.WriteFile("/sys/fs/cgroup/pids/cgroup.procs", []byte(strconv.Itoa(pid)), 0)
		for d := dir; strings.HasPrefix(d, root); d = path.Dir(d) {
			if err := os.Remove(d); err != nil {
				t.Errorf("removing the test's cgroup: %v", err)
			}
		}
	})
	if err := os.WriteFile(dir+"/cgroup.procs", []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Skipf("cannot move a process into a cgroup here: %v", err)
	}
	return hostsched.Launcher{Domain: domain, PodUID: uid, ContainerID: "containerd://" + id}
}

// The agent's threads read a running process's vCPU thread from the host's /proc and
// give it SCHED_FIFO with sched_setattr: this test binary, run again with the command
// line KubeVirt gives QEMU and put into a cgroup laid out as a launcher's compute
// container, stands in for QEMU. Another copy outside that cgroup, named alike, is an
// impostor: never read.
func TestThreadsOfARunningQEMU(t *testing.T) {
	const domain = "e2e_fake"
	// The impostor starts first, so a search by name alone would find it first.
	impostorPID, _ := standIn(t, domain)
	pid, tid := standIn(t, domain)
	var h threads
	impostor := hostsched.Launcher{Domain: domain, PodUID: "5e1f0c2a-7b3d-4e8f-9a6b-1c2d3e4f5a6b", ContainerID: "containerd://c0ffee"}
	if vcpus, err := h.VCPUs(impostor); !errors.Is(err, hostsched.ErrNoDomain) {
		t.Fatalf("VCPUs(%s) with both stand-ins outside the launcher's container = %+v, %v; want ErrNoDomain", domain, vcpus, err)
	}
	l := launcherCgroup(t, domain, pid)

	vcpus, err := h.VCPUs(l)
	want := hostsched.Thread{TID: tid, Name: "CPU 0/KVM", Policy: hostsched.PolicyOther}
	if err != nil || len(vcpus) != 1 || vcpus[0] != want {
		t.Fatalf("VCPUs(%s) = %+v, %v; want [%+v] (QEMU %d, not the impostor %d)", l, vcpus, err, want, pid, impostorPID)
	}
	other := l
	other.Domain = "e2e_other"
	if _, err := h.VCPUs(other); !errors.Is(err, hostsched.ErrNoDomain) {
		t.Errorf("VCPUs of a domain nothing runs: %v, want ErrNoDomain", err)
	}
	if err := h.SetRealtime(tid); errors.Is(err, unix.EPERM) {
		t.Skipf("no CAP_SYS_NICE here to set SCHED_FIFO: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	vcpus, err = h.VCPUs(l)
	want.Policy, want.Priority = hostsched.PolicyFIFO, hostsched.RealtimePriority
	if err != nil || len(vcpus) != 1 || vcpus[0] != want {
		t.Errorf("after SetRealtime: VCPUs(%s) = %+v, %v; want [%+v]", l, vcpus, err, want)
	}
}
