#!/usr/bin/env bash
# Writes KubeVirt's images for the local cluster (docs/dev/e2e.md, stage 3) as `docker save`
# archives, from binaries built from the kubevirt.io/kubevirt Go module and Debian's
# libvirt and QEMU, without a container engine or a registry:
#
#   KV_BIN=... KV_SRC=... ROOTFS=... e2e/local/kubevirt-images.sh OUTDIR
#
#   KV_BIN   directory of the built binaries (virt-operator ... container-disk)
#   KV_SRC   the kubevirt.io/kubevirt module directory (libvirt configs, node-labeller.sh)
#   ROOTFS   the Debian layer of kubevirt-rootfs.sh (virt-handler and virt-launcher)
#   TAG      the images' tag, KUBEVIRT_VERSION (make passes it)
#   REGISTRY image names REGISTRY/<component>:TAG (default localhost/kubevirt)
#
# virt-operator, virt-api and virt-controller are one static binary each, FROM scratch
# with /etc/passwd and /tmp, user 1001 as upstream. virt-handler and virt-launcher are the Debian layer plus a layer
# laid out as upstream's cmd/virt-{handler,launcher}/BUILD.bazel, with one difference:
# Debian builds no virtqemud, so /usr/sbin/virtqemud starts Debian's libvirtd under
# that name (see the wrapper below).
set -euo pipefail

