#!/usr/bin/env bash
# Builds Kubernetes control-plane binaries from Go modules, because the
# upstream release tarballs (and setup-envtest's downloads) are unreachable
# from our machines while the Go module proxy is.
#
#   hack/tools/build-kube-bins.sh OUTDIR [component...]
#
# Components: kube-apiserver etcd kubectl (the default: what envtest needs),
# kube-scheduler kube-controller-manager kubelet kube-proxy. Ones already in OUTDIR are
# skipped.
#
# The versions live in hack/tools/kube/go.mod and hack/tools/etcd/go.mod, with
# go.sum beside them (kube-proxy, for the local e2e cluster only, builds from
# its own module hack/tools/kube-proxy with the same pins); KUBE_VERSION and ETCD_VERSION are only checked against
# them. Rewriting the go.mod from the env vars instead would need go.sum
# entries nobody reviewed, so a mismatch is an error telling you to bump the
# go.mod (or the Makefile) rather than a silent rebuild of something else.
set -euo pipefail

die() { echo "build-kube-bins: $*" >&2; exit 1; }

# The versions are pinned once, in the Makefile, which passes them.
for v in KUBE_VERSION ETCD_VERSION; do
  [[ -n ${!v:-} ]] || die "$v is not set: run this through make (make envtest-bins), which passes the Makefile's pins"
done

[[ $# -ge 1 ]] || die "usage: $0 OUTDIR [component...]"
outdir=$1
shift
[[ $# -gt 0 ]] || set -- kube-apiserver etcd kubectl

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kube_mod=$repo/hack/tools/kube
etcd_mod=$repo/hack/tools/etcd
proxy_mod=$repo/hack/tools/kube-proxy

# A go.work above the repo, or a developer's GOFLAGS=-mod=mod, must not let
# the build pick other versions or rewrite go.sum (hence -mod=readonly on
# each command line, where it overrides GOFLAGS).
export GOWORK=off CGO_ENABLED=0

[[ $KUBE_VERSION =~ ^v1\.([0-9]+)\.[0-9]+(-[0-9A-Za-z.]+)?$ ]] ||
  die "KUBE_VERSION=$KUBE_VERSION is not a v1.X.Y tag"
kube_minor=${BASH_REMATCH[1]}
# Staging modules (k8s.io/api, ...) are tagged v0.X.Y for kubernetes v1.X.Y.
staging_version=v0.${KUBE_VERSION#v1.}

# Informational only (printed by --version, parsed by nobody); a version not
# listed here just gets an empty commit.
case $KUBE_VERSION in
  v1.34.3) kube_commit=df11db1c0f08fab3c0baee1e5ce6efbf816af7f1 ;;
  *) kube_commit= ;;
esac
case $ETCD_VERSION in
  v3.6.5) etcd_commit=a061450 ;;
  *) etcd_commit=unknown ;;
esac

kube_components=()
etcd_wanted=false
proxy_wanted=false
for c in "$@"; do
  case $c in
    kube-apiserver | kubectl | kube-scheduler | kube-controller-manager | kubelet)
      [[ -x $outdir/$c ]] || kube_components+=("$c") ;;
    kube-proxy) [[ -x $outdir/kube-proxy ]] || proxy_wanted=true ;;
    etcd) [[ -x $outdir/etcd ]] || etcd_wanted=true ;;
    *) die "unknown component '$c'" ;;
  esac
done

# `go list -m` reads go.mod the way the build will, blocks and all.
# check_kube_pins [MODULE_DIR]: hack/tools/kube by default.
check_kube_pins() {
  local bad mod=${1:-$kube_mod}
  bad=$(cd "$mod" && go list -mod=readonly -m \
    -f '{{.Path}} {{.Version}}{{with .Replace}} {{.Version}}{{end}}' all |
    awk -v kv="$KUBE_VERSION" -v sv="$staging_version" '
      $1 == "k8s.io/kubernetes" && $2 != kv { print $1 " " $2 " (want " kv ")" }
      NF == 3 && $1 ~ /^k8s\.io\// && $3 != sv { print $1 " => " $3 " (want " sv ")" }')
  [[ -z $bad ]] || die "${mod#"$repo"/}/go.mod disagrees with KUBE_VERSION=$KUBE_VERSION:
$bad"
}

check_etcd_pin() {
  local got
  got=$(cd "$etcd_mod" && go list -mod=readonly -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
  [[ $got == "$ETCD_VERSION" ]] ||
    die "hack/tools/etcd/go.mod pins etcd $got, ETCD_VERSION=$ETCD_VERSION"
}

if [[ ${#kube_components[@]} -gt 0 ]]; then check_kube_pins; fi
if $etcd_wanted; then check_etcd_pin; fi
if $proxy_wanted; then check_kube_pins "$proxy_mod"; fi

mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
# Build into a scratch dir and move into place, so an interrupted build never
# leaves a truncated binary that the skip check above would accept.
tmp=$(mktemp -d "$outdir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

ldflags=
if [[ ${#kube_components[@]} -gt 0 ]] || $proxy_wanted; then
  # Same -X set and -s -w -trimpath as kubernetes' hack/lib/version.sh and
  # golang.sh. The fixed buildDate keeps rebuilds byte-identical; without the
  # gitVersion/gitMajor/gitMinor values clients cannot parse /version.
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1"
    ldflags+=" -X $pkg.gitMinor=$kube_minor -X $pkg.gitCommit=$kube_commit"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
fi
if [[ ${#kube_components[@]} -gt 0 ]]; then
  pkgs=()
  for c in "${kube_components[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  echo "build-kube-bins: building ${kube_components[*]} $KUBE_VERSION into $outdir"
  # One invocation for all of them shares the compile of common packages.
  (cd "$kube_mod" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}")
  for c in "${kube_components[@]}"; do mv "$tmp/$c" "$outdir/$c"; done
fi

if $proxy_wanted; then
  echo "build-kube-bins: building kube-proxy $KUBE_VERSION into $outdir (module hack/tools/kube-proxy)"
  (cd "$proxy_mod" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/kube-proxy" k8s.io/kubernetes/cmd/kube-proxy)
  mv "$tmp/kube-proxy" "$outdir/kube-proxy"
fi

if $etcd_wanted; then
  echo "build-kube-bins: building etcd $ETCD_VERSION into $outdir"
  (cd "$etcd_mod" && go build -mod=readonly -trimpath \
    -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_commit" \
    -o "$tmp/etcd" .)
  mv "$tmp/etcd" "$outdir/etcd"
fi
