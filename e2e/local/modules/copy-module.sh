#!/bin/sh
# copy-module.sh MODULE DIR NAME: copy MODULE's source (the version the go.mod of the
# current directory requires) to DIR/NAME, writable, and write DIR/go.mod and DIR/go.sum:
# the current module's, with MODULE replaced by the copy and relative replaces made
# absolute (the go.mod written lives in DIR), for `go build -modfile DIR/go.mod`.
# The patch.sh of a module directory calls it, then changes the copy.
set -eu
mod=$1 out=$2 name=$3
# go list -m names no directory for a module not in the module cache yet (a fresh
# machine): download it first.
${GO:-go} mod download "$mod"
src="$(${GO:-go} list -m -f '{{.Dir}}' "$mod")"
[ -n "$src" ] || { echo "copy-module.sh: no source directory for $mod" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
cp -R "$src" "$out/$name"
chmod -R u+w "$out/$name"
cp go.sum "$out/go.sum"
{ sed "s#=> \./#=> $(pwd)/#" go.mod; echo; echo "replace $mod => $(cd "$out/$name" && pwd)"; } >"$out/go.mod"
