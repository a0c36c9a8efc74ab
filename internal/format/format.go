// Package format writes the figures in the messages people read (conditions, Events,
// the CLI's reasons) one way everywhere: durations and CPU quantities.
package format

import (
	"strconv"
	"time"
	"unicode/utf8"
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

// Truncate cuts s to at most n bytes for a bounded status field, ending it with "..."
// when cut, and never inside a UTF-8 character.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
