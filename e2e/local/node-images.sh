#!/usr/bin/env bash
# Builds the node VMs' image disk: containerd's root directory holding the cluster's
# images, imported and unpacked here, as an ext4 image each node mounts on
# /var/lib/containerd (a copy-on-write overlay of its own, nodes-up.sh):
#
#   e2e/local/node-images.sh OUT.img ARCHIVE...
#
# Importing the archives in the node under emulation took 3.5 min of its 4.5 min boot
# (virt-handler 90 s, virt-launcher 80 s); here it takes seconds. A containerd of its own
# (this host's, Debian's: the nodes run the next Debian's, which opens this layout) with
# its own root, state and socket, and no CRI, does the import. OUT.img is rebuilt only
# when an archive changed (OUT.img.stamp records their sizes and times).
set -euo pipefail
# shellcheck source=e2e/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[[ $# -ge 2 ]] || die "usage: $0 OUT.img ARCHIVE..."
out=$1
shift
stamp=$(stat -c '%n %s %Y' "$@")
if [[ -f $out && -f $out.stamp && $(cat "$out.stamp") == "$stamp" ]]; then
  log "node images: $out is up to date"
  exit 0
fi

t0=$SECONDS
work=$out.d
rm -rf "$work" "$out" "$out.stamp" && mkdir -p "$work"
cat >"$work/config.toml" <<TOML
version = 2
root = "$work/root"
state = "$work/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$work/containerd.sock"
TOML
containerd --config "$work/config.toml" >"$work/containerd.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
wait_for "containerd for the node images" 30 ctr --address "$work/containerd.sock" version
for a in "$@"; do
  ctr --address "$work/containerd.sock" --namespace k8s.io images import "$a" >/dev/null ||
    die "importing $a; see $work/containerd.log"
done
# Each image also by its digest (name@sha256:<manifest>), as a pulled image has it: the
# kubelet then reports that digest reference as the container's imageID, and KubeVirt
# pins a migration target's containerDisks to the source's imageID. Without it the
# imageID is the bare config digest, which the target's kubelet cannot resolve
# (ImagePullBackOff on "localhost/isochron/e2e-guest@sha256:<config>").
ctr --address "$work/containerd.sock" --namespace k8s.io images ls |
  awk 'NR > 1 && $1 !~ /^sha256:/ && $1 !~ /@/ { print $1, $3 }' |
  while read -r ref digest; do
    ctr --address "$work/containerd.sock" --namespace k8s.io images tag "$ref" "${ref%:*}@$digest" >/dev/null
  done
kill "$pid"
wait "$pid" 2>/dev/null || true
trap - EXIT

# The unpacked layers and the compressed content, with room for what the nodes pull
# into it (nothing: there is no registry) and their containers' writable layers.
used=$(du -sm "$work/root" | cut -f1)
mke2fs -q -t ext4 -L isoimages -d "$work/root" "$out" "$((used * 5 / 4 + 2048))M" >/dev/null
rm -rf "$work"
echo "$stamp" >"$out.stamp"
log "node images: $# archives into $out (${used} MB unpacked) in $((SECONDS - t0)) s"
