// Command guest is the whole userland of the e2e guest (docs/dev/e2e.md, stage 3): a static
// PID 1 that e2e/guest/image.sh puts as /init into an initramfs next to
// Debian's kernel, on a disk that KubeVirt boots from a containerDisk.
//
// The local cluster runs QEMU in software emulation (TCG), so timing inside the guest
// means nothing; the guest only has to boot fast, stay up and answer the probe. It:
//
//   - mounts /proc, /sys and /dev (devtmpfs) and makes /dev/console its stdin, stdout
//     and stderr;
//   - loads the kernel modules the image ships in /modules, in name order (Debian builds
//     virtio-net and virtio-blk as modules; the script prefixes the files so
//     dependencies come first);
//   - prints "isochron-e2e-guest: up" and the kernel release, the line the tests and
//     humans wait for on the serial console;
//   - brings lo and the first ethernet interface up and, when the kernel command line
//     has isochron.ip=ADDR/PREFIX (and optionally isochron.gw=GW), gives it that address
//     and default route over rtnetlink. It asks no DHCP server there: KubeVirt's
//     masquerade binding always hands out 10.0.2.2/24 via 10.0.2.1, which the image's
//     default command line sets statically;
//   - brings every other ethernet interface up (the RT-NIC: KubeVirt's bridge binding on
//     a Multus network) and gives it the address and prefix of a DHCPv4 lease, but no
//     route: the first interface keeps the default route (dhcp.go);
//   - answers UDP echo (RFC 862, port 7) for the probe's round trips;
//   - relays UDP on port 8: "ADDR:PORT DATA" sends DATA to ADDR:PORT and answers with
//     "from ADDR:PORT REPLY", "timeout ADDR:PORT" or "error WHY", so that the e2e suite
//     can show UDP between two crawlers over the RT network (relay.go);
//   - runs isochron's probe agent as a cloud image's cloud-init would run isochron's
//     part of the user data (agent.go);
//   - reaps zombies and never exits, since the kernel panics when PID 1 does.
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"isochron.io/isochron/internal/vminit"
)

const (
	prefix     = "isochron-e2e-guest: "
	modulesDir = "/modules"
	echoPort   = 7
)

func main() {
	vminit.MountAll(logf)
	vminit.UseConsole(logf)
	vminit.LoadModules(modulesDir, logf)
	fmt.Printf("%sup (kernel %s)\n", prefix, vminit.KernelRelease())

	if err := setLinkUp("lo"); err != nil {
		logf("lo: %v", err)
	}
	if first := configureNetwork(); first != 0 {
		go configureOtherNICs(first)
	}
	go echo()
	go relay()
	go startAgent()
	reap()
}

func logf(format string, args ...any) {
	fmt.Printf(prefix+format+"\n", args...)
}

// netConfig is the static address the kernel command line asks for.
type netConfig struct {
	Addr netip.Prefix // invalid: leave the interface unaddressed
	GW   netip.Addr   // invalid: no default route
}

// parseCmdline reads isochron.ip=ADDR/PREFIX and isochron.gw=GW (IPv4) from a kernel
// command line.
func parseCmdline(cmdline string) (netConfig, error) {
	var c netConfig
	for _, field := range strings.Fields(cmdline) {
		key, value, _ := strings.Cut(field, "=")
		var err error
		switch key {
		case "isochron.ip":
			c.Addr, err = netip.ParsePrefix(value)
			if err == nil && !c.Addr.Addr().Is4() {
				err = fmt.Errorf("%s is not IPv4", value)
			}
		case "isochron.gw":
			c.GW, err = netip.ParseAddr(value)
			if err == nil && !c.GW.Is4() {
				err = fmt.Errorf("%s is not IPv4", value)
			}
		}
		if err != nil {
			return netConfig{}, fmt.Errorf("%s: %w", key, err)
		}
	}
	if c.GW.IsValid() && !c.Addr.IsValid() {
		return netConfig{}, errors.New("isochron.gw without isochron.ip")
	}
	return c, nil
}

// configureNetwork configures the first ethernet interface as the kernel command line
// says and returns its index, 0 when there is none.
func configureNetwork() int {
	ifc, err := firstEthernet(3 * time.Second)
	if err != nil {
		logf("network: %v", err)
		return 0
	}
	configureFirst(ifc)
	return ifc.Index
}

// configureFirst brings ifc up and gives it the address and default route of the kernel
// command line.
func configureFirst(ifc net.Interface) {
	if err := setLinkUp(ifc.Name); err != nil {
		logf("%s: %v", ifc.Name, err)
		return
	}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	c, err := parseCmdline(string(cmdline))
	if err != nil {
		logf("kernel command line: %v", err)
		return
	}
	if !c.Addr.IsValid() {
		logf("%s up, no isochron.ip on the kernel command line", ifc.Name)
		return
	}
	if err := netlinkDo(unix.RTM_NEWADDR, create, addrMessage(ifc.Index, c.Addr)); err != nil && !errors.Is(err, unix.EEXIST) {
		logf("%s: address %s: %v", ifc.Name, c.Addr, err)
		return
	}
	if c.GW.IsValid() {
		if err := netlinkDo(unix.RTM_NEWROUTE, create, defaultRouteMessage(ifc.Index, c.GW)); err != nil && !errors.Is(err, unix.EEXIST) {
			logf("%s: default route via %s: %v", ifc.Name, c.GW, err)
			return
		}
	}
	logf("%s %s gw %s", ifc.Name, c.Addr, c.GW)
}

