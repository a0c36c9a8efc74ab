#!/usr/bin/env bash
# The Debian packages every e2e entry point needs, in one place. Each make target of the
# e2e workflows runs this first, with the sets it needs, before any step uses them:
#
#   e2e/prereqs.sh SET...
#
#   config   make test-e2e-config and make lint-workflows: shellcheck
#   kind     make e2e-kind: a Docker client and engine (kind creates the cluster in it)
#   local    make e2e-local*: the local cluster (containerd, runc, the CNI plugins,
#            iptables...), KubeVirt's build (cgo against libvirt), its Debian layer
#            (mmdebstrap) and images (setcap), and the e2e guest's disk (the set guest-disk)
#   guest-disk  the e2e guest's boot disk (e2e/guest/image.sh: syslinux, mtools...)
#   guest-vm    booting the e2e guest by hand under QEMU's software emulation, with a
#            NoCloud disk (make probe-agent-cost-guest): QEMU and xorriso, and guest-disk
#   nodes    the local cluster's node VMs (make e2e-local-nodes-up): QEMU 10 or newer
#            and qemu-img (on Debian 12 from bookworm-backports, which it adds), mke2fs
#            and mmdebstrap (their disk, node-image.sh)
#
# As root it installs what is missing with apt-get, refreshing the package lists when
# an install fails, and without starting any daemon the packages bring (containerd: the
# local cluster runs its own). As another user it names what is missing and fails.
# Everything else the workflows run is built from Go modules by make.
set -euo pipefail

log() { echo "e2e-prereqs: $*" >&2; }
die() { log "$*"; exit 1; }
[[ $# -gt 0 ]] || die "usage: $0 SET... (config, kind, local, guest-disk, guest-vm, nodes)"

packages=()
new_qemu=false
guest_disk=(syslinux syslinux-common mtools dosfstools fdisk cpio)
for set in "$@"; do
  case $set in
    # PACKAGE:COMMAND: a COMMAND on the PATH, from any source, will do.
    config) packages+=(shellcheck:shellcheck) ;;
    kind) packages+=(docker.io:docker) ;;
    local)
      packages+=(
        # The cluster (up.sh, down.sh, the checks): containerd and runc run the pods,
        # Debian's CNI plugins are what Multus delegates to, kube-proxy programs
        # iptables, certs.sh signs with openssl, curl waits for etcd and checks Services.
        containerd runc containernetworking-plugins iptables iproute2 openssl curl
        util-linux mount procps hostname
        # KubeVirt: virt-handler and virt-launcher are cgo (build-kubevirt.sh), the
        # Debian layer of virt-launcher (kubevirt-rootfs.sh), file capabilities
        # (kubevirt-images.sh).
        gcc libc6-dev pkg-config libvirt-dev mmdebstrap libcap2-bin
        # The e2e guest's boot disk (e2e/guest/image.sh).
        "${guest_disk[@]}"
      ) ;;
    guest-disk) packages+=("${guest_disk[@]}") ;;
    guest-vm) packages+=("${guest_disk[@]}" qemu-system-x86:qemu-system-x86_64 xorriso:xorriso) ;;
    nodes)
      packages+=(qemu-system-x86:qemu-system-x86_64 qemu-utils:qemu-img e2fsprogs:mke2fs mmdebstrap)
      new_qemu=true
      ;;
    *) die "unknown set '$set': config, kind, local, guest-disk, guest-vm or nodes" ;;
  esac
done

# The node VMs run Debian's kernel under QEMU's multi-threaded TCG. Under QEMU 7.2
# (Debian 12's) their kernels oopsed on the int3 of their own code patching about every
# 20 minutes each; under 10.0 none did (docs/dev/e2e.md, "Nodes that are VMs"). Debian 12
# has QEMU 10 in bookworm-backports.
qemu_major() { qemu-system-x86_64 --version 2>/dev/null | sed -n 's/^QEMU emulator version \([0-9]*\).*/\1/p'; }
backports() {
  $new_qemu || return 0
  local major
  major=$(qemu_major)
  [[ -n $major && $major -ge 10 ]] && return 0
  local why="the node VMs need QEMU 10 or newer (docs/dev/e2e.md), found ${major:-none}"
  # shellcheck source=/dev/null
  [[ $(. /etc/os-release && echo "${VERSION_CODENAME:-}") == bookworm ]] ||
    die "$why: install QEMU 10 or newer from your distribution"
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    die "$why; as root: add bookworm-backports to apt's sources, then apt-get install -y --no-install-recommends -t bookworm-backports qemu-system-x86 qemu-utils"
  fi
  local src=/etc/apt/sources.list.d/isochron-bookworm-backports.sources
  if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d; then
    log "$why: adding Debian's bookworm-backports to apt's sources ($src)"
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' >"$src"
  fi
  apt-get update -q >/dev/null
  log "installing QEMU from bookworm-backports"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -t bookworm-backports qemu-system-x86 qemu-utils >/dev/null
  log "installed $(qemu-system-x86_64 --version | head -1)"
}

missing=()
for entry in "${packages[@]}"; do
  p=${entry%%:*} cmd=${entry#*:}
  if [[ $cmd != "$entry" ]] && command -v "$cmd" >/dev/null; then continue; fi
  [[ $(dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  backports
  exit 0
fi

if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  die "missing Debian packages: ${missing[*]}; as root: apt-get install -y --no-install-recommends ${missing[*]}"
fi
log "installing ${missing[*]}"
# No daemon starts from the packages' maintainer scripts (policy-rc.d, as in Debian's
# container images): the e2e cluster starts its own, with its own configuration.
policy=/usr/sbin/policy-rc.d
own_policy=false
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod +x "$policy"
  own_policy=true
fi
trap '$own_policy && rm -f "$policy"' EXIT
apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
if ! apt_install; then
  log "refreshing the package lists and trying again"
  apt-get update -q >/dev/null
  apt_install
fi
log "installed ${missing[*]}"
backports
