#!/usr/bin/env bash
# The boot of one node VM of the local cluster, run by isochron-node.service
# (node-image.sh) from the node's 9p share, /isochron/node, which nodes-up.sh writes:
# node.env (its name and addresses), its certificates, kubeconfigs and configurations.
# The binaries make built are in the second share, /isochron/bin. It does on the node
# what up.sh does on the host's: addresses, modules, hugepages, the RT network's bridge,
# containerd with the cluster's images, the CNI configuration (Multus delegating to a
# bridge, whereabouts), kube-proxy and the kubelet (static CPU Manager), the last two as
# systemd units that restart.
set -euo pipefail
share=/isochron/node
bin=/isochron/bin
# shellcheck source=/dev/null
source "$share/node.env"
log() { echo "isochron-node: $*"; }

# link_by_mac MAC: the name of the interface with that address.
link_by_mac() {
  local f
  for f in /sys/class/net/*/address; do
    [[ $(cat "$f") == "$1" ]] && { basename "$(dirname "$f")"; return 0; }
  done
  return 1
}

hostname "$NODE_NAME"
echo "$NODE_NAME" >/etc/hostname
printf '127.0.0.1 localhost\n%s %s\n' "$NODE_IP" "$NODE_NAME" >/etc/hosts
cp "$share/resolv.conf" /etc/resolv.conf

# Modules the kubelet, kube-proxy, the CNI plugins, KubeVirt and the NIC agent use: the
# reason the nodes are VMs (this machine's kernel has no qdiscs and no dummy links).
for m in overlay br_netfilter bridge veth dummy tun vhost_net sch_htb cls_u32 nf_tables; do
  modprobe "$m" || log "modprobe $m failed"
done
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1
# No limit on realtime tasks' CPU time, as on a real RT node: KubeVirt's node labeller
# then labels the node kubevirt.io/realtime, which realtime VMIs require.
sysctl -qw kernel.sched_rt_runtime_us=-1
echo "$HUGEPAGES" >/proc/sys/vm/nr_hugepages

# The cluster network: an address on the NIC whose MAC nodes-up.sh gave it, the host as
# the gateway (it routes each node's pod CIDR to that node).
eth=$(link_by_mac "$NODE_MAC") || { log "no interface has MAC $NODE_MAC"; exit 1; }
ip link set lo up
ip link set "$eth" up
ip addr replace "$NODE_IP/$NODE_PREFIX" dev "$eth"
ip route replace default via "$GATEWAY"
# The RT network: a bridge whose uplink is the second NIC, which the host bridges with
# every node's (so crawlers on different nodes reach each other on it).
rt=$(link_by_mac "$RT_MAC") || { log "no interface has MAC $RT_MAC"; exit 1; }
if [[ $rt != "$RT_UPLINK" ]]; then
  ip link set "$rt" down
  ip link set "$rt" name "$RT_UPLINK"
fi
ip link show "$RT_BRIDGE" >/dev/null 2>&1 || ip link add "$RT_BRIDGE" type bridge
ip link set "$RT_UPLINK" master "$RT_BRIDGE"
ip link set "$RT_UPLINK" up
ip link set "$RT_BRIDGE" up

# Binaries onto the node's disk (the share is read-only and can change under it).
install -m 0755 "$bin"/kubelet "$bin"/kube-proxy /usr/local/bin/
mkdir -p /opt/cni/bin /etc/cni/net.d/whereabouts.d /etc/kubernetes/pki /etc/containerd /var/lib/kubelet
for p in /usr/lib/cni/*; do ln -sfn "$p" "/opt/cni/bin/$(basename "$p")"; done
install -m 0755 "$bin"/multus "$bin"/whereabouts /opt/cni/bin/
install -m 0644 "$share"/pki/* /etc/kubernetes/pki/
install -m 0600 "$share"/*.kubeconfig /etc/kubernetes/
install -m 0644 "$share"/kubelet.yaml "$share"/kube-proxy.yaml /etc/kubernetes/
install -m 0644 "$share"/containerd.toml /etc/containerd/config.toml
install -m 0644 "$share"/00-multus.conf /etc/cni/net.d/
install -m 0644 "$share"/whereabouts.conf /etc/cni/net.d/whereabouts.d/

# containerd's root is the image disk (node-images.sh): the cluster's images, imported on
# the host (none can be pulled).
mkdir -p /var/lib/containerd
mountpoint -q /var/lib/containerd || mount -o noatime LABEL=isoimages /var/lib/containerd ||
  { log "no image disk (label isoimages)"; exit 1; }
systemctl start containerd
for ((i = 0; i < 120; i++)); do ctr version >/dev/null 2>&1 && break; sleep 1; done
log "containerd has $(ctr -n k8s.io images ls -q | wc -l) images"

# A node booted ahead (nodes-up.sh with E2E_LOCAL_NODES_HOLD) joins the cluster once
# nodes-up.sh writes join into its share.
if [[ ! -e $share/join ]]; then
  log "waiting for $share/join to start the kubelet"
  until [[ -e $share/join ]]; do sleep 2; done
fi
systemctl reset-failed kube-proxy kubelet 2>/dev/null || true
systemd-run --unit=kube-proxy -p Restart=always -p RestartSec=2 \
  /usr/local/bin/kube-proxy --config /etc/kubernetes/kube-proxy.yaml --v 2
# cAdvisor reads every cgroup's statistics once a minute instead of every 10-15 s: under
# emulation each read is a system call of tens of microseconds, and this housekeeping was
# the largest part of the kubelet's CPU (a quarter of a profile), the kubelet the largest
# user of the node's (docs/dev/e2e.md, "Nodes that are VMs"). Nothing in the suite reads
# the kubelet's statistics; its eviction thresholds see them a minute late.
systemd-run --unit=kubelet -p Restart=always -p RestartSec=2 \
  /usr/local/bin/kubelet --config /etc/kubernetes/kubelet.yaml --kubeconfig /etc/kubernetes/kubelet.kubeconfig \
  --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --node-labels "$NODE_LABELS" --housekeeping-interval 1m --v 2
log "kubelet started"
