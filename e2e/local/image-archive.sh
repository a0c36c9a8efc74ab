#!/usr/bin/env bash
# Writes a one-layer image FROM scratch holding one static binary, as a `docker save`
# archive that `ctr images import` and `kind load image-archive` read, without a Docker
# engine:
#
#   e2e/local/image-archive.sh REF BINARY OUT.tar
#
# The binary lands at /<basename> and is the entrypoint; the image runs as user 65532.
# The layer tar is reproducible (sorted, owner 0, mtime 0), so the image ID only
# changes when the binary does. layers-archive.sh writes the archive.
set -euo pipefail

die() { echo "image-archive: $*" >&2; exit 1; }
[[ $# -eq 3 ]] || die "usage: $0 REF BINARY OUT.tar"
ref=$1 binary=$2 out=$3
[[ -x $binary ]] || die "$binary is not an executable file"
name=$(basename "$binary")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs"
cp "$binary" "$work/rootfs/$name"
chmod 0755 "$work/rootfs/$name"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
  -C "$work/rootfs" -cf "$work/layer.tar" "$name"
"$(dirname "$0")/layers-archive.sh" "$ref" "$out" \
  "$(printf '{"User":"65532","Entrypoint":["/%s"],"Env":["PATH=/"]}' "$name")" "$work/layer.tar" >/dev/null
echo "image-archive: $ref ($name) -> $out"
