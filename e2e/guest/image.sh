#!/usr/bin/env bash
# Builds the e2e guest (docs/dev/e2e.md, stage 3) as a KubeVirt containerDisk image, as a
# `docker save` archive that `ctr images import` reads:
#
#   e2e/guest/image.sh REF GUEST_INIT_BINARY OUT.tar [WORKDIR]
#
# GUEST_INIT_BINARY is the static PID 1 of e2e/guest (CGO_ENABLED=0 go build). The
# guest is Debian bookworm's kernel (the package behind linux-image-amd64, fetched with
# apt-get download, nothing else downloaded) plus an initramfs holding only that init and
# the virtio-net modules, on a raw disk that SeaBIOS boots: syslinux's MBR, one bootable
# FAT partition at 1 MiB with syslinux, vmlinuz, initrd.gz and syslinux.cfg, written with
# mtools (no loop device, no mount). The image has one layer, /disk/disk.img owned by
# qemu (107:107), mode 0440, as KubeVirt's containerDisk documentation asks.
#
# WORKDIR (default bin/e2e-local/guest) caches the kernel, so reruns download nothing, and
# keeps initrd.gz and disk.img for booting by hand:
#
#   qemu-system-x86_64 -accel tcg -m 256 -nographic -no-reboot \
#     -drive file=WORKDIR/disk.img,format=raw,if=virtio -nic user,model=virtio-net-pci
#
# GUEST_KERNEL_ARGS is appended to the kernel command line; its default gives the first
# NIC the address KubeVirt's masquerade binding expects (the guest has no DHCP client).
set -euo pipefail

die() { echo "guest-image: $*" >&2; exit 1; }
log() { echo "guest-image: $*" >&2; }
[[ $# -eq 3 || $# -eq 4 ]] || die "usage: $0 REF GUEST_INIT_BINARY OUT.tar [WORKDIR]"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ref=$1 init=$2 out=$3 workdir=${4:-$repo/bin/e2e-local/guest}
kernel_args=${GUEST_KERNEL_ARGS-isochron.ip=10.0.2.2/24 isochron.gw=10.0.2.1}
[[ -f $init && -x $init ]] || die "$init is not an executable file"
# The NIC's and the disks' drivers (the agent's disk and the NoCloud disk) and what they
# need; built-in ones (modules.builtin) are skipped.
modules=(virtio_pci virtio_net virtio_blk)
# Built-in options the guest cannot boot without: serial console, gzip initramfs, devtmpfs.
required_config=(CONFIG_SERIAL_8250_CONSOLE CONFIG_BLK_DEV_INITRD CONFIG_RD_GZIP CONFIG_DEVTMPFS CONFIG_INET)
mbr=/usr/lib/syslinux/mbr/mbr.bin

# syslinux, mtools, dosfstools, fdisk and cpio come from Debian: e2e/prereqs.sh local.
[[ -e $mbr ]] || die "$mbr is missing: e2e/prereqs.sh local installs syslinux (make e2e-local-prereqs)"

mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
build=$(mktemp -d "$workdir/build.XXXXXX")
trap 'rm -rf "$build"' EXIT

# --- kernel: the versioned package behind linux-image-amd64 -------------------------------
# shellcheck source=e2e/guest/debian-kernel.sh
source "$repo/e2e/guest/debian-kernel.sh"
debian_kernel "$workdir" "$build"

# --- initramfs: /init, /dev/console, /modules -------------------------------------------
initramfs "$build/initramfs" "$init" "$workdir/initrd.gz"

# --- disk: MBR, bootable FAT partition at 1 MiB, syslinux --------------------------------
cat >"$build/syslinux.cfg" <<EOF
DEFAULT linux
PROMPT 0
TIMEOUT 0
LABEL linux
  KERNEL vmlinuz
  INITRD initrd.gz
  APPEND console=ttyS0 quiet panic=-1 $kernel_args
EOF
cp "$kdir/vmlinuz" "$build/vmlinuz" && cp "$workdir/initrd.gz" "$build/initrd.gz"
touch -d '2000-01-01T00:00:00Z' "$build/vmlinuz" "$build/initrd.gz" "$build/syslinux.cfg"
payload=$(du -cb "$build/vmlinuz" "$build/initrd.gz" | tail -n1 | cut -f1)
part_mib=$((payload / 1048576 + 2)) # + room for ldlinux.sys/.c32 and the FAT itself
disk=$workdir/disk.img
rm -f "$disk" && truncate -s $(((part_mib + 1) * 1048576)) "$disk"
printf 'label: dos\nlabel-id: 0x15c40c42\nstart=2048, type=6, bootable\n' |
  sfdisk --quiet --no-reread --no-tell-kernel "$disk"
dd if="$mbr" of="$disk" bs=440 count=1 conv=notrunc status=none
mkfs.fat --invariant -F 16 --offset 2048 -i 15c40c42 -n ISOCHRON "$disk" $((part_mib * 1024)) >/dev/null
export MTOOLS_SKIP_CHECK=1 SOURCE_DATE_EPOCH=946684800
syslinux --offset 1048576 --install "$disk"
mcopy -m -i "$disk@@1M" "$build/vmlinuz" "$build/initrd.gz" "$build/syslinux.cfg" ::

# --- containerDisk image: one layer with disk/disk.img -----------------------------------
mkdir -p "$build/layer/disk"
cp "$disk" "$build/layer/disk/disk.img"
chmod 0755 "$build/layer/disk" && chmod 0440 "$build/layer/disk/disk.img"
tar --sort=name --owner=107 --group=107 --numeric-owner --mtime=@0 \
  -C "$build/layer" -cf "$build/layer.tar" disk
# No entrypoint: KubeVirt runs its own container-disk binary in this container.
"$repo/e2e/local/layers-archive.sh" "$ref" "$out" '{}' "$build/layer.tar" >/dev/null

size() { du -h --apparent-size "$1" | cut -f1; }
log "vmlinuz $(size "$kdir/vmlinuz"), $workdir/initrd.gz $(size "$workdir/initrd.gz"), $disk $(size "$disk")"
echo "guest-image: $ref ($kpkg) -> $out ($(size "$out"))"
