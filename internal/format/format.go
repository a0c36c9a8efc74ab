// Package format writes the figures in the messages people read (conditions, Events,
// the CLI's reasons) one way everywhere: durations and CPU quantities.
package format

import (
	"strconv"
	"time"
)

// Duration writes d in Go's notation, to the microsecond and at most four significant
// figures: 3.815ms, 683µs, 24.19s, 10ms, 20m0s. Status records predictions and
// measurements to the microsecond; four figures keep larger ones readable.
func Duration(d time.Duration) string {
	return roundSignificant(d.Round(time.Microsecond), 4).String()
}

// roundSignificant rounds d to n significant decimal figures of nanoseconds.
func roundSignificant(d time.Duration, n int) time.Duration {
	abs := d
	if abs < 0 {
		abs = -abs
	}
	digits := len(strconv.FormatInt(int64(abs), 10))
	if digits <= n {
		return d
	}
	unit := time.Duration(1)
	for range digits - n {
		unit *= 10
	}
	return d.Round(unit)
}

// CPU writes a CPU quantity given in millicores as Kubernetes does: whole CPUs as a
// number ("3"), anything else in millicores ("179m", "1500m").
func CPU(milli int64) string {
	if milli%1000 == 0 {
		return strconv.FormatInt(milli/1000, 10)
	}
	return strconv.FormatInt(milli, 10) + "m"
}
