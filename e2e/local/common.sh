# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this file
# Settings shared by the local e2e cluster's scripts (sourced, not run). Every value
# can be overridden from the environment; versions have no default here: make passes
# the Makefile's pins (the one place they are set). The scripts need the Debian
# packages of e2e/prereqs.sh local, which every make e2e-local* target installs first.

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [[ -z ${KUBE_VERSION:-} ]]; then
  echo "e2e-local: KUBE_VERSION is not set: run these scripts through make (make e2e-local-up), which passes the Makefile's pins" >&2
  exit 1
fi
KUBE_BIN=${KUBE_BIN:-$repo/bin/k8s/$KUBE_VERSION}
STATE=${E2E_LOCAL_STATE:-$repo/bin/e2e-local}
NODE_NAME=${E2E_LOCAL_NODE:-e2e-local}
API_PORT=${E2E_LOCAL_API_PORT:-6443}
ETCD_PORT=${E2E_LOCAL_ETCD_PORT:-2379}
KUBELET_PORT=${E2E_LOCAL_KUBELET_PORT:-10250}
# The pod sandbox image, built FROM scratch from e2e/local/pause and never pulled.
PAUSE_IMAGE=${E2E_LOCAL_PAUSE_IMAGE:-localhost/isochron/pause:e2e}
POD_CIDR=${E2E_LOCAL_POD_CIDR:-10.244.0.0/24}
# The pause program: the pods' sandbox image, and PID 1 of the node's PID namespace.
PAUSE_BIN=${PAUSE_BIN:-$repo/bin/pause}
# Multus' thin plugin, built from gopkg.in/k8snetworkplumbingwg/multus-cni.v4 (e2e/local/modules/multus).
MULTUS_BIN=${MULTUS_BIN:-$repo/bin/multus}
# whereabouts, the cluster-wide IPAM plugin, built from github.com/k8snetworkplumbingwg/whereabouts
# (e2e/local/modules/whereabouts), and its flat configuration file: the plugin looks for it
# at this path on the node (as on a real node, where whereabouts' DaemonSet writes it);
# up.sh writes it, down.sh removes it.
WHEREABOUTS_BIN=${WHEREABOUTS_BIN:-$repo/bin/whereabouts}
WHEREABOUTS_CONF=/etc/cni/net.d/whereabouts.d/whereabouts.conf
# The second network check-multus.sh attaches through a NetworkAttachmentDefinition
# (whereabouts IPAM).
NAD_BRIDGE=e2elocal1
NAD_CIDR=${E2E_LOCAL_NAD_CIDR:-10.245.0.0/24}
# The RT network of the e2e suite's NIC agent test: a bridge with an uplink, one end of a
# veth pair whose other end goes nowhere (up.sh). The agent finds a bridge's uplink by
# itself only when it is no veth, so the test's network names it (isochron.io/rt-uplink).
RT_BRIDGE=e2elocalrt
RT_UPLINK=e2elocalrt-up
RT_UPLINK_PEER=e2elocalrt-far
SERVICE_CIDR=10.96.0.0/16
# The registry the local node's containerd pulls a release from over plain HTTP
# (make e2e-local-release pushes to it): the distribution project's registry
# (hack/release/registry), storing under $STATE/registry; up.sh starts it.
REGISTRY_BIN=${REGISTRY_BIN:-$repo/bin/registry}
REGISTRY_ADDR=${E2E_LOCAL_REGISTRY:-127.0.0.1:5000}
# The kubelet's root: KubeVirt's virt-handler mounts /var/lib/kubelet (pods, device
# plugins, seccomp) from the host by that path, so the local cluster uses the standard one.
KUBELET_ROOT=${E2E_LOCAL_KUBELET_ROOT:-/var/lib/kubelet}
# 2Mi hugepages for dedicated crawlers' guest memory (the kubelet reads them at start).
HUGEPAGES=${E2E_LOCAL_HUGEPAGES:-512}

# Worker nodes that are VMs (nodes-up.sh, docs/dev/e2e.md "Nodes that are VMs"): node i is
# e2e-node-i at 10.250.0.(10+i) on the bridge $NODES_BRIDGE (the host is their gateway
# at $NODES_GATEWAY), its pods in 10.244.i.0/24 (the host's are $POD_CIDR, inside
# $CLUSTER_POD_CIDR); NODE_CPUS vCPUs (one reserved for the system, the rest for the
# static CPU Manager: a dedicated crawler of 1 vCPU needs 2 exclusive CPUs).
NODES_BRIDGE=e2enodes0
NODES_CIDR=10.250.0.0/24
NODES_GATEWAY=10.250.0.1
CLUSTER_POD_CIDR=10.244.0.0/16
NODE_CPUS=${E2E_NODE_CPUS:-4}
NODE_MEMORY=${E2E_NODE_MEMORY:-6G}
NODE_HUGEPAGES=${E2E_NODE_HUGEPAGES:-512}
NODE_LABELS=isochron.io/e2e-node=vm
# The node VMs' RT uplink (their second NIC, renamed by boot.sh), a port of $RT_BRIDGE
# there: the NIC agent test names it in the multi-node run (E2E_RT_UPLINK).
NODE_RT_UPLINK=rtuplink0
# Under software emulation a node boots, imports the images and joins in minutes.
NODE_BOOT_TIMEOUT=${E2E_NODE_BOOT_TIMEOUT:-1200}
NODE_REGISTER_TIMEOUT=${E2E_NODE_REGISTER_TIMEOUT:-360}
node_name() { echo "e2e-node-$1"; }
node_ip() { echo "10.250.0.$((10 + $1))"; }
node_pod_cidr() { echo "10.244.$1.0/24"; }
# node_mac I K: the MAC of node I's NIC K (0: the cluster network, 1: the RT network).
node_mac() { printf '52:54:00:e2:%02x:%02x\n' "$2" "$1"; }
# node_tap I K: the host's tap of that NIC.
node_tap() { if [[ $2 == 0 ]]; then echo "e2enode$1"; else echo "e2enode$1rt"; fi; }

RUN=$STATE/run
LOGS=$STATE/logs
CONTAINERD_SOCK=$STATE/containerd/containerd.sock
KUBECONFIG_ADMIN=$STATE/admin.kubeconfig

log() { echo "e2e-local: $*" >&2; }
die() { log "$*"; exit 1; }

# alive NAME: the process recorded in $RUN/NAME.pid runs.
alive() { [[ -f $RUN/$1.pid ]] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }

# wait_for WHAT SECONDS COMMAND...: retry COMMAND once a second.
wait_for() {
  local what=$1 secs=$2 i
  shift 2
  for ((i = 0; i < secs; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  die "$what not ready after ${secs}s; see $LOGS/"
}

# cri_config SYSTEMD_CGROUP CNI_BIN_DIR CNI_CONF_DIR: containerd's CRI plugin as the
# host's node (up.sh: cgroupfs) and the node VMs (nodes-up.sh: systemd) both run it.
cri_config() {
  cat <<TOML
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = $1
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$2"
    conf_dir = "$3"
TOML
}

ctr_() { ctr --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }
kubectl_() { "$KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

# cluster_init: the host PID of the node's PID namespace's init (up.sh); in_cluster
# COMMAND...: run COMMAND in that namespace, with its /proc, where the PIDs containerd
# reports (ctr tasks ls) are valid.
cluster_init() { pgrep -P "$(cat "$RUN/pidns.pid" 2>/dev/null || echo 0)" -x pause; }
in_cluster() { nsenter -t "$(cluster_init)" -p -m -- "$@"; }
