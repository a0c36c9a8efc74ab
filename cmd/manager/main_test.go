package main

import (
	"strings"
	"testing"
)

func TestParseProbeCPU(t *testing.T) {
	tests := map[string]struct {
		in, want, err string
	}{
		"one CPU":    {in: "1", want: "1"},
		"millicores": {in: "200m", want: "200m"},
		"zero":       {in: "0", err: "must be positive"},
		"negative":   {in: "-1", err: "must be positive"},
		"not a CPU":  {in: "one", err: "is not a CPU quantity"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			q, err := parseProbeCPU(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--probe-cpu") {
					t.Fatalf("parseProbeCPU(%q) error %v, want one naming --probe-cpu with %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil || q.String() != tc.want {
				t.Fatalf("parseProbeCPU(%q) = %s, %v; want %s", tc.in, q.String(), err, tc.want)
			}
		})
	}
}