die() { echo "kubevirt-images: $*" >&2; exit 1; }
[[ $# -eq 1 ]] || die "usage: KV_BIN=... KV_SRC=... ROOTFS=... $0 OUTDIR"
out=$1
: "${KV_BIN:?}" "${KV_SRC:?}" "${ROOTFS:?}"
[[ -n ${TAG:-} ]] || die "TAG is not set: run make e2e-local-kubevirt-images, which passes KUBEVIRT_VERSION"
registry=${REGISTRY:-localhost/kubevirt} tag=$TAG
here=$(cd "$(dirname "$0")" && pwd)
[[ -f $ROOTFS ]] || die "$ROOTFS is missing: run e2e/local/kubevirt-rootfs.sh"
command -v setcap >/dev/null || die "setcap is missing: e2e/prereqs.sh local installs libcap2-bin (make e2e-local-prereqs)"
for b in virt-operator virt-api virt-controller virt-handler virt-chroot virt-launcher \
  virt-launcher-monitor virt-freezer virt-probe virt-tail container-disk; do
  [[ -x $KV_BIN/$b ]] || die "$KV_BIN/$b is missing"
done

mkdir -p "$out"
work=$(mktemp -d "$out/.kubevirt-images.XXXXXX")
trap 'rm -rf "$work"' EXIT

# layer DIR OUT.tar: a reproducible tar of DIR's content.
layer() {
  tar --sort=name --numeric-owner --mtime=@0 --owner=0 --group=0 -C "$1" -cf "$2" .
}
# layer_keep_owner DIR OUT.tar: the same, keeping the owners and file capabilities set
# in DIR.
layer_keep_owner() {
  tar --sort=name --numeric-owner --mtime=@0 --xattrs --xattrs-include=security.capability \
    --pax-option=delete=atime,delete=ctime -C "$1" -cf "$2" .
}

# The Debian rootfs is the bottom layer of both, as is (hard link, no copy).
ln "$ROOTFS" "$work/debian.tar" 2>/dev/null || cp "$ROOTFS" "$work/debian.tar"

# passwd and group: Debian's plus qemu (107), the user virt-launcher runs QEMU as.
mkdir -p "$work/etc"
tar -xf "$ROOTFS" -C "$work/etc" --strip-components=2 ./etc/passwd ./etc/group
grep -q '^qemu:' "$work/etc/passwd" || echo 'qemu:x:107:107:qemu user:/home/qemu:/bin/bash' >>"$work/etc/passwd"
grep -q '^qemu:' "$work/etc/group" || echo 'qemu:x:107:' >>"$work/etc/group"

# --- Go components, FROM scratch --------------------------------------------------------
for c in virt-operator virt-api virt-controller; do
  d=$work/$c
  mkdir -p "$d/usr/bin" "$d/etc" "$d/tmp"
  chmod 1777 "$d/tmp" # virt-api writes its certificates there; upstream's base has it
  cp "$KV_BIN/$c" "$d/usr/bin/"
  cp "$work/etc/passwd" "$work/etc/group" "$d/etc/"
  layer "$d" "$work/$c.tar"
  "$here/layers-archive.sh" "$registry/$c:$tag" "$out/$c.tar" \
    "{\"User\":\"1001\",\"Entrypoint\":[\"/usr/bin/$c\"],\"Env\":[\"PATH=/usr/bin\"]}" "$work/$c.tar"
done

# --- virt-handler -------------------------------------------------------------------------
d=$work/handler
mkdir -p "$d/usr/bin" "$d/etc"
cp "$KV_BIN/virt-handler" "$KV_BIN/virt-chroot" "$d/usr/bin/"
cp "$work/etc/passwd" "$work/etc/group" "$d/etc/"
cp "$KV_SRC/cmd/virt-handler/nsswitch.conf" "$d/etc/nsswitch.conf"
layer "$d" "$work/handler.tar"
path=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
"$here/layers-archive.sh" "$registry/virt-handler:$tag" "$out/virt-handler.tar" \
  "{\"Entrypoint\":[\"/usr/bin/virt-handler\"],\"Env\":[\"$path\"]}" "$work/debian.tar" "$work/handler.tar"

# --- virt-launcher ------------------------------------------------------------------------
d=$work/launcher
mkdir -p "$d/usr/bin" "$d/usr/sbin" "$d/usr/lib/isochron-e2e" "$d/etc/libvirt/hooks" "$d/usr/lib64/qemu-kvm" "$d/var"
for b in virt-launcher virt-launcher-monitor virt-freezer virt-probe virt-tail container-disk; do
  cp "$KV_BIN/$b" "$d/usr/bin/"
done
# As upstream (cmd/virt-launcher/BUILD.bazel, "setcaps"): the non-root monitor passes
# CAP_NET_BIND_SERVICE on to virt-launcher as an ambient capability, which it must hold
# itself; without the file capability the exec fails with EPERM.
setcap cap_net_bind_service=+ep "$d/usr/bin/virt-launcher-monitor"
install -m 0755 "$KV_SRC/cmd/virt-launcher/node-labeller/node-labeller.sh" "$d/usr/bin/node-labeller.sh"
install -m 0644 "$KV_SRC/cmd/virt-launcher/qemu.conf" "$KV_SRC/cmd/virt-launcher/virtqemud.conf" "$d/etc/libvirt/"
install -m 0755 -o 107 -g 107 "$KV_SRC/cmd/virt-launcher/qemu" "$d/etc/libvirt/hooks/qemu"
install -m 0644 "$KV_SRC/cmd/virt-launcher/nsswitch.conf" "$d/etc/nsswitch.conf"
cp "$work/etc/passwd" "$work/etc/group" "$d/etc/"
# Upstream's /var/run is relative: virt-handler reads the launcher's files through
# /proc/<pid>/root/var/run, where an absolute link would resolve in virt-handler's root.
ln -s ../run "$d/var/run"
# virtqemud: Debian's libvirt has only the monolithic libvirtd, which serves the same
# qemu:// URIs and reads the same configuration keys. virt-launcher starts
# /usr/sbin/virtqemud and (as non-root) dials /var/run/libvirt/virtqemud-sock; virt-handler
# finds the daemon by its process name "virtqemud" to raise its memlock limit for
# realtime VMs. The wrapper points the expected socket name at libvirtd's and executes
# libvirtd through a link named virtqemud, so the process is called virtqemud.
ln -s /usr/sbin/libvirtd "$d/usr/lib/isochron-e2e/virtqemud"
cat >"$d/usr/sbin/virtqemud" <<'WRAPPER'
#!/bin/sh
# isochron e2e-local: Debian ships no virtqemud; run libvirtd as virtqemud (see
# e2e/local/kubevirt-images.sh).
mkdir -p /var/run/libvirt
ln -sfn libvirt-sock /var/run/libvirt/virtqemud-sock
exec /usr/lib/isochron-e2e/virtqemud "$@"
WRAPPER
chmod 0755 "$d/usr/sbin/virtqemud"
# No qemu-system-i386 (an OCI whiteout over the Debian layer's; upstream's launcher has
# only the x86_64 QEMU): libvirt probes every QEMU it finds when the first domain is
# defined, and under emulation on a node VM that define took 10 s, past half of
# virt-handler's 20 s for the whole SyncVMI (session 16: "SyncVMI: ... context deadline
# exceeded" for 8 of the 18 launcher pods of a whole run; the i386 probe is the second of two).
: >"$d/usr/bin/.wh.qemu-system-i386"
layer_keep_owner "$d" "$work/launcher.tar"
"$here/layers-archive.sh" "$registry/virt-launcher:$tag" "$out/virt-launcher.tar" \
  "{\"Entrypoint\":[\"/usr/bin/virt-launcher\"],\"Env\":[\"$path\"]}" "$work/debian.tar" "$work/launcher.tar"

du -ch "$out"/virt-*.tar | tail -1 | sed 's/^/kubevirt-images: total /'
