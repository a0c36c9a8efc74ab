#!/usr/bin/env bash
# Brings up a one-node Kubernetes cluster on this machine from binaries built from Go
# modules (bin/k8s/<version>) and Debian's containerd, runc and CNI plugins, pulling
# images from nowhere but the registry it starts here ($REGISTRY_ADDR): etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy
# (iptables mode), containerd and a kubelet with the static CPU Manager (reservedSystemCPUs "0"); Multus' thin plugin
# ($MULTUS_BIN, make e2e-local-multus) is the CNI, delegating to a bridge; whereabouts
# ($WHEREABOUTS_BIN, make e2e-local-whereabouts) gives secondary networks cluster-wide
# addresses. All state, logs and pid files live under bin/e2e-local/; e2e/local/down.sh
# stops it.
#
# Needs root, cgroup v1 or v2, the Debian packages of e2e/prereqs.sh local, the
# images archives IMAGE_ARCHIVES (space-separated
# `docker save` archives, imported into containerd's k8s.io namespace) and whereabouts'
# CRDs WHEREABOUTS_CRDS (space-separated files, from its module's doc/crds).
set -euo pipefail
# shellcheck source=e2e/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[[ $(id -u) -eq 0 ]] || die "must run as root (kubelet and containerd manage cgroups and mounts)"
for b in kube-apiserver etcd kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
  [[ -x $KUBE_BIN/$b ]] || die "$KUBE_BIN/$b is missing: make e2e-local-bins"
done
[[ -x /usr/lib/cni/bridge ]] || die "Debian's packages are missing: e2e/prereqs.sh local (make e2e-local-prereqs)"
[[ -x $MULTUS_BIN ]] || die "$MULTUS_BIN is missing: make e2e-local-multus"
[[ -x $WHEREABOUTS_BIN ]] || die "$WHEREABOUTS_BIN is missing: make e2e-local-whereabouts"
[[ -n ${WHEREABOUTS_CRDS:-} ]] || die "WHEREABOUTS_CRDS is not set: run make e2e-local-up, which passes whereabouts' CRDs from its module"
for crd in $WHEREABOUTS_CRDS; do [[ -f $crd ]] || die "whereabouts' CRD $crd is missing"; done
[[ -x $PAUSE_BIN ]] || die "$PAUSE_BIN is missing: make e2e-local-images"
[[ -x $REGISTRY_BIN ]] || die "$REGISTRY_BIN is missing: make e2e-local-registry"

mkdir -p "$RUN" "$LOGS" "$STATE/containerd" "$STATE/cni/net.d" "$STATE/cni/bin" "$STATE/manifests"
# The network namespaces there before this bring-up: down.sh deletes only the pods' ones
# it added (a sandbox killed without a CNI DEL leaves its namespace and veth behind).
[[ -f $RUN/netns-before ]] || { ls /var/run/netns 2>/dev/null || true; } >"$RUN/netns-before"
node_ip=${E2E_LOCAL_NODE_IP:-$(hostname -I | awk '{print $1}')}
[[ -n $node_ip ]] || die "cannot find this machine's IP address: set E2E_LOCAL_NODE_IP"

# start NAME COMMAND...: run COMMAND in its own session, log to $LOGS/NAME.log.
start() {
  local name=$1
  shift
  if alive "$name"; then log "$name runs already (pid $(cat "$RUN/$name.pid"))"; return; fi
  log "starting $name"
  setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
}


t0=$SECONDS
"$repo/e2e/local/certs.sh" "$STATE" "$NODE_NAME" "$node_ip" "$API_PORT"
pki=$STATE/pki

start etcd "$KUBE_BIN/etcd" --name e2e-local --data-dir "$STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
  --initial-cluster "e2e-local=http://127.0.0.1:$((ETCD_PORT + 1))" --unsafe-no-fsync
wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

start kube-apiserver "$KUBE_BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" --secure-port "$API_PORT" --advertise-address "$node_ip" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP,Hostname \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range "$SERVICE_CIDR" --authorization-mode Node,RBAC \
  --enable-admission-plugins NodeRestriction --allow-privileged=true --profiling=false \
  --requestheader-client-ca-file "$pki/ca.crt" --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key"
