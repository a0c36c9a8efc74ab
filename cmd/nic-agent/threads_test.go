package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
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

// The agent's threads read a running process's vCPU thread from the host's /proc and
// give it SCHED_FIFO with sched_setattr: this test binary, run again with the command
// line KubeVirt gives QEMU, stands in for QEMU.
func TestThreadsOfARunningQEMU(t *testing.T) {
	const domain = "e2e_fake"
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
	tid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the stand-in QEMU printed %q", line)
	}

	var h threads
	vcpus, err := h.VCPUs(domain)
	want := hostsched.Thread{TID: tid, Name: "CPU 0/KVM", Policy: hostsched.PolicyOther}
	if err != nil || len(vcpus) != 1 || vcpus[0] != want {
		t.Fatalf("VCPUs(%s) = %+v, %v; want [%+v]", domain, vcpus, err, want)
	}
	if _, err := h.VCPUs("e2e_other"); !errors.Is(err, hostsched.ErrNoDomain) {
		t.Errorf("VCPUs of a domain nothing runs: %v, want ErrNoDomain", err)
	}
	if err := h.SetRealtime(tid); errors.Is(err, unix.EPERM) {
		t.Skipf("no CAP_SYS_NICE here to set SCHED_FIFO: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	vcpus, err = h.VCPUs(domain)
	want.Policy, want.Priority = hostsched.PolicyFIFO, hostsched.RealtimePriority
	if err != nil || len(vcpus) != 1 || vcpus[0] != want {
		t.Errorf("after SetRealtime: VCPUs(%s) = %+v, %v; want [%+v]", domain, vcpus, err, want)
	}
}
