// Package memlimit derives the Go runtime's soft memory limit (GOMEMLIMIT) from the
// container's memory limit, which the Deployment hands the process through the downward
// API, so that the two move together when an administrator raises the limit.
package memlimit

import (
	"fmt"
	"strconv"
)

// EnvVar is the variable the manager's Deployment sets to its container's memory limit
// in bytes (resourceFieldRef limits.memory).
const EnvVar = "ISOCHRON_MEMORY_LIMIT"

// Percent is the share of the container's limit the Go runtime may use before it collects
// harder. The rest is what the runtime does not count against GOMEMLIMIT's reach in time:
// the mapped binary (about 45 MiB of the manager's resident set), and the heap's growth
// between two collections. 85% of the manager's 512Mi is 435 MiB, where the scale
// benchmark peaked at 459 MiB resident with 440MiB (docs/benchmarks.md).
const Percent = 85

// Soft is the soft limit for a container limit of v bytes, as the downward API writes it.
// A container without a limit gets the node's allocatable memory there, so a soft
// limit is always derived from a number; anything but a positive integer is an error
// naming the variable.
func Soft(v string) (int64, error) {
	limit, err := strconv.ParseInt(v, 10, 64)
	if err != nil || limit <= 0 {
		return 0, fmt.Errorf("%s=%q is not a memory limit in bytes: set it from the container's limits.memory (resourceFieldRef), or unset it and set GOMEMLIMIT", EnvVar, v)
	}
	return limit / 100 * Percent, nil
}
