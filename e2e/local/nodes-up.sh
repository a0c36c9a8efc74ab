#!/usr/bin/env bash
# Adds worker nodes that are virtual machines to the running local cluster (up.sh):
#
#   NODE_IMAGE=DIR E2E_LOCAL_NODES=N e2e/local/nodes-up.sh
#
# Each node is a QEMU VM under software emulation (TCG: KVM guests hang on this
# machine), booting Debian's kernel and systemd from node-image.sh's disk, with its own
# copy-on-write disk. Its NICs are taps: the first on the bridge $NODES_BRIDGE, whose
# address on the host is every node's gateway (the host routes each node's pod CIDR to
# it, so pods reach each other across nodes without encapsulation), the second on the RT
# network's bridge $RT_BRIDGE, which so spans every node. Two read-only 9p shares hand
# it what it runs: its own directory (node.env, certificates, kubeconfigs, the kubelet's
# and kube-proxy's configurations, the CNI configuration, boot.sh) and the binaries and
# image archives make built. nodes-down.sh (called by down.sh) stops them.
#
# With E2E_LOCAL_NODES_HOLD=1 it boots the nodes and returns: each waits to join (boot.sh
# starts its kubelet once a later nodes-up.sh writes "join" into its share), so make
# e2e-local-multi boots them while the single-node tests run on the host's node.
set -euo pipefail
# shellcheck source=e2e/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[[ -n ${NODE_IMAGE:-} && -f $NODE_IMAGE/done ]] || die "NODE_IMAGE ($NODE_IMAGE) is not built: make e2e-local-node-image"
kubectl_ get --raw /readyz >/dev/null 2>&1 || die "the local cluster is not up: make e2e-local-up"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is missing: e2e/prereqs.sh nodes"
count=${E2E_LOCAL_NODES:-1}
hold=${E2E_LOCAL_NODES_HOLD:-}
api_ip=${E2E_LOCAL_NODE_IP:-$(hostname -I | awk '{print $1}')}
pki=$STATE/pki
nodes=$STATE/nodes
mkdir -p "$nodes"

# The host side of the node network, and what it forwards.
if ! ip link show "$NODES_BRIDGE" >/dev/null 2>&1; then
  ip link add "$NODES_BRIDGE" type bridge
  ip addr add "$NODES_GATEWAY/${NODES_CIDR#*/}" dev "$NODES_BRIDGE"
fi
ip link set "$NODES_BRIDGE" up
for net in "$NODES_CIDR" "$CLUSTER_POD_CIDR"; do
  for dir in -s -d; do
    fwd=(FORWARD "$dir" "$net" -m comment --comment "isochron e2e-local nodes" -j ACCEPT)
    iptables -C "${fwd[@]}" 2>/dev/null || iptables -A "${fwd[@]}"
  done
done

# The binaries, in one directory for the second share (hard links:
# 9p shows symbolic links as links, which the guest would resolve in its own tree).
share_bin=$nodes/bin
# Replaced file by file: a running node's share is this directory, which must stay.
mkdir -p "$share_bin"
for b in "$KUBE_BIN/kubelet" "$KUBE_BIN/kube-proxy" "$MULTUS_BIN" "$WHEREABOUTS_BIN"; do
  ln -f "$b" "$share_bin/$(basename "$b")" 2>/dev/null || cp -f "$b" "$share_bin/"
done
# The cluster's images, imported here into containerd's layout on a disk of their own:
# each node mounts a copy-on-write overlay of it on /var/lib/containerd.
# shellcheck disable=SC2086 # the archives are a list of paths without spaces
"$repo/e2e/local/node-images.sh" "$nodes/images.img" ${IMAGE_ARCHIVES:?IMAGE_ARCHIVES is not set}

# embedded_kubeconfig CERT USER: a kubeconfig for the node, certificates inline (the
# paths of the host mean nothing there), the API server at the host's address.
embedded_kubeconfig() {
  local cert=$1 user=$2
  cat <<KC
apiVersion: v1
kind: Config
clusters:
- name: e2e-local
  cluster:
    server: https://$api_ip:$API_PORT
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$pki/$cert.crt")
    client-key-data: $(base64 -w0 "$pki/$cert.key")
contexts:
- name: e2e-local
  context: {cluster: e2e-local, user: $user}
current-context: e2e-local
KC
}

