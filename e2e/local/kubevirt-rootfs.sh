#!/usr/bin/env bash
# Writes the Debian root filesystem that the local cluster's virt-launcher and
# virt-handler images share (docs/dev/e2e.md, stage 3), as one layer tar:
#
#   e2e/local/kubevirt-rootfs.sh OUT.tar
#
# KubeVirt's own images are CentOS Stream with libvirt 10/11 and QEMU 9/10; no image
# can be pulled here, so the same programs come from Debian's packages instead
# (SUITE, the Makefile pins trixie: libvirt 11.3, QEMU 10.0; bookworm's libvirt 9.0 and QEMU 7.2
# are older than what KubeVirt 1.8 is tested with). mmdebstrap writes the tar directly,
# without a container engine. Debian ships no modular daemons (no virtqemud): the
# launcher layer of kubevirt-images.sh runs libvirtd under that name.
set -euo pipefail

die() { echo "kubevirt-rootfs: $*" >&2; exit 1; }
[[ $# -eq 1 ]] || die "usage: $0 OUT.tar"
out=$1
[[ -n ${SUITE:-} ]] || die "SUITE (the Debian suite) is not set: run make e2e-local-kubevirt-images, which passes E2E_KUBEVIRT_SUITE"
suite=$SUITE
mirror=${MIRROR:-http://deb.debian.org/debian}

# What virt-launcher and virt-handler execute (exec.Command in KubeVirt v1.8.4's pkg/
# and cmd/, the node-labeller script, and KubeVirt's rpm lists): libvirtd and virtlogd,
# virsh, QEMU and qemu-img, xorrisofs (cloud-init disks), findmnt, nft/iptables,
# sysctl, tar, bash.
packages=(
  libvirt-daemon libvirt-daemon-driver-qemu libvirt-daemon-log libvirt-clients
  qemu-system-x86 qemu-utils xorriso
  bash coreutils util-linux mount procps iproute2 nftables iptables tar findutils grep sed
  ca-certificates
)

[[ $(id -u) -eq 0 ]] || die "needs root (mmdebstrap --mode=root)"

mkdir -p "$(dirname "$out")"
start=$SECONDS
# --variant=apt: essential packages plus apt; no recommends. Device nodes are left
# out (the runtime creates /dev), so the layer unpacks the same everywhere.
# shellcheck disable=SC2016 # "$1" is the hook's argument, expanded by mmdebstrap's shell
mmdebstrap --quiet --variant=apt --mode=root --format=tar \
  --include="$(IFS=,; echo "${packages[*]}")" \
  --skip=output/dev --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
  "$suite" "$out.tmp" "$mirror"
mv "$out.tmp" "$out"
echo "kubevirt-rootfs: Debian $suite with ${#packages[@]} packages -> $out ($(du -h "$out" | cut -f1), $((SECONDS - start)) s)"
