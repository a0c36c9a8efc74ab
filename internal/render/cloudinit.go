package render

import (
	"fmt"
	"path"
	"strings"

	"isochron.io/isochron/internal/rtnet"
)

// mimeBoundary separates the parts of a combined user-data document. It is fixed so the
// rendering is deterministic; it cannot occur in a user's part (checked).
const mimeBoundary = "==isochron-5f1d=="

// marking is the DSCP class the agent sets on the RT-NIC's traffic.
type marking struct {
	mac   string
	class rtnet.DSCP
}

// AgentKeyFile is where isochron's cloud-init part writes the crawler's probe key in the
// guest (root only), and the agent reads it (--key-file).
const AgentKeyFile = "/etc/isochron/probe-key"

// agentScript starts isochron's probe agent in the guest, as cloud-init runs it: it
// copies the agent from its disk (a raw disk holding the static binary), writes the
// crawler's probe key (key, hex; none without one) to AgentKeyFile, readable by root
// alone, and runs the agent as a systemd service (each boot) where the guest has systemd,
// in the background otherwise. With an RT-NIC the agent also marks its traffic with the
// DSCP class of its deadline. The line a="agent ..." holds the agent's arguments and the
// line k=... the key (the e2e guest reads both).
func agentScript(gateways []string, m *marking, key string) string {
	args := "agent --gateway=" + strings.Join(gateways, ",")
	keyLines := ""
	if key != "" {
		args += " --key-file=" + AgentKeyFile
		keyLines = fmt.Sprintf("k=%s\nmkdir -p %s; (umask 077; echo $k >%s)\n", key, path.Dir(AgentKeyFile), AgentKeyFile)
	}
	if m != nil {
		args += fmt.Sprintf(" --dscp=%d --dscp-mac=%s", m.class.Value, m.mac)
	}
	return fmt.Sprintf(`#!/bin/sh
# isochron: probe agent (docs/probes.md)
b=/usr/local/bin/isochron-agent
dd if=/dev/disk/by-id/virtio-%[1]s of=$b bs=1M 2>/dev/null; chmod 755 $b
%[3]sa="%[2]s"
if [ -d /run/systemd/system ]; then
printf '[Service]\nExecStart=%%s %%s\nRestart=always\nRestartSec=10\n[Install]\nWantedBy=multi-user.target\n' $b "$a" >/etc/systemd/system/isochron-agent.service
systemctl enable --now isochron-agent
else nohup $b $a >>/var/log/isochron-agent.log 2>&1 & fi
`, VolumeAgent, args, keyLines)
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
