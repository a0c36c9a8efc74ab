//go:build linux

/*
Copyright 2026 The isochron Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package monoclock reads CLOCK_MONOTONIC and sleeps to an absolute instant on it, for
// the probes whose schedules need better than the Go timer's millisecond wake-ups.
package monoclock

import (
	"time"

	"golang.org/x/sys/unix"
)

// Now returns CLOCK_MONOTONIC in nanoseconds, the clock Go's monotonic
// time readings use on Linux.
func Now() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// SleepUntil sleeps until CLOCK_MONOTONIC reaches atNs, or for at most maxWait,
// with an absolute clock_nanosleep: the Go timer's wake-ups are about a
// millisecond coarse, too coarse for a 1 ms schedule. It blocks the OS
// thread; the runtime hands the goroutine's P to others meanwhile.
func SleepUntil(atNs int64, maxWait time.Duration) {
	if limit := Now() + int64(maxWait); atNs > limit {
		atNs = limit
	}
	ts := unix.NsecToTimespec(atNs)
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
	}
}
