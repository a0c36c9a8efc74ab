#!/usr/bin/env bash
# Writes an image of the given layer tars (bottom first) as a `docker save` archive that
# `ctr images import` and `kind load image-archive` read, without a Docker engine:
#
#   e2e/local/layers-archive.sh REF OUT.tar CONFIG LAYER.tar [LAYER.tar...]
#
# CONFIG is the JSON of the image's runtime config ({"Entrypoint":[...],"User":"...",
# "Env":[...]}). Layer tars should be reproducible (sorted, fixed owner and mtime), so
# that the image ID only changes when their content does.
set -euo pipefail

die() { echo "layers-archive: $*" >&2; exit 1; }
[[ $# -ge 4 ]] || die "usage: $0 REF OUT.tar CONFIG LAYER.tar [LAYER.tar...]"
ref=$1 out=$2 runtime=$3
shift 3

work=$(mktemp -d "$(dirname "$out")/.layers-archive.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/image"
diff_ids=() layers=()
for layer in "$@"; do
  [[ -f $layer ]] || die "$layer is not a file"
  sha=$(sha256sum "$layer" | cut -d' ' -f1)
  mkdir -p "$work/image/$sha"
  # A hard link when on the same file system: the base layers are hundreds of MB.
  ln "$layer" "$work/image/$sha/layer.tar" 2>/dev/null || cp "$layer" "$work/image/$sha/layer.tar"
  diff_ids+=("\"sha256:$sha\"") layers+=("\"$sha/layer.tar\"")
done

join() { local IFS=,; echo "$*"; }
config=$(printf '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z","config":%s,"rootfs":{"type":"layers","diff_ids":[%s]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"e2e/local/layers-archive.sh"}]}' \
  "$runtime" "$(join "${diff_ids[@]}")")
config_sha=$(printf '%s' "$config" | sha256sum | cut -d' ' -f1)
printf '%s' "$config" >"$work/image/$config_sha.json"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":[%s]}]' \
  "$config_sha" "$ref" "$(join "${layers[@]}")" >"$work/image/manifest.json"

mkdir -p "$(dirname "$out")"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/image" -cf "$out.tmp" .
mv "$out.tmp" "$out"
echo "layers-archive: $ref (sha256:$config_sha, $# layers) -> $out"
