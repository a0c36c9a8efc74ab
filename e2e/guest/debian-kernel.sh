# shellcheck shell=bash disable=SC2154 # modules and required_config are the caller's
# Debian's kernel for a VM booted with a Go init (the e2e guest, e2e/guest/image.sh, and
# the network lab, hack/netlab/initramfs.sh): the versioned package behind
# linux-image-amd64, fetched with apt-get download (nothing else downloaded), with the
# modules the caller names and their dependencies, numbered so that name order is load
# order (internal/vminit.LoadModules loads /modules/*.ko sorted).
#
# Source it, set the arrays `modules` and `required_config` (built-in options the VM
# cannot boot without) and the functions `die` and `log`, then call
#
#   debian_kernel WORKDIR BUILD
#   initramfs ROOTFS INIT OUT
#
# WORKDIR caches the kernel across runs; BUILD is a scratch directory. debian_kernel sets
# kpkg, kver and kdir: $kdir/vmlinuz, $kdir/config and $kdir/modules/NN-name.ko.
# initramfs writes OUT, a gzipped newc archive of ROOTFS (where the caller may have put
# files of its own) with INIT as /init, the modules in /modules and, as root,
# /dev/console; reproducible (sorted, owner 0, time 0).
debian_kernel() {
  local workdir=$1 build=$2 deb moddir n
  kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n1)
  if [[ -z $kpkg && $(id -u) -eq 0 ]]; then
    apt-get update -qq && kpkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n1)
  fi
  [[ -n $kpkg ]] || die "apt-cache cannot resolve linux-image-amd64 (run apt-get update)"
  kver=$(apt-cache show --no-all-versions "$kpkg" | sed -n 's/^Version: //p' | head -n1)
  kdir=$workdir/kernel/${kpkg}_$kver
  if [[ ! -f $kdir/done || $(cat "$kdir/done") != "${modules[*]}" ]]; then
    log "fetching $kpkg $kver with apt-get download"
    rm -rf "$kdir" && mkdir -p "$kdir/modules" "$build/deb"
    # (apt warns that it downloads unsandboxed as root into the private build dir: harmless.)
    if ! (cd "$build/deb" && apt-get download -q "$kpkg=$kver" >"$build/apt.log" 2>&1); then
      cat "$build/apt.log" >&2
      die "apt-get download $kpkg=$kver failed"
    fi
    deb=$(echo "$build"/deb/*.deb)
    [[ -f $deb ]] || die "apt-get download $kpkg=$kver wrote no .deb"
    dpkg -x "$deb" "$build/root"
    cp "$build"/root/boot/vmlinuz-* "$kdir/vmlinuz"
    cp "$build"/root/boot/config-* "$kdir/config"
    moddir=$(echo "$build"/root/lib/modules/*)
    for opt in "${required_config[@]}"; do
      grep -qx "$opt=y" "$kdir/config" || die "$kpkg: $opt is not built in"
    done
    # Resolve dependencies from each module's .modinfo depends= and number the files so
    # that name order is load order (the init loads /modules/*.ko sorted).
    declare -A seen=()
    n=0
    add() {
      local name=${1//-/_} file dep
      [[ -z ${seen[$name]:-} ]] || return 0
      seen[$name]=1
      grep -q "/${name}.ko$" "$moddir/modules.builtin" && return 0
      file=$(find "$moddir/kernel" -name "$name.ko" -o -name "${name//_/-}.ko" | head -n1)
      [[ -n $file ]] || die "$kpkg: module $name not found"
      for dep in $(tr '\0' '\n' <"$file" | sed -n 's/^depends=//p' | head -n1 | tr ',' ' '); do
        add "$dep"
      done
      cp "$file" "$kdir/modules/$(printf '%02d' "$n")-$name.ko"
      n=$((n + 1))
    }
    for m in "${modules[@]}"; do add "$m"; done
    echo "${modules[*]}" >"$kdir/done"
    rm -rf "$build/deb" "$build/root"
  fi
  log "kernel $kpkg $kver, modules: $(cd "$kdir/modules" && echo ./*.ko | sed 's|\./||g')"
}

initramfs() {
  local rootfs=$1 init=$2 out=$3
  mkdir -p "$rootfs/dev" "$rootfs/proc" "$rootfs/sys" "$rootfs/modules"
  cp "$init" "$rootfs/init" && chmod 0755 "$rootfs/init"
  cp "$kdir"/modules/*.ko "$rootfs/modules/" 2>/dev/null || true
  chmod 0644 "$rootfs"/modules/* 2>/dev/null || true
  if [[ $(id -u) -eq 0 ]]; then
    mknod -m 0600 "$rootfs/dev/console" c 5 1
  else
    log "not root: no /dev/console in the initramfs (the init opens it from devtmpfs)"
  fi
  find "$rootfs" -exec touch -h -d @0 {} +
  (cd "$rootfs" && find . -mindepth 1 | LC_ALL=C sort |
    cpio --quiet -o -H newc -R 0:0 --reproducible) | gzip -9n >"$out"
}
