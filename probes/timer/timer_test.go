package timer

import (
	"context"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"isochron.io/isochron/probes/stats"
)

func TestNextTarget(t *testing.T) {
	const ms = int64(time.Millisecond)
	tests := map[string]struct {
		mode             Mode
		prevTarget, wake int64
		want             int64
	}{
		"periodic, on time: next grid point":           {Periodic, 10 * ms, 10*ms + 30_000, 11 * ms},
		"periodic, late within the period: next grid":  {Periodic, 10 * ms, 10*ms + 900_000, 11 * ms},
		"periodic, woke exactly on the next target":    {Periodic, 10 * ms, 11 * ms, 12 * ms},
		"periodic, overran 2.5 periods: skips to grid": {Periodic, 10 * ms, 12*ms + 500_000, 13 * ms},
		"oneshot: one interval after the wake-up":      {Oneshot, 10 * ms, 10*ms + 30_000, 11*ms + 30_000},
		"oneshot, overran: still relative to wake-up":  {Oneshot, 10 * ms, 12*ms + 500_000, 13*ms + 500_000},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := NextTarget(tc.mode, ms, tc.prevTarget, tc.wake); got != tc.want {
				t.Errorf("NextTarget(%s, 1ms, %d, %d) = %d, want %d", tc.mode, tc.prevTarget, tc.wake, got, tc.want)
			}
		})
	}
}

func valid() Config {
	return Config{Interval: time.Millisecond, Duration: 10 * time.Second, CPU: -1, Mode: Periodic}
}

func TestValidate(t *testing.T) {
	tests := map[string]struct {
		edit    func(*Config)
		wantErr string
	}{
		"valid":                          {edit: func(*Config) {}},
		"oneshot is valid":               {edit: func(c *Config) { c.Mode = Oneshot }},
		"duration equal to interval":     {edit: func(c *Config) { c.Duration = c.Interval }},
		"zero interval":                  {edit: func(c *Config) { c.Interval = 0 }, wantErr: "--interval must be > 0"},
		"negative interval":              {edit: func(c *Config) { c.Interval = -time.Millisecond }, wantErr: "--interval must be > 0"},
		"duration shorter than interval": {edit: func(c *Config) { c.Duration = time.Microsecond }, wantErr: "--duration (1µs) must be >= --interval (1ms)"},
		"unknown mode":                   {edit: func(c *Config) { c.Mode = "burst" }, wantErr: `--mode must be "periodic" or "oneshot", got "burst"`},
		"empty mode":                     {edit: func(c *Config) { c.Mode = "" }, wantErr: "--mode must be"},
		"priority above 99":              {edit: func(c *Config) { c.Priority = 100 }, wantErr: "--priority must be"},
		"negative priority":              {edit: func(c *Config) { c.Priority = -1 }, wantErr: "--priority must be"},
		"cpu below -1":                   {edit: func(c *Config) { c.CPU = -2 }, wantErr: "--cpu must be"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := valid()
			tc.edit(&c)
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestExpectedSamples(t *testing.T) {
	if got := valid().ExpectedSamples(); got != 10_000 {
		t.Errorf("ExpectedSamples() = %d, want 10000 for 10s at 1ms", got)
	}
}

// The loop must not allocate: an allocation can start the GC or fault in a
// page, and that would be measured as machine latency.
func TestStepDoesNotAllocate(t *testing.T) {
	for _, mode := range []Mode{Periodic, Oneshot} {
		t.Run(string(mode), func(t *testing.T) {
			l := newLoop(Config{Interval: 10 * time.Microsecond, Mode: mode}, stats.NewRecorder())
			l.target = l.now()
			if n := testing.AllocsPerRun(100, l.step); n != 0 {
				t.Errorf("step allocated %v times per wake-up, want 0", n)
			}
		})
	}
}

// A short real run: only the sample count and the sign are checked, never the
// latency itself, which depends on the machine. On a loaded machine late
// wake-ups make Periodic skip targets and Oneshot stretch its intervals, so
// the count alone is bounded only from above; Periodic accounts for the rest.
func TestRunShort(t *testing.T) {
	if testing.Short() {
		t.Skip("real 200 ms run")
	}
	for _, mode := range []Mode{Periodic, Oneshot} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := Config{Interval: time.Millisecond, Duration: 200 * time.Millisecond, CPU: -1, Mode: mode}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			s := res.Latency.Summary(Metric)
			want := cfg.ExpectedSamples()
			if s.Count < 1 || s.Count > want {
				t.Errorf("count = %d, want 1..%d", s.Count, want)
			}
			if mode == Periodic && (s.Count+res.Skipped < want-1 || s.Count+res.Skipped > want) {
				t.Errorf("count %d + skipped %d = %d, want %d (or one less)", s.Count, res.Skipped, s.Count+res.Skipped, want)
			}
			if s.Min < 0 {
				t.Errorf("min = %v, want >= 0", s.Min)
			}
			if res.Interrupted {
				t.Errorf("Interrupted = true without a cancelled context")
			}
		})
	}
}

func TestRunStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := Run(ctx, Config{Interval: time.Millisecond, Duration: time.Hour, CPU: -1, Mode: Periodic})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !res.Interrupted {
		t.Errorf("Interrupted = false, want true")
	}
}

func TestRunRejectsInvalidConfig(t *testing.T) {
	if _, err := Run(context.Background(), Config{Mode: Periodic}); err == nil {
		t.Errorf("Run with zero interval succeeded, want an error")
	}
}

// The loop sleeps on CLOCK_MONOTONIC and reads the time with nanotime: they
// must be the same clock, so a nanotime read falls between two clock reads.
func TestNanotimeIsClockMonotonic(t *testing.T) {
	var ts unix.Timespec
	for range 100 {
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		before := ts.Nano()
		got := nanotime()
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		if after := ts.Nano(); got < before || got > after {
			t.Fatalf("nanotime() = %d, not between CLOCK_MONOTONIC reads %d and %d", got, before, after)
		}
	}
}
