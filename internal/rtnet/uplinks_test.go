package rtnet

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseUplinks(t *testing.T) {
	for name, tc := range map[string]struct {
		list string
		want []string
		err  string
	}{
		"empty: none named":              {list: ""},
		"spaces and empty items":         {list: " eth1 , ,bond0 ", want: []string{"eth1", "bond0"}},
		"each once, in order":            {list: "eth1,eth2,eth1", want: []string{"eth1", "eth2"}},
		"longer than a Linux name":       {list: "eth1,averyveryverylongname", err: `"averyveryverylongname" is not a Linux interface name`},
		"a slash":                        {list: "br/0", err: `"br/0"`},
		"a colon (an alias, not a link)": {list: "eth0:1", err: `"eth0:1"`},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseUplinks(tc.list)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "rtUplinks: ") {
					t.Errorf("ParseUplinks(%q) = %v, %v; want an error naming rtUplinks and %s", tc.list, got, err, tc.err)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); err != nil || diff != "" {
				t.Errorf("ParseUplinks(%q): %v (-want +got):\n%s", tc.list, err, diff)
			}
		})
	}
}
