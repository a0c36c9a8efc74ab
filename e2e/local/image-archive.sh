#!/usr/bin/env bash
# Writes a one-layer image FROM scratch holding one static binary, and any other files
# given, as a `docker save` archive that `ctr images import` and `kind load
# image-archive` read, without a Docker engine:
#
#   e2e/local/image-archive.sh REF BINARY OUT.tar [SRC:DEST:UID:GID:MODE...]
#
# The binary lands at /<basename> and is the entrypoint; the image runs as user 65532.
# Each SRC is copied to DEST, owned by UID:GID with MODE (rtprobe's probe agent disk:
# bin/agent.img:/disk/agent.img:107:107:0440, as build/rtprobe.Dockerfile has it). The
# layer tar is reproducible (sorted, mtime 0), so the image ID only changes when a file
# does. layers-archive.sh writes the archive.
set -euo pipefail

die() { echo "image-archive: $*" >&2; exit 1; }
[[ $# -ge 3 ]] || die "usage: $0 REF BINARY OUT.tar [SRC:DEST:UID:GID:MODE...]"
ref=$1 binary=$2 out=$3
shift 3
[[ -x $binary ]] || die "$binary is not an executable file"
name=$(basename "$binary")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs"
cp "$binary" "$work/rootfs/$name"
chmod 0755 "$work/rootfs/$name"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
  -C "$work/rootfs" -cf "$work/layer.tar" "$name"
for extra in "$@"; do
  IFS=: read -r src dest uid gid mode <<<"$extra"
  [[ -f $src && $dest == /* && -n $mode ]] || die "$extra is not SRC:DEST:UID:GID:MODE of an existing file"
  mkdir -p "$work/rootfs$(dirname "$dest")"
  cp "$src" "$work/rootfs$dest"
  chmod "$mode" "$work/rootfs$dest"
  tar --append --owner="$uid" --group="$gid" --numeric-owner --mtime=@0 --no-recursion \
    -C "$work/rootfs" -f "$work/layer.tar" "$(dirname "${dest#/}")" "${dest#/}"
done
"$(dirname "$0")/layers-archive.sh" "$ref" "$out" \
  "$(printf '{"User":"65532","Entrypoint":["/%s"],"Env":["PATH=/"]}' "$name")" "$work/layer.tar" >/dev/null
echo "image-archive: $ref ($name${*:+ and $*}) -> $out"