wait_for kube-apiserver 90 kubectl_ get --raw /readyz
# Node VMs of an earlier bring-up that no longer run (etcd outlives down.sh without
# PURGE=1, and so it does a restart of the machine): their Node objects would hold
# DaemonSet pods (virt-handler, the NIC agent) that never start, and KubeVirt would not
# become Available. nodes-up.sh boots a node VM as a new Node anyway.
for n in $(kubectl_ get nodes -l "$NODE_LABELS" -o name); do
  alive "node-${n#node/}" || { log "deleting $n: its node VM no longer runs"; kubectl_ delete "$n" --wait=false >/dev/null; }
done
# Multus' and whereabouts' own permissions, before any pod needs them.
kubectl_ apply -f "$repo/e2e/local/multus-rbac.yaml" >/dev/null
kubectl_ apply -f "$repo/e2e/local/whereabouts-rbac.yaml" >/dev/null
# kube-proxy in iptables mode (conntrack and the iptables nat table are built into this
# kernel) makes Services work, the `kubernetes` Service (10.96.0.1:443) included; it
# replaces the DNAT rule of stages 1 and 2, deleted here should a run of those be left.
iptables -t nat -S PREROUTING 2>/dev/null | { grep -e "-d ${SERVICE_CIDR%.0/*}.1/32 .*--dport 443 -j DNAT" || true; } |
  while read -r _ chain rule; do read -ra r <<<"$rule"; iptables -t nat -D "$chain" "${r[@]}" || true; done
# kube-proxy exits when its config file changes: write it only when its content does.
cat >"$STATE/kube-proxy.yaml.new" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Leave the host's conntrack sysctls alone.
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
nodePortAddresses: [primary]
YAML
if cmp -s "$STATE/kube-proxy.yaml.new" "$STATE/kube-proxy.yaml"; then
  rm "$STATE/kube-proxy.yaml.new"
else
  mv "$STATE/kube-proxy.yaml.new" "$STATE/kube-proxy.yaml"
fi
# The filter table's FORWARD policy is DROP here (Docker's): pod -> ClusterIP -> pod is
# routed through the bridge's gateway address and kube-proxy only accepts the packets it
# masquerades and established ones, so accept what comes from or goes to the pods; the
# comment lets down.sh find these rules.
for dir in -s -d; do
  fwd=(FORWARD "$dir" "$POD_CIDR" -m comment --comment "isochron e2e-local pods" -j ACCEPT)
  iptables -C "${fwd[@]}" 2>/dev/null || iptables -A "${fwd[@]}"
done

start kube-controller-manager "$KUBE_BIN/kube-controller-manager" \
  --kubeconfig "$STATE/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --use-service-account-credentials --leader-elect=false --secure-port 0 \
  --service-cluster-ip-range "$SERVICE_CIDR" --controllers '*,bootstrapsigner,tokencleaner'
start kube-scheduler "$KUBE_BIN/kube-scheduler" \
  --kubeconfig "$STATE/scheduler.kubeconfig" \
  --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
  --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port 10259

# containerd: its own root, state and socket; CRI as DEVELOPERS.md measured it
# (restrict_oom_score_adj: the kubelet asks for scores below the caller's own).
{
  cat <<TOML
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"
TOML
  cri_config false "$STATE/cni/bin" "$STATE/cni/net.d"
  cat <<TOML
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$STATE/containerd/certs.d"
TOML
} >"$STATE/containerd/config.toml"
# The local registry, which containerd reaches over plain HTTP (hosts.toml), as a node
# reaches a release's registry; nothing else is reachable from here.
mkdir -p "$STATE/containerd/certs.d/$REGISTRY_ADDR" "$STATE/registry"
cat >"$STATE/containerd/certs.d/$REGISTRY_ADDR/hosts.toml" <<TOML
server = "http://$REGISTRY_ADDR"
[host."http://$REGISTRY_ADDR"]
  capabilities = ["pull", "resolve"]