# boot I: the node VM i's fresh disks and its QEMU.
boot() {
  local i=$1 name ip cidr dir share
  name=$(node_name "$i") ip=$(node_ip "$i") cidr=$(node_pod_cidr "$i")
  dir=$nodes/$name share=$nodes/$name/share
  # Fresh disks each boot, as the host's kubelet root is each bring-up.
  qemu-img create -q -f qcow2 -F raw -b "$NODE_IMAGE/rootfs.img" "$dir/disk.qcow2"
  qemu-img create -q -f qcow2 -F raw -b "$nodes/images.img" "$dir/images.qcow2"

  # A TCG thread per vCPU (thread=multi): with one for all (thread=single) the node was
  # too slow for its own guests (the e2e guest printed nothing in 60 s, under KVM or
  # TCG). Per vCPU under QEMU 7.2, Debian's kernel oopsed on the int3 of its own code
  # patching (static keys flipped at boot, when a realtime VM started, in KVM's LAPIC
  # code: sched_clock_idle_wakeup_event, __schedule, apic_has_pending_timer), a vCPU
  # running code translated before the patch, about every 20 minutes per node; under
  # QEMU 10 (e2e/prereqs.sh nodes) none has been seen. panic=5 still reboots a node that
  # oopses (QEMU resets it; boot.sh runs again); tsc=reliable marks the clock stable from
  # the start, which spares the boot's flip.
  log "starting node VM $name ($ip, pods $cidr; $NODE_CPUS vCPUs, $NODE_MEMORY memory, TCG)"
  qemu-system-x86_64 -name "$name" -machine q35 -accel tcg,thread=multi,tb-size=512 -cpu max \
    -smp "$NODE_CPUS" -m "$NODE_MEMORY" -nodefaults -display none -no-user-config \
    -kernel "$NODE_IMAGE/vmlinuz" -initrd "$NODE_IMAGE/initrd.img" \
    -append "console=ttyS0 root=/dev/vda rw net.ifnames=0 systemd.show_status=0 mitigations=off panic=5 tsc=reliable" \
    -drive "file=$dir/disk.qcow2,if=virtio,format=qcow2,cache=unsafe,discard=unmap" \
    -drive "file=$dir/images.qcow2,if=virtio,format=qcow2,cache=unsafe,discard=unmap" \
    -netdev "tap,id=net0,ifname=$(node_tap "$i" 0),script=no,downscript=no" -device "virtio-net-pci,netdev=net0,mac=$(node_mac "$i" 0)" \
    -netdev "tap,id=net1,ifname=$(node_tap "$i" 1),script=no,downscript=no" -device "virtio-net-pci,netdev=net1,mac=$(node_mac "$i" 1)" \
    -virtfs "local,path=$share,mount_tag=isonode,security_model=none,readonly=on" \
    -virtfs "local,path=$share_bin,mount_tag=isobin,security_model=none,readonly=on" \
    -serial "file:$LOGS/node-$name.console.log" -monitor "unix:$dir/monitor.sock,server,nowait" \
    -daemonize -pidfile "$RUN/node-$name.pid"
}

for ((i = 1; i <= count; i++)); do
  name=$(node_name "$i") ip=$(node_ip "$i") cidr=$(node_pod_cidr "$i")
  dir=$nodes/$name share=$nodes/$name/share
  if alive "node-$name"; then log "node $name runs already"; continue; fi
  rm -rf "$dir" && mkdir -p "$share/pki"
  # A fresh disk is a new node: the Node object of an earlier bring-up (etcd outlives
  # down.sh without PURGE=1) would report Ready before this kubelet ran.
  kubectl_ delete node "$name" --ignore-not-found >/dev/null
  "$repo/e2e/local/certs.sh" "$STATE" "$name" "$ip" "$API_PORT" --node
  cp "$pki/ca.crt" "$share/pki/"
  cp "$pki/kubelet-serving-$name.crt" "$share/pki/kubelet-serving.crt"
  cp "$pki/kubelet-serving-$name.key" "$share/pki/kubelet-serving.key"
  embedded_kubeconfig "kubelet-$name" "system:node:$name" >"$share/kubelet.kubeconfig"
  embedded_kubeconfig kube-proxy system:kube-proxy >"$share/kube-proxy.kubeconfig"
  embedded_kubeconfig multus multus >"$share/multus.kubeconfig"
  embedded_kubeconfig whereabouts whereabouts >"$share/whereabouts.kubeconfig"
  cp "$repo/e2e/local/node/boot.sh" "$share/boot.sh"
  grep '^nameserver' /etc/resolv.conf >"$share/resolv.conf" || echo "nameserver 127.0.0.1" >"$share/resolv.conf"
  cat >"$share/node.env" <<ENV
