package agent

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMark(t *testing.T) {
	mac, _ := net.ParseMAC("02:0f:74:7b:32:db")
	ifaces := []net.Interface{{Name: "lo"}, {Name: "eth0", HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 1}}, {Name: "eth1", HardwareAddr: mac}}
	cases := map[string]struct {
		m       Marking
		fail    map[string]bool // commands that fail
		dev     string
		ran     []string
		wantErr string
	}{
		"nftables": {
			m: Marking{MAC: "02:0F:74:7B:32:DB", DSCP: 46}, dev: "eth1",
			ran: []string{`nft -f - < table inet isochron { chain post { type filter hook postrouting priority -150; oifname "eth1" ip dscp set 46; oifname "eth1" ip6 dscp set 46; } }`},
		},
		"iptables without nftables": {
			m: Marking{MAC: "02:0f:74:7b:32:db", DSCP: 34}, fail: map[string]bool{"nft": true}, dev: "eth1",
			ran: []string{
				`nft -f - < table inet isochron { chain post { type filter hook postrouting priority -150; oifname "eth1" ip dscp set 34; oifname "eth1" ip6 dscp set 34; } }`,
				"iptables -t mangle -A POSTROUTING -o eth1 -j DSCP --set-dscp 34",
				"ip6tables -t mangle -A POSTROUTING -o eth1 -j DSCP --set-dscp 34",
			},
		},
		"neither": {
			m: Marking{MAC: "02:0f:74:7b:32:db", DSCP: 46}, fail: map[string]bool{"nft": true, "iptables": true},
			ran:     []string{"nft", "iptables"},
			wantErr: "iptables failed",
		},
		"no such NIC":      {m: Marking{MAC: "02:00:00:00:00:99", DSCP: 46}, wantErr: "no NIC with MAC 02:00:00:00:00:99"},
		"not a code point": {m: Marking{MAC: "02:0f:74:7b:32:db", DSCP: 64}, wantErr: "not a 6-bit code point"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var ran []string
			run := func(stdin, cmd string, args ...string) error {
				line := strings.Join(append([]string{cmd}, args...), " ")
				if stdin != "" {
					line += " < " + strings.TrimSpace(stdin)
				}
				if tc.wantErr != "" && tc.ran != nil {
					line = cmd // the failing cases compare the commands tried only
				}
				ran = append(ran, line)
				if tc.fail[cmd] {
					return errors.New(cmd + " failed")
				}
				return nil
			}
			dev, err := Mark(tc.m, ifaces, run)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Mark error %v, want %q", err, tc.wantErr)
				}
			} else if err != nil || dev != tc.dev {
				t.Fatalf("Mark = %q, %v; want %q", dev, err, tc.dev)
			}
			if diff := cmp.Diff(tc.ran, ran); diff != "" {
				t.Errorf("commands (-want +got):\n%s", diff)
			}
		})
	}
}
