package rtnet

import (
	"fmt"
	"slices"
	"strings"
)

// ParseUplinks reads the cluster administrator's comma-separated list of RT uplinks: Linux
// interface names (at most 15 bytes, no '/', no space), each once, in order.
func ParseUplinks(list string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(list, ",") {
		name := strings.TrimSpace(f)
		switch {
		case name == "":
			continue
		case len(name) > 15 || strings.ContainsAny(name, "/ \t:") || name == "." || name == "..":
			return nil, fmt.Errorf("rtUplinks: %q is not a Linux interface name (at most 15 characters, none of '/', ':' or spaces)", name)
		case slices.Contains(out, name):
			continue
		}
		out = append(out, name)
	}
	return out, nil
}
