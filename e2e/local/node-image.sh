#!/usr/bin/env bash
# Builds what the local cluster's node VMs boot (docs/dev/e2e.md, "Nodes that are VMs"):
#
#   SUITE=trixie e2e/local/node-image.sh OUT_DIR
#
# OUT_DIR/rootfs.img (ext4, the base every node's copy-on-write disk starts from),
# OUT_DIR/vmlinuz and OUT_DIR/initrd.img: Debian SUITE as a real node has it, booted by
# systemd, with Debian's kernel and its modules (qdiscs, dummy, bridge, vhost), containerd,
# runc, the CNI plugins and iptables from Debian's packages. Nothing of the cluster is in
# the image: isochron-node.service runs /isochron/node/boot.sh from the node's own 9p
# share (nodes-up.sh writes it: its name, addresses, certificates, the kubelet's
# configuration), and the kubelet, kube-proxy, Multus and whereabouts come from a second
# share of the binaries make built. So the image is built once per suite and package
# list (OUT_DIR/done records them), and a rebuilt kubelet needs no new image.
set -euo pipefail

die() { echo "node-image: $*" >&2; exit 1; }
[[ $# -eq 1 ]] || die "usage: $0 OUT_DIR"
out=$1
[[ -n ${SUITE:-} ]] || die "SUITE (the Debian suite) is not set: run make e2e-local-node-image, which passes E2E_NODE_SUITE"
mirror=${MIRROR:-http://deb.debian.org/debian}
# The root filesystem's size: the base system (about 700 MB) and containerd's copy of
# the cluster's images (KubeVirt's, about 1.1 GB as archives, twice that unpacked).
size=${NODE_DISK_SIZE:-12G}

packages=(
  # A node as Debian boots one: systemd, udev (device nodes, /dev/vhost-net), kmod
  # (modprobe: the kubelet, kube-proxy and KubeVirt load modules), the kernel.
  systemd systemd-sysv udev kmod dbus linux-image-amd64 initramfs-tools
  # The container runtime and pod networking, as the local cluster's host has them.
  containerd runc containernetworking-plugins iptables nftables iproute2 conntrack ethtool
  # What the kubelet and KubeVirt's virt-handler run on the node (mount, findmnt,
  # nsenter, ps), and the checks' tools.
  util-linux mount procps e2fsprogs ca-certificates iputils-ping
)
stamp="$SUITE ${packages[*]} $size"
if [[ -f $out/done && $(cat "$out/done") == "$stamp" ]]; then
  echo "node-image: $out is up to date"
  exit 0
fi
[[ $(id -u) -eq 0 ]] || die "needs root (mmdebstrap --mode=root)"

start=$SECONDS
# A build interrupted inside mmdebstrap leaves the chroot's /proc, /sys and /dev mounts
# behind, which rm cannot remove: unmount them first, deepest first.
abs=$(realpath -m "$out")
awk -v p="$abs/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do umount "$m"; done
rm -rf "$out" && mkdir -p "$out"
root=$out/root
# The boot unit and the mounts of the two shares. The node's own boot script is in its
# share, so the image does not change with it.
hooks=$(mktemp -d)
trap 'rm -rf "$hooks"' EXIT
cat >"$hooks/fstab" <<'FSTAB'
/dev/vda  /                ext4  defaults,noatime                          0 1
isonode   /isochron/node   9p    trans=virtio,version=9p2000.L,ro,nofail    0 0
isobin    /isochron/bin    9p    trans=virtio,version=9p2000.L,ro,nofail,msize=1048576  0 0
FSTAB
cat >"$hooks/isochron-node.service" <<'UNIT'
[Unit]
Description=isochron e2e node: network, containerd, kube-proxy and the kubelet (boot.sh in the node's share)
RequiresMountsFor=/isochron/node /isochron/bin
After=systemd-modules-load.service local-fs.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/bash /isochron/node/boot.sh
StandardOutput=journal+console
StandardError=journal+console
[Install]
WantedBy=multi-user.target
UNIT

# --variant=apt: essential packages plus apt, no recommends. The hooks: the fstab and
# the unit; containerd starts from boot.sh with the cluster's configuration, not from
# its package's unit; the package caches go; the initramfs gets the virtio drivers.
# shellcheck disable=SC2016 # "$1" is the hook's argument, expanded by mmdebstrap's shell
mmdebstrap --quiet --variant=apt --mode=root --format=directory \
  --include="$(IFS=,; echo "${packages[*]}")" \
  --customize-hook="copy-in $hooks/fstab /etc" \
  --customize-hook="copy-in $hooks/isochron-node.service /etc/systemd/system" \
  --customize-hook='mkdir -p "$1/isochron/node" "$1/isochron/bin"' \
  --customize-hook='chroot "$1" systemctl enable isochron-node.service' \
  --customize-hook='chroot "$1" systemctl disable containerd.service' \
  --customize-hook='chroot "$1" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer' \
  --customize-hook='printf "virtio_pci\nvirtio_blk\nvirtio_net\next4\n" >>"$1/etc/initramfs-tools/modules"' \
  --customize-hook='chroot "$1" update-initramfs -u -k all' \
  --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
  "$SUITE" "$root" "$mirror"

cp "$root"/boot/vmlinuz-* "$out/vmlinuz"
cp "$root"/boot/initrd.img-* "$out/initrd.img"
# An ext4 image of the tree, without mounting anything (mke2fs -d).
mke2fs -q -t ext4 -L isonode -d "$root" "$out/rootfs.img" "$size"
rm -rf "$root"
echo "$stamp" >"$out/done"
echo "node-image: Debian $SUITE, ${#packages[@]} packages -> $out ($(du -sh "$out/rootfs.img" | cut -f1) used of $size, $((SECONDS - start)) s)"