TOML
start registry "$REGISTRY_BIN" -addr "$REGISTRY_ADDR" -root "$STATE/registry"
wait_for registry 30 curl -fsS "http://$REGISTRY_ADDR/v2/"
# CNI: Multus' thin plugin (built from its Go module into $MULTUS_BIN, docs/dev/e2e.md) is
# the node's only network config; it delegates the pods' default network to the bridge
# e2elocal0 and adds the networks of a pod's k8s.v1.cni.cncf.io/networks annotation
# from NetworkAttachmentDefinitions, read as the user multus (multus-rbac.yaml). containerd finds
# multus and Debian's plugins in one directory of links, $STATE/cni/bin.
rm -f "$STATE/cni/net.d/10-e2e-local.conflist" # stage 1's config, before Multus
for p in /usr/lib/cni/*; do ln -sfn "$p" "$STATE/cni/bin/$(basename "$p")"; done
ln -sfn "$MULTUS_BIN" "$STATE/cni/bin/multus"
ln -sfn "$WHEREABOUTS_BIN" "$STATE/cni/bin/whereabouts"
# whereabouts reads the API with the kubeconfig its flat file names, and looks for that
# file at fixed paths of the node (a NAD names only {"type": "whereabouts", "range": ...}):
# $WHEREABOUTS_CONF, unless another file it prefers exists. up.sh writes it and records
# the directories it created for down.sh; a file of another installation is left alone.
[[ ! -e /etc/kubernetes/cni/net.d/whereabouts.d/whereabouts.conf ]] ||
  die "/etc/kubernetes/cni/net.d/whereabouts.d/whereabouts.conf exists: whereabouts would read it instead of $WHEREABOUTS_CONF; move it away"
if [[ -e $WHEREABOUTS_CONF ]] && ! grep -qF "$STATE/whereabouts.kubeconfig" "$WHEREABOUTS_CONF"; then
  die "$WHEREABOUTS_CONF exists and is not this cluster's: move it away (another whereabouts installation?)"
fi
wa_dir=$(dirname "$WHEREABOUTS_CONF")
while [[ ! -d $wa_dir ]]; do echo "$wa_dir" >>"$RUN/whereabouts-dirs"; wa_dir=$(dirname "$wa_dir"); done
mkdir -p "$(dirname "$WHEREABOUTS_CONF")"
cat >"$WHEREABOUTS_CONF" <<JSON
{"datastore": "kubernetes", "kubernetes": {"kubeconfig": "$STATE/whereabouts.kubeconfig"},
 "log_file": "$LOGS/whereabouts.log", "log_level": "debug"}
JSON
cat >"$STATE/cni/net.d/00-multus.conf" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "multus-cni-network",
  "type": "multus",
  "kubeconfig": "$STATE/multus.kubeconfig",
  "binDir": "$STATE/cni/bin",
  "cniDir": "$STATE/cni/multus",
  "logFile": "$LOGS/multus.log",
  "logLevel": "verbose",
  "delegates": [{
    "cniVersion": "0.4.0",
    "name": "e2e-local",
    "plugins": [{
      "type": "bridge", "bridge": "e2elocal0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]],
               "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$STATE/cni/ipam"}
    }]
  }]
}
JSON
# The RT network of the suite's NIC agent test: bridge $RT_BRIDGE with an uplink port
# $RT_UPLINK, one end of a veth pair (its peer $RT_UPLINK_PEER stays unattached and up).
if ! ip link show "$RT_BRIDGE" >/dev/null 2>&1; then
  ip link add "$RT_BRIDGE" type bridge
fi
if ! ip link show "$RT_UPLINK" >/dev/null 2>&1; then
  ip link add "$RT_UPLINK" type veth peer name "$RT_UPLINK_PEER"
fi
ip link set "$RT_UPLINK" master "$RT_BRIDGE"
for l in "$RT_UPLINK_PEER" "$RT_UPLINK" "$RT_BRIDGE"; do ip link set "$l" up; done

# KubeVirt's hostPath volumes with Bidirectional propagation (/var/lib/kubelet,
# /var/run/kubevirt) need shared mounts. systemd makes / shared on most hosts; here it
# is private. containerd looks the hostPath up in mountinfo without resolving symlinks
# (/var/run -> /run), so a shared bind mount of /run/kubevirt is not found: share / as
# systemd does. down.sh restores the propagation it found.
if [[ ! -f $RUN/root-shared.orig ]]; then
  awk '$5 == "/" { print ($0 ~ / shared:[0-9]+ /) ? "shared" : "private" }' /proc/self/mountinfo >"$RUN/root-shared.orig"
fi
mount --make-rshared /
mkdir -p "$KUBELET_ROOT"
# The node's processes (containerd, its containers, the kubelet) get a PID namespace of
# their own, whose PID 1 is the pause program: KubeVirt's virt-handler (hostPID) reaches
# the host through /proc/1/root and /proc/1/ns/mnt, and this machine's real PID 1 is
# closed to us (its capabilities include CAP_SYS_RESOURCE, which ours lack, so the
# kernel refuses the ptrace-mode access /proc/1/ns needs: "permission denied"). The
# namespace shares the host's mounts (/ is shared, propagation unchanged) but mounts a
# /proc of its own, privately. in_cluster (common.sh) runs a command inside.
if ! alive pidns; then
  log "starting pidns (PID 1: $PAUSE_BIN)"
  # shellcheck disable=SC2016 # $0 expands in the inner shell
  setsid unshare --pid --fork --mount --propagation unchanged -- \
    sh -c 'mount --make-private /proc && mount -t proc proc /proc && exec "$0"' "$PAUSE_BIN" \
    >"$LOGS/pidns.log" 2>&1 </dev/null &
  echo $! >"$RUN/pidns.pid"
fi
wait_for "the PID namespace's init" 10 cluster_init
start containerd nsenter -t "$(cluster_init)" -p -m -- containerd --config "$STATE/containerd/config.toml"
wait_for containerd 30 ctr_ version

for archive in ${IMAGE_ARCHIVES:-}; do
  log "importing $(basename "$archive") into containerd (k8s.io)"
  ctr_ images import "$archive" >/dev/null
done
ctr_ images ls -q | grep -x "$PAUSE_IMAGE" >/dev/null || die "containerd lacks the sandbox image $PAUSE_IMAGE: pass its archive in IMAGE_ARCHIVES"

cat >"$STATE/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
cpuManagerPolicy: static
reservedSystemCPUs: "0"
memoryManagerPolicy: None
topologyManagerPolicy: none
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
staticPodPath: $STATE/manifests
serializeImagePulls: false
evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%}
# No image garbage collection: none of these images can be pulled again. With the
# default (85%), a disk filled by Go caches had the kubelet delete the pause and rtprobe
# images in the middle of a run (docs/dev/e2e.md).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
YAML
# Hugepages, before the kubelet reads the node's capacity; down.sh restores the count.
[[ -f $RUN/nr_hugepages.orig ]] || cat /proc/sys/vm/nr_hugepages >"$RUN/nr_hugepages.orig"
echo "$HUGEPAGES" >/proc/sys/vm/nr_hugepages
got=$(cat /proc/sys/vm/nr_hugepages)
[[ $got -ge $HUGEPAGES ]] || log "warning: asked for $HUGEPAGES 2Mi hugepages, the kernel gave $got"
# The static policy refuses to start when its checkpoint was written under another
# reservation; a fresh kubelet root per bring-up (down.sh empties it) keeps that simple.
start kubelet nsenter -t "$(cluster_init)" -p -m -- "$KUBE_BIN/kubelet" --config "$STATE/kubelet.yaml" \
  --kubeconfig "$STATE/kubelet.kubeconfig" --root-dir "$KUBELET_ROOT" \
  --hostname-override "$NODE_NAME" --node-ip "$node_ip" --v 2
wait_for "node $NODE_NAME" 120 kubectl_ get node "$NODE_NAME"
kubectl_ wait --for=condition=Ready "node/$NODE_NAME" --timeout=120s >/dev/null ||
  die "node $NODE_NAME is not Ready; see $LOGS/kubelet.log"
# kube-proxy once the node is registered: kube-proxy 1.37 exits when its node's IPs
# change, and a Node that appears after it started is such a change ("NodeIPs changed
# for the node", then nothing programs Services). No pod runs before the node is Ready.
start kube-proxy "$KUBE_BIN/kube-proxy" --config "$STATE/kube-proxy.yaml" --v 2
kube_svc_rule() { iptables -t nat -S KUBE-SERVICES | grep -e "-d ${SERVICE_CIDR%.0/*}.1/32 .*dport 443"; }
wait_for "kube-proxy's rule for the kubernetes Service" 60 kube_svc_rule
wait_for "default ServiceAccount" 60 kubectl_ get serviceaccount default -n default
# Multus reads NetworkAttachmentDefinitions: its CRD (the operator's, config/thirdparty).
kubectl_ apply -f "$repo/config/thirdparty/multus/networks-crd.yaml" >/dev/null
kubectl_ wait --for=condition=Established crd/network-attachment-definitions.k8s.cni.cncf.io --timeout=60s >/dev/null
# whereabouts keeps its leases in IPPools (and OverlappingRangeIPReservations): its CRDs,
# of the version its binary was built from.
for crd in $WHEREABOUTS_CRDS; do kubectl_ apply --server-side -f "$crd" >/dev/null; done
kubectl_ wait --for=condition=Established crd/ippools.whereabouts.cni.cncf.io \
  crd/overlappingrangeipreservations.whereabouts.cni.cncf.io --timeout=60s >/dev/null

log "cluster up in $((SECONDS - t0))s: export KUBECONFIG=$KUBECONFIG_ADMIN"
kubectl_ get node -o wide
