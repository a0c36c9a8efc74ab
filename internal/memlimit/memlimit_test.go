package memlimit

import (
	"strings"
	"testing"
)

func TestSoft(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		want int64
		err  bool
	}{
		"the manager's 512Mi":        {in: "536870912", want: 456340265},
		"a limit raised to 1Gi":      {in: "1073741824", want: 912680530},
		"no limit: node allocatable": {in: "33554432000", want: 28521267200},
		"a quantity, not bytes":      {in: "512Mi", err: true},
		"zero":                       {in: "0", err: true},
		"empty":                      {in: "", err: true},
		"negative":                   {in: "-1", err: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Soft(tc.in)
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), EnvVar) {
					t.Fatalf("Soft(%q) = %d, %v; want an error naming %s", tc.in, got, err, EnvVar)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Soft(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}
