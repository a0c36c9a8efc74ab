package main

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"

	"isochron.io/isochron/controllers/nicagent"
	"isochron.io/isochron/internal/nic"
)

// host is the agent's Programmer on a node: netlink and nftables through package nic, in
// the agent's (the host's) network namespace.
type host struct {
	mu sync.Mutex
	// schedules are what Apply last made each link's egress, for Stats.
	schedules map[string]nic.Schedule
}

func newHost() *host { return &host{schedules: map[string]nic.Schedule{}} }

// Port is the bridge's one port that is neither a VM's tap nor a pod's veth: the
// interface by which its traffic leaves the node.
func (h *host) Port(bridge string) (string, error) {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return "", fmt.Errorf("no bridge %s on this node: %w", bridge, err)
	}
	links, err := netlink.LinkList()
	if err != nil {
		return "", err
	}
	var ports []port
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			ports = append(ports, port{name: l.Attrs().Name, kind: l.Type()})
		}
	}
	return uplinkOf(bridge, ports)
}

// port is a link enslaved to a bridge: its name and netlink kind.
type port struct{ name, kind string }

// uplinkOf is the one port of bridge that is neither a pod's veth nor a VM's tap.
func uplinkOf(bridge string, ports []port) (string, error) {
	var candidates []string
	for _, p := range ports {
		switch p.kind {
		case "veth", "tuntap", "tun", "macvtap":
			continue // a pod's or a VM's end
		}
		candidates = append(candidates, p.name)
	}
	switch len(candidates) {
	case 1:
		return candidates[0], nil
	case 0:
		return "", fmt.Errorf("bridge %s has no port but VMs' and pods'", bridge)
	default:
		return "", fmt.Errorf("bridge %s has several uplink candidates (%s)", bridge, strings.Join(candidates, ", "))
	}
}

// Apply makes link's egress the schedule of flows; none removes isochron's.
func (h *host) Apply(link string, linkRate int64, flows []nicagent.Flow) error {
	l, err := netlink.LinkByName(link)
	if err != nil {
		return fmt.Errorf("no interface %s on this node: %w", link, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(flows) == 0 {
		delete(h.schedules, link)
		_, err := nic.Remove(l)
		return err
	}
	s, err := nic.Plan(linkRate, flows)
	if err != nil {
		return err
	}
	if _, err := nic.Apply(l, s); err != nil {
		return err
	}
	h.schedules[link] = s
	return nil
}

// Programmed lists the links with isochron's schedule.
func (h *host) Programmed() ([]string, error) { return nic.Programmed() }

// Stats are the drops of each flow's class on link since Apply created it.
func (h *host) Stats(link string) (map[string]nicagent.FlowStats, error) {
	h.mu.Lock()
	s, ok := h.schedules[link]
	h.mu.Unlock()
	if !ok {
		return nil, errors.New("no schedule applied to " + link)
	}
	l, err := netlink.LinkByName(link)
	if err != nil {
		return nil, err
	}
	c, err := nic.Stats(l, s)
	if err != nil {
		return nil, err
	}
	out := make(map[string]nicagent.FlowStats, len(c.Flows))
	for k, st := range c.Flows {
		out[k] = nicagent.FlowStats{Drops: st.Drops}
	}
	return out, nil
}
