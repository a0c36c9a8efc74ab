#!/usr/bin/env bash
# Writes a one-layer image FROM scratch holding one static binary, as a `docker save`
# archive that `ctr images import` and `kind load image-archive` read, without a Docker
# engine:
#
#   hack/e2e/local/image-archive.sh REF BINARY OUT.tar
#
# The binary lands at /<basename> and is the entrypoint; the image runs as user 65532.
# The layer tar is reproducible (sorted, owner 0, mtime 0), so the image ID only
# changes when the binary does.
set -euo pipefail

die() { echo "image-archive: $*" >&2; exit 1; }
[[ $# -eq 3 ]] || die "usage: $0 REF BINARY OUT.tar"
ref=$1 binary=$2 out=$3
[[ -x $binary ]] || die "$binary is not an executable file"
name=$(basename "$binary")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs" "$work/image"
cp "$binary" "$work/rootfs/$name"
chmod 0755 "$work/rootfs/$name"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
  -C "$work/rootfs" -cf "$work/layer.tar" "$name"
layer_sha=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
mkdir -p "$work/image/$layer_sha"
mv "$work/layer.tar" "$work/image/$layer_sha/layer.tar"

config=$(printf '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z","config":{"User":"65532","Entrypoint":["/%s"],"Env":["PATH=/"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"hack/e2e/local/image-archive.sh %s"}]}' \
  "$name" "$layer_sha" "$name")
config_sha=$(printf '%s' "$config" | sha256sum | cut -d' ' -f1)
printf '%s' "$config" >"$work/image/$config_sha.json"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' \
  "$config_sha" "$ref" "$layer_sha" >"$work/image/manifest.json"

mkdir -p "$(dirname "$out")"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/image" -cf "$out" .
echo "image-archive: $ref (sha256:$config_sha) -> $out"
