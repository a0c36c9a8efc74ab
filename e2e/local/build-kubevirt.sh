#!/usr/bin/env bash
# Builds KubeVirt's components for the local cluster (docs/dev/e2e.md, stage 3) from the
# kubevirt.io/kubevirt Go module pinned by e2e/local/modules/kubevirt/go.mod, and renders its
# operator manifest with KubeVirt's own manifest-templator:
#
#   e2e/local/build-kubevirt.sh VERSION OUTDIR
#
# OUTDIR receives virt-operator, virt-api, virt-controller, virt-handler, virt-chroot,
# virt-launcher, virt-launcher-monitor, virt-freezer, virt-probe, virt-tail,
# container-disk (KubeVirt's C program, static) and kubevirt-operator.yaml (images
# localhost/kubevirt/<component>:VERSION). virt-handler (linux/kvm.h) and virt-launcher
# (libvirt) need cgo: gcc, pkg-config and Debian's libvirt-dev (e2e/prereqs.sh local);
# the rest are static. They are built from a copy of the module with one change to
# virt-handler (modules/kubevirt/patch.sh, in OUTDIR/src): a Scheduled VMI's domain that
# may still be starting is not deleted as inactive (modules/kubevirt/virthandler).
set -euo pipefail

die() { echo "build-kubevirt: $*" >&2; exit 1; }
[[ $# -eq 2 ]] || die "usage: $0 VERSION OUTDIR"
version=$1 out=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
mod=$repo/e2e/local/modules/kubevirt
go=${GO:-go}
grep -q "^require kubevirt.io/kubevirt $version\$" "$mod/go.mod" ||
  die "e2e/local/modules/kubevirt/go.mod does not require kubevirt.io/kubevirt $version (KUBEVIRT_VERSION)"

pkg-config --exists libvirt 2>/dev/null ||
  die "libvirt-dev (cgo) is missing: e2e/prereqs.sh local installs it (make e2e-local-prereqs)"

mkdir -p "$out"
out=$(cd "$out" && pwd)
ldflags="-s -w"
for v in gitVersion="$version" gitCommit="$version" gitTreeState=clean buildDate=1970-01-01T00:00:00Z; do
  ldflags+=" -X kubevirt.io/client-go/version.$v"
done
cd "$mod"
# GONOSUMDB: kubevirt requires github.com/rhobs/operator-observability-toolkit, which
# the checksum database does not know; go.sum pins it (DEVELOPERS.md).
export GONOSUMDB=${GONOSUMDB:-github.com/rhobs/operator-observability-toolkit}
GO=$go ./patch.sh "$out/src"
build() { # build CGO PACKAGE NAME
  local t=$SECONDS
  CGO_ENABLED=$1 "$go" build -modfile "$out/src/go.mod" -trimpath -ldflags "$ldflags" -o "$out/$3" "$2"
  echo "build-kubevirt: $3 ($((SECONDS - t)) s)"
}
for c in virt-operator virt-api virt-controller virt-chroot virt-launcher-monitor virt-freezer virt-probe virt-tail; do
  build 0 "kubevirt.io/kubevirt/cmd/$c" "$c"
done
build 1 kubevirt.io/kubevirt/cmd/virt-handler virt-handler
build 1 kubevirt.io/kubevirt/cmd/virt-launcher virt-launcher
build 0 kubevirt.io/kubevirt/tools/manifest-templator manifest-templator

src=$("$go" list -m -f '{{.Dir}}' kubevirt.io/kubevirt)
gcc -static -O2 -o "$out/container-disk" "$src/cmd/container-disk-v2alpha/main.c"
echo "build-kubevirt: container-disk (gcc -static)"

# The operator manifest, as KubeVirt's hack/build-manifests.sh renders a release's.
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
"$out/manifest-templator" --process-files --generated-manifests-dir="$src/manifests/generated/" \
  --input-file="$src/manifests/release/kubevirt-operator.yaml.in" >"$tmp"
"$out/manifest-templator" --process-vars --namespace=kubevirt \
  --container-prefix=localhost/kubevirt --container-tag="$version" --image-pull-policy=IfNotPresent \
  --verbosity=2 --kubevirt-logo-path="$src/assets/kubevirt_logo.png" --input-file="$tmp" \
  >"$out/kubevirt-operator.yaml"
echo "build-kubevirt: kubevirt-operator.yaml ($(grep -c '^kind:' "$out/kubevirt-operator.yaml") objects)"
