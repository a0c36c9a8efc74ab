#!/usr/bin/env bash
# Stops the node VMs nodes-up.sh started (each QEMU by its pid file) and removes what it
# added on the host: the taps, the routes to the nodes' pod CIDRs, the bridge and the
# forwarding rules. The nodes' disks go with the next bring-up; down.sh calls this first.
set -euo pipefail
# shellcheck source=e2e/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The VMs run on the host's node again, under software emulation (e2e/local/kubevirt).
stopped=false
for pidfile in "$RUN"/node-*.pid; do
  [[ -e $pidfile ]] || continue
  name=$(basename "$pidfile" .pid)
  name=${name#node-}
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    log "stopping node VM $name (QEMU pid $pid)"
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  stopped=true
done
if $stopped && kubectl_ get --raw /readyz >/dev/null 2>&1; then
  kubectl_ apply --server-side -k "$repo/e2e/local/kubevirt" >/dev/null || log "could not restore KubeVirt's CR (e2e/local/kubevirt)"
  # Their Node objects too: a node VM is a new node each boot, and a Node left NotReady
  # holds DaemonSet pods (virt-handler) that keep KubeVirt from being Available.
  kubectl_ delete nodes -l "$NODE_LABELS" --wait=false >/dev/null || log "could not delete the node VMs' Node objects"
fi
for ((i = 1; i <= 16; i++)); do
  ip route del "$(node_pod_cidr "$i")" 2>/dev/null || true
  for k in 0 1; do ip link delete "$(node_tap "$i" "$k")" 2>/dev/null || true; done
done
ip link delete "$NODES_BRIDGE" 2>/dev/null || true
for net in "$NODES_CIDR" "$CLUSTER_POD_CIDR"; do
  for dir in -s -d; do
    while iptables -D FORWARD "$dir" "$net" -m comment --comment "isochron e2e-local nodes" -j ACCEPT 2>/dev/null; do :; done
  done
done