NODE_NAME=$name
NODE_IP=$ip
NODE_PREFIX=${NODES_CIDR#*/}
NODE_MAC=$(node_mac "$i" 0)
RT_MAC=$(node_mac "$i" 1)
GATEWAY=$NODES_GATEWAY
RT_BRIDGE=$RT_BRIDGE
RT_UPLINK=$NODE_RT_UPLINK
HUGEPAGES=$NODE_HUGEPAGES
NODE_LABELS=$NODE_LABELS
ENV
  cat >"$share/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: /etc/kubernetes/pki/kubelet-serving.crt
tlsPrivateKeyFile: /etc/kubernetes/pki/kubelet-serving.key
readOnlyPort: 0
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: systemd
failSwapOn: false
cpuManagerPolicy: static
reservedSystemCPUs: "0"
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
YAML
  cat >"$share/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: /etc/kubernetes/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $name
clusterCIDR: $CLUSTER_POD_CIDR
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
  { echo "version = 2"; cri_config true /opt/cni/bin /etc/cni/net.d; } >"$share/containerd.toml"
  cat >"$share/whereabouts.conf" <<JSON
{"datastore": "kubernetes", "kubernetes": {"kubeconfig": "/etc/kubernetes/whereabouts.kubeconfig"}}
JSON
  cat >"$share/00-multus.conf" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "multus-cni-network",
  "type": "multus",
  "kubeconfig": "/etc/kubernetes/multus.kubeconfig",
  "binDir": "/opt/cni/bin",
  "delegates": [{
    "cniVersion": "0.4.0",
    "name": "e2e-local",
    "plugins": [{
      "type": "bridge", "bridge": "e2elocal0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    }]
  }]
}
JSON

  # Its taps and its route.
  for tap in "$(node_tap "$i" 0):$NODES_BRIDGE" "$(node_tap "$i" 1):$RT_BRIDGE"; do
    ip link show "${tap%%:*}" >/dev/null 2>&1 || ip tuntap add dev "${tap%%:*}" mode tap
    ip link set "${tap%%:*}" master "${tap#*:}" up
  done
  ip route replace "$cidr" via "$ip"
  [[ -n $hold ]] || touch "$share/join"
  boot "$i"
done
if [[ -n $hold ]]; then
  log "node VMs booting; they join the cluster on the next nodes-up.sh (without E2E_LOCAL_NODES_HOLD)"
  exit 0
fi

# A node whose kubelet has not registered in NODE_REGISTER_TIMEOUT is booted again, once,
# from fresh disks: under TCG, Debian's kernel has stopped early in a boot here (its
# console silent after 42 s, once in about ten boots). Nodes booted ahead join now.
for ((i = 1; i <= count; i++)); do
  touch "$nodes/$(node_name "$i")/share/join"
done
t0=$SECONDS
for ((i = 1; i <= count; i++)); do
  name=$(node_name "$i")
  if ! (wait_for "node $name" "$NODE_REGISTER_TIMEOUT" kubectl_ get node "$name") 2>/dev/null; then
    log "node $name did not register in ${NODE_REGISTER_TIMEOUT}s (console: $(tail -n 1 "$LOGS/node-$name.console.log")); booting it again"
    kill -9 "$(cat "$RUN/node-$name.pid")" 2>/dev/null || true
    sleep 1
    mv "$LOGS/node-$name.console.log" "$LOGS/node-$name.console.log.1"
    boot "$i"
  fi
  wait_for "node $name" "$NODE_BOOT_TIMEOUT" kubectl_ get node "$name"
  kubectl_ wait --for=condition=Ready "node/$name" --timeout="${NODE_BOOT_TIMEOUT}s" >/dev/null ||
    die "node $name is not Ready; see $LOGS/node-$name.console.log"
  log "node $name Ready ($((SECONDS - t0)) s after the VMs started or, booted ahead, were let join)"
done

# The VMs run on the node VMs, with KVM (e2e/local/kubevirt-nodes): virt-handler leaves
# the host's node. KubeVirt is ready for them once each node's virt-handler is and has
# labelled it.
placed() { kubectl_ -n kubevirt get ds virt-handler -o jsonpath='{.spec.template.spec.nodeSelector}' | grep -q isochron.io/e2e-node; }
schedulable() { [[ $(kubectl_ get node "$1" -o jsonpath='{.metadata.labels.kubevirt\.io/schedulable}') == true ]]; }
kubectl_ apply --server-side -k "$repo/e2e/local/kubevirt-nodes" >/dev/null
wait_for "virt-operator placing virt-handler on the node VMs" 300 placed
kubectl_ -n kubevirt rollout status ds/virt-handler --timeout=600s >/dev/null
# virt-handler left the host's node; its label says so at once (virt-controller would
# after the handler's heartbeat timed out), so nothing is placed there meanwhile.
kubectl_ label node "$NODE_NAME" kubevirt.io/schedulable=false --overwrite >/dev/null
for ((i = 1; i <= count; i++)); do
  wait_for "virt-handler on $(node_name "$i")" 600 schedulable "$(node_name "$i")"
done
kubectl_ -n kubevirt wait kv/kubevirt --for=condition=Available --timeout=600s >/dev/null
log "KubeVirt runs VMs on the node VMs ($((SECONDS - t0)) s after they started or were let join)"
kubectl_ get nodes -o wide -L kubevirt.io/schedulable,kubevirt.io/realtime,kubevirt.io/cpumanager
