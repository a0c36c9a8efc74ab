package cli

import (
	"testing"
	"time"
)

// plan prints each figure as status records it: rounded to the microsecond, halves away
// from zero (time.Duration.Round), not by rounding a float of milliseconds.
func TestMsRoundsAsStatus(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want float64
	}{
		{4_000_500 * time.Nanosecond, 4.001}, // 4.0005 is 4.000499... as a float
		{4_000_499 * time.Nanosecond, 4},
		{3_815_000 * time.Nanosecond, 3.815},
		{10 * time.Millisecond, 10},
		{0, 0},
	} {
		if got := ms(tc.d); got != tc.want {
			t.Errorf("ms(%v) = %v, want %v", tc.d, got, tc.want)
		}
	}
}
