package render

import (
	"fmt"
	"strings"
)

// mimeBoundary separates the parts of a combined user-data document. It is fixed so the
// rendering is deterministic; it cannot occur in a user's part (checked).
const mimeBoundary = "==isochron-5f1d=="

// dscpScript marks all traffic leaving the RT-NIC (found by its MAC address) with the
// DSCP class, with nftables where the guest has it and iptables otherwise. It is terse
// because KubeVirt limits inline user data to 2048 bytes and the user's part shares them.
func dscpScript(mac string, class DSCPClass) string {
	return fmt.Sprintf(`#!/bin/sh
# isochron: DSCP %[2]s (%[3]d) on the RT-NIC %[1]s
d=$(ip -o link | awk -v m=%[1]s 'index(tolower($0),m){sub(":","",$2);sub("@.*","",$2);print $2;exit}')
[ -n "$d" ] || { echo "isochron: no NIC with MAC %[1]s" >&2; exit 1; }
if command -v nft >/dev/null; then nft -f - <<EOF
table inet isochron { chain post { type filter hook postrouting priority -150; oifname "$d" ip dscp set %[3]d; oifname "$d" ip6 dscp set %[3]d; } }
EOF
else
iptables -t mangle -A POSTROUTING -o "$d" -j DSCP --set-dscp %[3]d
ip6tables -t mangle -A POSTROUTING -o "$d" -j DSCP --set-dscp %[3]d || true
fi
`, mac, class.Name, class.Value)
}

// userData combines the user's own cloud-init user data with isochron's part. With no
// part of isochron's the user's data is returned unchanged; with no user data, isochron's
// part alone. Otherwise both become a MIME multipart document in which the user's part is
// typed text/plain, so that cloud-init detects its kind (#cloud-config, #!...) from its
// first line exactly as it would have alone.
func userData(user, ours string) (string, error) {
	switch {
	case ours == "":
		return user, nil
	case user == "":
		return ours, nil
	case strings.Contains(user, mimeBoundary):
		return "", fmt.Errorf("spec.guest.cloudInitUserData contains isochron's MIME boundary %q; remove it", mimeBoundary)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=\"%s\"\nMIME-Version: 1.0\n\n", mimeBoundary)
	for _, p := range []struct{ ctype, body string }{{"text/plain", user}, {"text/x-shellscript", ours}} {
		fmt.Fprintf(&b, "--%s\nContent-Type: %s; charset=\"utf-8\"\nMIME-Version: 1.0\n\n%s", mimeBoundary, p.ctype, p.body)
		if !strings.HasSuffix(p.body, "\n") {
			b.WriteString("\n")
		}
	}
	fmt.Fprintf(&b, "--%s--\n", mimeBoundary)
	return b.String(), nil
}
