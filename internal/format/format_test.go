package format

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	cases := map[string]struct {
		in   time.Duration
		want string
	}{
		"zero":                         {0, "0s"},
		"microseconds stay whole":      {683 * time.Microsecond, "683µs"},
		"a status figure (µs) stays":   {3815 * time.Microsecond, "3.815ms"},
		"five figures round to four":   {12345 * time.Microsecond, "12.35ms"},
		"sub-microsecond noise goes":   {3815*time.Microsecond + 400, "3.815ms"},
		"to the microsecond":           {683400 * time.Nanosecond, "683µs"},
		"half a microsecond rounds up": {609500 * time.Nanosecond, "610µs"},
		"whole milliseconds":           {10 * time.Millisecond, "10ms"},
		"seconds":                      {24187354 * time.Microsecond, "24.19s"},
		"minutes":                      {20 * time.Minute, "20m0s"},
		"hours":                        {2*time.Hour + 123*time.Millisecond, "2h0m0s"},
		"below a microsecond":          {420, "0s"},
		"negative":                     {-12345 * time.Microsecond, "-12.35ms"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Duration(tc.in); got != tc.want {
				t.Errorf("Duration(%d) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestCPU(t *testing.T) {
	cases := map[string]struct {
		milli int64
		want  string
	}{
		"zero":            {0, "0"},
		"whole CPUs":      {11000, "11"},
		"millicores":      {179, "179m"},
		"more than a CPU": {1500, "1500m"},
		"negative":        {-250, "-250m"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := CPU(tc.milli); got != tc.want {
				t.Errorf("CPU(%d) = %q, want %q", tc.milli, got, tc.want)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly ten", 11, "exactly ten"},
		{"a longer message", 10, "a longe..."},
		{"6ms ×× 2", 8, "6ms ..."}, // never inside the two bytes of ×
	} {
		if got := Truncate(tc.s, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
