#!/usr/bin/env bash
# Builds the network lab's VM (docs/dev/netlab.md): Debian's kernel, fetched as the e2e guest's
# (e2e/guest/debian-kernel.sh: the package behind linux-image-amd64, with apt-get download, nothing else
# downloaded), and an initramfs holding the lab's static binary as /init, internal/nic's
# test binary as /nic.test and the kernel modules the lab needs, numbered so that name
# order is load order:
#
#   hack/netlab/initramfs.sh NETLAB_BINARY NIC_TEST_BINARY WORKDIR
#
# WORKDIR (make netlab: bin/netlab) caches the kernel and its modules, so reruns download
# nothing, and receives vmlinuz and initrd.gz, which `netlab -kernel -initrd` boots.
set -euo pipefail

die() { echo "netlab-initramfs: $*" >&2; exit 1; }
log() { echo "netlab-initramfs: $*" >&2; }
[[ $# -eq 3 ]] || die "usage: $0 NETLAB_BINARY NIC_TEST_BINARY WORKDIR"
init=$1 nictest=$2 workdir=$3
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for f in "$init" "$nictest"; do
  [[ -f $f && -x $f ]] || die "$f is not an executable file"
done
# The lab's links and queueing: veth pairs, bridges (the node's and the wire's), HTB and
# its u32 filters (the agent's schedule), netem (the wire), nf_tables (the agent's DSCP
# marking on the uplink's egress hook) with crc32c_generic, which its dependency libcrc32c
# asks the crypto API for (a soft dependency modinfo's depends= does not name). bfifo is
# built in.
modules=(veth bridge sch_htb sch_netem cls_u32 crc32c_generic nf_tables)
# Built-in options the lab cannot run without.
required_config=(CONFIG_SERIAL_8250_CONSOLE CONFIG_BLK_DEV_INITRD CONFIG_RD_GZIP CONFIG_DEVTMPFS CONFIG_NET_NS
  CONFIG_NET_SCH_FIFO CONFIG_NETFILTER_EGRESS CONFIG_NF_TABLES_NETDEV)

mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
build=$(mktemp -d "$workdir/build.XXXXXX")
trap 'rm -rf "$build"' EXIT

# --- kernel: the versioned package behind linux-image-amd64 -------------------------------
# shellcheck source=e2e/guest/debian-kernel.sh
source "$repo/e2e/guest/debian-kernel.sh"
debian_kernel "$workdir" "$build"

# --- initramfs: /init, /nic.test, /dev/console, /modules ---------------------------------
mkdir -p "$build/initramfs"
cp "$nictest" "$build/initramfs/nic.test" && chmod 0755 "$build/initramfs/nic.test"
initramfs "$build/initramfs" "$init" "$workdir/initrd.gz"
cp "$kdir/vmlinuz" "$workdir/vmlinuz"

size() { du -h --apparent-size "$1" | cut -f1; }
echo "netlab-initramfs: $workdir/vmlinuz ($kpkg, $(size "$workdir/vmlinuz")), $workdir/initrd.gz ($(size "$workdir/initrd.gz"))"
