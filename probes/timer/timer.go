// Package timer measures timer wake-up latency the way cyclictest does: a
// thread sleeps until an absolute CLOCK_MONOTONIC instant with
// clock_nanosleep(TIMER_ABSTIME) and records how late it woke up.
//
// The loop runs on a dedicated, locked OS thread that is optionally pinned to
// one CPU and raised to SCHED_FIFO, with memory locked and the garbage
// collector off, so that what it records is the latency of the machine (timer
// interrupt, scheduler, hypervisor), not of the Go runtime.
package timer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"
	_ "unsafe" // for go:linkname

	"golang.org/x/sys/unix"

	"isochron.io/isochron/probes/stats"
)

// Metric is the name of the metric Run records.
const Metric = "timer-latency"

// Mode says how the next wake-up target is chosen.
type Mode string

const (
	// Periodic targets start + k*interval: a fixed grid, as cyclictest does by
	// default (absolute timer). A wake-up later than whole periods skips the
	// targets already passed, as cyclictest does.
	Periodic Mode = "periodic"
	// Oneshot targets the previous actual wake-up + interval, so every sleep is
	// one interval armed afresh, like cyclictest -r (relative timer). The target
	// is still slept to with TIMER_ABSTIME, so the time between reading the clock
	// and arming the timer does not count as latency.
	Oneshot Mode = "oneshot"
)

// Config is one measurement.
type Config struct {
	// Interval between wake-ups; > 0.
	Interval time.Duration
	// Duration of the measurement; >= Interval.
	Duration time.Duration
	// Priority is the SCHED_FIFO priority (1..99); 0 keeps the normal scheduler.
	Priority int
	// CPU pins the measuring thread to this CPU; -1 leaves it unpinned.
	CPU int
	// Mode is Periodic or Oneshot.
	Mode Mode
	// LockMemory calls mlockall(MCL_CURRENT|MCL_FUTURE) for the measurement.
	LockMemory bool
	// HoldDMALatency writes 0 to /dev/cpu_dma_latency and holds it open for the
	// measurement, as cyclictest does unless --default-system: idle CPUs then stay in
	// their shallowest state (on a haltpoll guest: poll instead of halting to the
	// hypervisor), which is how real-time hosts are tuned.
	HoldDMALatency bool
}

// Validate reports the first field that makes c unusable, in words a person can act on.
func (c Config) Validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("--interval must be > 0, got %s", c.Interval)
	case c.Duration < c.Interval:
		return fmt.Errorf("--duration (%s) must be >= --interval (%s)", c.Duration, c.Interval)
	case c.Priority < 0 || c.Priority > 99:
		return fmt.Errorf("--priority must be 0 (normal scheduling) or a SCHED_FIFO priority 1..99, got %d", c.Priority)
	case c.CPU < -1:
		return fmt.Errorf("--cpu must be a CPU number >= 0 (or -1 for no pinning), got %d", c.CPU)
	case c.Mode != Periodic && c.Mode != Oneshot:
		return fmt.Errorf("--mode must be %q or %q, got %q", Periodic, Oneshot, c.Mode)
	}
	return nil
}

// ExpectedSamples is the number of wake-ups a run without overruns records.
func (c Config) ExpectedSamples() int64 { return int64(c.Duration / c.Interval) }

// NextTarget returns the next wake-up instant in nanoseconds on the monotonic
// clock, given the previous target and the instant the thread actually woke.
// In Periodic mode targets stay on the grid start + k*interval and any target
// at or before wake is skipped; in Oneshot mode the next target is wake + interval.
func NextTarget(mode Mode, interval, prevTarget, wake int64) int64 {
	if mode == Oneshot {
		return wake + interval
	}
	next := prevTarget + interval
	if next <= wake {
		next += ((wake-next)/interval + 1) * interval
	}
	return next
}

// Result is what Run measured.
type Result struct {
	Latency *stats.Recorder
	// Warnings lists what could not be set up (no permission for SCHED_FIFO or
	// mlockall); the run went on without it.
	Warnings []string
	// Skipped counts the Periodic targets passed over because a wake-up came
	// later than the next target (cyclictest skips them the same way). A
	// Periodic run that was not interrupted has Latency.Count() + Skipped equal
	// to Config.ExpectedSamples().
	Skipped int64
	// Interrupted is true when the context ended the run early.
	Interrupted bool
}

