package nic

import (
	"strings"
	"testing"
)

// Read on a link without isochron's schedule says so, and names a missing link. The
// schedule itself is read back by the e2e suite on a node whose kernel has HTB
// (docs/dev/e2e.md): this one has no qdiscs to program.
func TestReadSaysWhatIsOnALink(t *testing.T) {
	r, err := Read("lo")
	if err != nil {
		t.Fatal(err)
	}
	if r.Link != "lo" || r.Ours || r.Root == "" || len(r.Flows) > 0 || len(r.Filters) > 0 {
		t.Errorf("Read(lo) = %+v, want lo's root qdisc, not isochron's, no flows or filters", r)
	}
	if !strings.HasPrefix(r.String(), "root qdisc ") {
		t.Errorf("String() = %q", r.String())
	}
	if _, err := Read("no-such-link0"); err == nil || !strings.Contains(err.Error(), "uplink no-such-link0") {
		t.Errorf("Read(no-such-link0) error %v, want one naming the link", err)
	}
}
