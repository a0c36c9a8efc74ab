package rtnet

import "testing"

func TestShaping(t *testing.T) {
	if got := ShapedRate(1_000_000_000); got != 950_000_000 {
		t.Errorf("ShapedRate(1 Gbit/s) = %d, want 950,000,000", got)
	}
	for rate, want := range map[int64]int64{
		1_000_000:     MaxFrameBytes, // 12.5 B over 100 µs: a frame at least
		950_000_000:   11_875,        // 100 µs at 950 Mbit/s
		1_000_000_000: 12_500,
	} {
		if got := BucketBytes(rate); got != want {
			t.Errorf("BucketBytes(%d) = %d, want %d", rate, got, want)
		}
	}
}
