#!/usr/bin/env bash
# Stops the local e2e cluster e2e/local/up.sh started: the pods' containers, then
# kubelet, containerd, kube-proxy, scheduler, controller-manager, API server and etcd, each by the
# pid recorded in bin/e2e-local/run. With --purge it also deletes bin/e2e-local (the
# next bring-up then starts from an empty etcd and fresh certificates).
set -euo pipefail
# shellcheck source=e2e/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

purge=false
[[ ${1:-} == --purge ]] && purge=true

# stop NAME: SIGTERM the recorded process, SIGKILL after 20 s.
stop() {
  local name=$1 pid
  alive "$name" || { rm -f "$RUN/$name.pid"; return 0; }
  pid=$(cat "$RUN/$name.pid")
  log "stopping $name (pid $pid)"
  # The process group: containerd and the kubelet run under nsenter (up.sh), which
  # does not pass signals on; start() made each its own group with setsid.
  kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 20; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  kill -9 -- "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null || true
  rm -f "$RUN/$name.pid"
}

# The node VMs first (nodes-up.sh), while the API server still runs.
"$(dirname "${BASH_SOURCE[0]}")/nodes-down.sh"
stop kubelet
# The pods outlive the kubelet: stop their sandboxes and containers while containerd runs.
if alive containerd; then
  for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true; done
  sleep 1
  for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$c" >/dev/null 2>&1 || true; done
  for c in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$c" >/dev/null 2>&1 || true; done
fi
stop containerd
stop kube-proxy
stop kube-scheduler
stop kube-controller-manager
stop kube-apiserver
stop etcd
stop registry
# Last, the node's PID namespace: its init going kills whatever is left inside.
stop pidns

# Mounts the kubelet, containerd and KubeVirt left under the state directory, the
# kubelet's root and KubeVirt's host directories (volumes, rootfs, the sandboxes'
# /dev/shm, container disks), deepest first; then / gets its propagation back.
for dir in "$STATE" "$KUBELET_ROOT" /run/kubevirt /run/kubevirt-private /run/kubevirt-libvirt-runtimes; do
  awk -v s="$dir/" 'index($2, s) == 1 { print $2 }' /proc/self/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
done
if [[ -f $RUN/root-shared.orig ]]; then
  [[ $(cat "$RUN/root-shared.orig") == private ]] && mount --make-rprivate /
  rm -f "$RUN/root-shared.orig"
fi
if [[ -f $RUN/nr_hugepages.orig ]]; then
  cat "$RUN/nr_hugepages.orig" >/proc/sys/vm/nr_hugepages
  rm -f "$RUN/nr_hugepages.orig"
fi
# kube-proxy's iptables chains and rules (its own cleanup; the nftables and IPVS parts it
# also tries may fail where nft or IPVS are missing), and the DNAT rule that stood in
# for kube-proxy before it ran here.
if [[ -x $KUBE_BIN/kube-proxy ]]; then
  "$KUBE_BIN/kube-proxy" --cleanup >"$LOGS/kube-proxy-cleanup.log" 2>&1 || true
fi
iptables -t nat -S PREROUTING 2>/dev/null | { grep -e "-d ${SERVICE_CIDR%.0/*}.1/32 .*--dport 443 -j DNAT" || true; } |
  while read -r _ chain rule; do read -ra r <<<"$rule"; iptables -t nat -D "$chain" "${r[@]}" || true; done
# up.sh's FORWARD rules for the pods.
for dir in -s -d; do
  while iptables -D FORWARD "$dir" "$POD_CIDR" -m comment --comment "isochron e2e-local pods" -j ACCEPT 2>/dev/null; do :; done
done
# The pod bridges (default network, check-multus.sh's second network, the suite's RT
# network with its uplink veth pair) and the pods' cgroups (empty now that their
# processes are gone).
ip link delete e2elocal0 2>/dev/null || true
# The pods' network namespaces (containerd's cni-*) this bring-up added: down kills the
# sandboxes without a CNI DEL, which leaves each namespace, and its veth, behind.
if [[ -f $RUN/netns-before ]]; then
  for path in /var/run/netns/cni-*; do
    [[ -e $path ]] || continue
    ns=${path##*/}
    grep -qxF "$ns" "$RUN/netns-before" || ip netns delete "$ns" 2>/dev/null || true
  done
  rm -f "$RUN/netns-before"
fi
ip link delete "$NAD_BRIDGE" 2>/dev/null || true
ip link delete "$RT_UPLINK" 2>/dev/null || true
ip link delete "$RT_BRIDGE" 2>/dev/null || true
# whereabouts' flat file, if it is this cluster's, and the directories up.sh made for it.
if [[ -f $WHEREABOUTS_CONF ]] && grep -qF "$STATE/whereabouts.kubeconfig" "$WHEREABOUTS_CONF"; then
  rm -f "$WHEREABOUTS_CONF"
fi
if [[ -f $RUN/whereabouts-dirs ]]; then
  while read -r d; do rmdir "$d" 2>/dev/null || true; done <"$RUN/whereabouts-dirs"
  rm -f "$RUN/whereabouts-dirs"
fi
for root in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  if [[ -d $root ]]; then find "$root" -depth -type d -exec rmdir {} \; 2>/dev/null || true; fi
done

# The kubelet's checkpoints (CPU Manager state) belong to this bring-up, and so does
# what KubeVirt kept on the host.
rm -rf "$STATE/kubelet" "${KUBELET_ROOT:?}"/* /run/kubevirt /run/kubevirt-private \
  /run/kubevirt-libvirt-runtimes /var/lib/kubevirt-node-labeller
# A mount that / propagated to another mount namespace (the machine's init's, which is
# closed to us) keeps its directory busy after our umount: such a tree is moved aside
# (what it holds is gone) rather than stopping the next bring-up.
if $purge; then
  if rm -rf "$STATE" 2>/dev/null; then
    log "removed $STATE"
  else
    aside="$STATE.busy-$(date +%s)"
    mv "$STATE" "$aside"
    rm -rf "$aside" 2>/dev/null || true
    log "removed $STATE, but for mount points another mount namespace still holds, moved to $aside"
  fi
fi
log "down"
