package rtnet

import (
	"testing"
	"time"
)

func TestForDeadline(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		deadline time.Duration
		raise    int
		want     string
		rank     int
	}{
		{1 * ms, 0, "EF", 0},
		{5 * ms, 0, "EF", 0},
		{5*ms + 1, 0, "AF41", 1},
		{20 * ms, 0, "AF41", 1},
		{100 * ms, 0, "AF31", 2},
		{time.Second, 0, "AF21", 3},
		{10 * ms, 1, "EF", 0}, // raised one step
		{time.Second, 2, "AF41", 1},
		{10 * ms, 5, "EF", 0},    // never above the first class
		{10 * ms, -9, "AF21", 3}, // never below the last RT class
		{0, 0, "AF21", 3},        // no deadline: the last RT class
	} {
		got := ForDeadline(tc.deadline, tc.raise)
		if got.DSCP.Name != tc.want || got.Rank != tc.rank {
			t.Errorf("ForDeadline(%v, %d) = %s rank %d, want %s rank %d", tc.deadline, tc.raise, got.DSCP.Name, got.Rank, tc.want, tc.rank)
		}
	}
	if BestEffort.Rank <= ForDeadline(time.Hour, 0).Rank {
		t.Errorf("best effort rank %d is not after every RT class", BestEffort.Rank)
	}
}
