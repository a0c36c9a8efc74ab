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

func TestParseNamespaces(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []string
		err  string
	}{
		"none":              {in: ""},
		"one":               {in: "rt-shared", want: []string{"rt-shared"}},
		"spaces and commas": {in: " rt-shared , kube-system,", want: []string{"rt-shared", "kube-system"}},
		"not a name":        {in: "rt-shared,RT_Net", err: `"RT_Net" is not a namespace name`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseNamespaces(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--shared-network-namespaces") {
					t.Fatalf("parseNamespaces(%q) error %v, want one naming the flag with %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("parseNamespaces(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}