// firstEthernet waits for the lowest-indexed interface with a MAC address: the NIC's
// driver may still be probing when init gets here.
func firstEthernet(wait time.Duration) (net.Interface, error) {
	deadline := time.Now().Add(wait)
	for {
		ifcs, err := net.Interfaces()
		if err != nil {
			return net.Interface{}, err
		}
		for _, ifc := range ifcs {
			if ifc.Flags&net.FlagLoopback == 0 && len(ifc.HardwareAddr) == 6 {
				return ifc, nil
			}
		}
		if time.Now().After(deadline) {
			return net.Interface{}, fmt.Errorf("no ethernet interface after %s", wait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func setLinkUp(name string) error {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return err
	}
	return netlinkDo(unix.RTM_NEWLINK, 0, linkUpMessage(ifc.Index))
}

// linkUpMessage is a struct ifinfomsg that sets IFF_UP.
func linkUpMessage(index int) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	b[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	binary.NativeEndian.PutUint32(b[8:], unix.IFF_UP)  // flags
	binary.NativeEndian.PutUint32(b[12:], unix.IFF_UP) // change
	return b
}

// addrMessage is a struct ifaddrmsg with IFA_LOCAL and IFA_ADDRESS.
func addrMessage(index int, p netip.Prefix) []byte {
	b := make([]byte, unix.SizeofIfAddrmsg)
	b[0] = unix.AF_INET
	b[1] = byte(p.Bits())
	b[3] = unix.RT_SCOPE_UNIVERSE
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	ip := p.Addr().As4()
	b = appendAttr(b, unix.IFA_LOCAL, ip[:])
	return appendAttr(b, unix.IFA_ADDRESS, ip[:])
}

// defaultRouteMessage is a struct rtmsg for 0.0.0.0/0 via gw on interface index.
func defaultRouteMessage(index int, gw netip.Addr) []byte {
	b := make([]byte, unix.SizeofRtMsg)
	b[0] = unix.AF_INET
	b[4] = unix.RT_TABLE_MAIN
	b[5] = unix.RTPROT_BOOT
	b[6] = unix.RT_SCOPE_UNIVERSE
	b[7] = unix.RTN_UNICAST
	ip := gw.As4()
	b = appendAttr(b, unix.RTA_GATEWAY, ip[:])
	return appendAttr(b, unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, uint32(index)))
}

// appendAttr appends a struct rtattr, padded to 4 bytes.
func appendAttr(b []byte, typ uint16, data []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(unix.SizeofRtAttr+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// create are the netlink flags of a request that adds an address or route.
const create = unix.NLM_F_CREATE | unix.NLM_F_EXCL

// netlinkDo sends one rtnetlink request and waits for its acknowledgement.
func netlinkDo(typ, flags uint16, body []byte) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	msg := binary.NativeEndian.AppendUint32(nil, uint32(unix.SizeofNlMsghdr+len(body)))
	msg = binary.NativeEndian.AppendUint16(msg, typ)
	msg = binary.NativeEndian.AppendUint16(msg, unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
	msg = binary.NativeEndian.AppendUint32(msg, 1) // seq
	msg = binary.NativeEndian.AppendUint32(msg, 0) // pid: the kernel fills it in
	msg = append(msg, body...)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	if n < unix.SizeofNlMsghdr+4 || binary.NativeEndian.Uint16(buf[4:]) != unix.NLMSG_ERROR {
		return fmt.Errorf("unexpected netlink reply (%d bytes)", n)
	}
	if errno := -int32(binary.NativeEndian.Uint32(buf[unix.SizeofNlMsghdr:])); errno != 0 {
		return unix.Errno(errno)
	}
	return nil
}

// echo answers UDP echo requests on every address, forever.
func echo() {
	for {
		conn, err := net.ListenUDP("udp", &net.UDPAddr{Port: echoPort})
		if err != nil {
			logf("udp echo: %v", err)
			time.Sleep(time.Second)
			continue
		}
		logf("udp echo on port %d", echoPort)
		buf := make([]byte, 65536)
		for {
			n, peer, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				logf("udp echo: %v", err)
				break
			}
			_, _ = conn.WriteToUDPAddrPort(buf[:n], peer)
		}
		conn.Close()
	}
}

// reap waits for orphans re-parented to PID 1, forever.
func reap() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGCHLD)
	for {
		for {
			var ws unix.WaitStatus
			if pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
		select {
		case <-sigs:
		case <-time.After(time.Minute):
		}
	}
}
