// Command netlab is the network lab (docs/dev/netlab.md): the RTvNIC study's comparison on
// real Linux queueing. Two RT flows (the study's 5 ms and 10 ms deadlines, stretched in
// time by the lab's scale, each within its minimum bandwidth) and a best-effort flow that
// saturates the uplink cross a bridge and the uplink to a wire at a line rate: alone
// (floor), with the kernel's default on the uplink (baseline), then with the NIC agent's
// schedule (internal/nic's Plan and Apply). A receiver at the far end timestamps every
// packet.
//
// The same binary is both sides. As PID 1 of an initramfs next to Debian's kernel
// (hack/netlab/initramfs.sh) it is the VM: it runs internal/nic's tests on that kernel,
// builds the lab in network namespaces, runs the three measurements and reports them on
// the serial console. On the host,
//
//	netlab -kernel bin/netlab/vmlinuz -initrd bin/netlab/initrd.gz [-duration 60s]
//
// boots that VM under QEMU's software emulation (TCG), reads its console and prints the
// table, with the contention model's predicted worst case of each RT flow beside what
// was measured (make netlab does all of it).
package main

import (
	"os"
)

func main() {
	if os.Getpid() == 1 {
		guest()
		return
	}
	os.Exit(host(os.Args[1:]))
}