// Run measures for cfg.Duration, or until ctx ends. It returns an error only
// when the measurement could not run at all (invalid config, bad CPU).
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	res := Result{Latency: stats.NewRecorder()}
	var stop atomic.Bool
	defer context.AfterFunc(ctx, func() { stop.Store(true) })()

	if cfg.LockMemory {
		if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("mlockall: %v; page faults may show as latency", err))
		} else {
			defer func() { _ = unix.Munlockall() }()
		}
	}

	if cfg.HoldDMALatency {
		release, err := holdDMALatency()
		if err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("holding /dev/cpu_dma_latency at 0: %v; idle CPUs may wake up slower", err))
		} else {
			defer release()
		}
	}

	gc := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(gc)
	runtime.GC() // start with a clean heap; nothing in the loop allocates.

	done := make(chan error, 1)
	go func() {
		// The thread is never unlocked: when this goroutine returns, the runtime
		// ends the thread, so its CPU pinning and SCHED_FIFO die with it.
		runtime.LockOSThread()
		done <- measure(cfg, &res, &stop)
	}()
	err := <-done
	res.Interrupted = ctx.Err() != nil
	return res, err
}

// holdDMALatency asks the kernel's PM QoS for a CPU wake-up latency of 0 us until release
// closes the file.
func holdDMALatency() (release func(), err error) {
	f, err := os.OpenFile("/dev/cpu_dma_latency", os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	var zero [4]byte // a 32-bit 0, in the kernel's byte order (any order: it is 0)
	if _, err := f.Write(zero[:]); err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}

// measure runs on a locked OS thread.
func measure(cfg Config, res *Result, stop *atomic.Bool) error {
	if cfg.CPU >= 0 {
		var set unix.CPUSet
		set.Set(cfg.CPU)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("pinning to --cpu %d: %w", cfg.CPU, err)
		}
	}
	if cfg.Priority > 0 {
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(cfg.Priority)}
		if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("SCHED_FIFO priority %d: %v; measuring with normal scheduling", cfg.Priority, err))
		}
	}
	l := newLoop(cfg, res.Latency)
	// One unrecorded wake-up faults in the stack, the timespecs and the vDSO.
	l.target = l.now() + l.interval
	l.sleep()
	l.target = l.now() + l.interval
	end := l.target - l.interval + int64(cfg.Duration)
	for l.target <= end && !stop.Load() {
		l.step()
	}
	if l.target > end {
		// The last wake-up may have skipped past the end; those targets are not missed.
		l.skipped -= (l.target - end - 1) / l.interval
	}
	res.Skipped = l.skipped
	return nil
}

// loop holds everything the measuring loop touches, allocated before it starts.
type loop struct {
	mode     Mode
	interval int64
	target   int64
	skipped  int64
	rec      *stats.Recorder
	ts       unix.Timespec
}

func newLoop(cfg Config, rec *stats.Recorder) *loop {
	return &loop{mode: cfg.Mode, interval: int64(cfg.Interval), rec: rec}
}

// nanotime is the runtime's CLOCK_MONOTONIC read through the vDSO, as
// cyclictest reads it, without a system call. The runtime keeps it linkable
// (see go.dev/issue/67401).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

func (l *loop) now() int64 { return nanotime() }

// sleep sleeps until l.target and returns the instant it woke.
func (l *loop) sleep() int64 {
	l.ts = unix.NsecToTimespec(l.target)
	for {
		err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &l.ts, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	return l.now()
}

// step sleeps to the current target, records the lateness and sets the next target.
func (l *loop) step() {
	wake := l.sleep()
	l.rec.Record((wake - l.target) / 1000)
	next := NextTarget(l.mode, l.interval, l.target, wake)
	if l.mode == Periodic {
		l.skipped += (next-l.target)/l.interval - 1
	}
	l.target = next
}
