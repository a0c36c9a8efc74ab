package agent

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
)

// Marking is the DSCP class the guest sets on everything leaving its RT-NIC, found by
// its MAC address: isochron's marking for networks whose host cannot classify the
// crawler's packets itself.
type Marking struct {
	// MAC is the RT-NIC's hardware address, as isochron renders it.
	MAC string
	// DSCP is the 6-bit code point (46 for EF).
	DSCP int
}

// Runner runs a command with stdin; exec.Command's in the guest.
type Runner func(stdin string, name string, args ...string) error

// ExecRunner runs commands with os/exec.
func ExecRunner(stdin string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Mark sets m on the interface of m.MAC among ifaces: with nftables where the guest has
// it (one table, isochron's own), with iptables and ip6tables (mangle POSTROUTING)
// otherwise. It returns the interface it marked.
func Mark(m Marking, ifaces []net.Interface, run Runner) (string, error) {
	if m.DSCP < 0 || m.DSCP > 63 {
		return "", fmt.Errorf("DSCP %d is not a 6-bit code point", m.DSCP)
	}
	mac, err := net.ParseMAC(m.MAC)
	if err != nil {
		return "", fmt.Errorf("--dscp-mac: %w", err)
	}
	dev := ""
	for _, i := range ifaces {
		if bytes.Equal(i.HardwareAddr, mac) {
			dev = i.Name
			break
		}
	}
	if dev == "" {
		return "", fmt.Errorf("no NIC with MAC %s", mac)
	}
	ruleset := fmt.Sprintf(`table inet isochron { chain post { type filter hook postrouting priority -150; oifname "%s" ip dscp set %d; oifname "%s" ip6 dscp set %d; } }`, dev, m.DSCP, dev, m.DSCP)
	nftErr := run(ruleset+"\n", "nft", "-f", "-")
	if nftErr == nil {
		return dev, nil
	}
	dscp := fmt.Sprint(m.DSCP)
	if err := run("", "iptables", "-t", "mangle", "-A", "POSTROUTING", "-o", dev, "-j", "DSCP", "--set-dscp", dscp); err != nil {
		return "", errors.Join(nftErr, err)
	}
	// IPv6 is marked where the guest has it; a guest without ip6tables has no IPv6 to mark.
	_ = run("", "ip6tables", "-t", "mangle", "-A", "POSTROUTING", "-o", dev, "-j", "DSCP", "--set-dscp", dscp)
	return dev, nil
}
