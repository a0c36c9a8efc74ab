package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"isochron.io/isochron/internal/hostsched"
)

// threads is the vCPU guard's view of the node's threads: the host's /proc (the agent
// shares the host's PID namespace; each task's cgroup file says whose container it is in) and sched_setattr(2) (CAP_SYS_NICE: QEMU runs as
// another user).
type threads struct{}

func (threads) VCPUs(l hostsched.Launcher) ([]hostsched.Thread, error) {
	_, vcpus, err := hostsched.VCPUs(os.DirFS("/proc"), l)
	return vcpus, err
}

func (threads) SetRealtime(tid int) error {
	attr := &unix.SchedAttr{Policy: hostsched.PolicyFIFO, Priority: hostsched.RealtimePriority}
	if err := unix.SchedSetAttr(tid, attr, 0); err != nil {
		return fmt.Errorf("sched_setattr(%d, SCHED_FIFO %d): %w", tid, hostsched.RealtimePriority, err)
	}
	return nil
}
