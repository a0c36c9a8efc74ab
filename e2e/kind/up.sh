#!/usr/bin/env bash
# Creates the kind cluster of `make e2e-kind`: kind-config.yaml (a control plane and two
# workers, static CPU Manager, reservedSystemCPUs, hugepages), an RT network that spans
# the workers (a Docker network whose interface in each worker, RT_UPLINK, is the uplink
# of the bridge RT_BRIDGE there), Debian-independent CNI pieces (the bridge plugin
# CNI_BRIDGE_BIN, built from its Go module; whereabouts WHEREABOUTS_VERSION with its CRDs
# from WHEREABOUTS_DIR, its module), KubeVirt KUBEVIRT_VERSION from its release manifest
# with the CR in kubevirt/ (software emulation when the nodes have no /dev/kvm), Multus
# MULTUS_VERSION (thick plugin), and the locally built images IMG, NIC_AGENT_IMG and
# PROBE_IMG loaded into the nodes. Writes the cluster's kubeconfig to KUBECONFIG_OUT.
#
# Every version comes from the Makefile (make e2e-kind); nothing here has a default.
set -euo pipefail

die() { echo "e2e-kind: $*" >&2; exit 1; }
for v in KIND KIND_CLUSTER KIND_NODE_IMAGE KUBEVIRT_VERSION MULTUS_VERSION WHEREABOUTS_VERSION WHEREABOUTS_DIR CNI_BRIDGE_BIN \
  RT_NETWORK RT_BRIDGE RT_UPLINK IMG NIC_AGENT_IMG PROBE_IMG KUSTOMIZE KUBECONFIG_OUT; do
  [[ -n ${!v:-} ]] || die "$v is not set: run make e2e-kind"
done
KUBECTL=${KUBECTL:-kubectl}
command -v "$KUBECTL" >/dev/null || die "$KUBECTL is missing"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if ! "$KIND" get clusters | grep -qx "$KIND_CLUSTER"; then
  "$KIND" create cluster --name "$KIND_CLUSTER" --image "$KIND_NODE_IMAGE" \
    --config "$here/kind-config.yaml" --wait 120s
fi
"$KIND" get kubeconfig --name "$KIND_CLUSTER" >"$KUBECONFIG_OUT"
export KUBECONFIG=$KUBECONFIG_OUT

echo "e2e-kind: loading $IMG, $NIC_AGENT_IMG and $PROBE_IMG"
"$KIND" load docker-image --name "$KIND_CLUSTER" "$IMG" "$NIC_AGENT_IMG" "$PROBE_IMG"

# The RT network, as the local cluster's node VMs have it: one Docker network spans the
# workers; in each, its interface is renamed RT_UPLINK (the same name on every node, which
# the suite's NIC agent test names: E2E_RT_UPLINK) and made the only port of the bridge
# RT_BRIDGE that the RT NetworkAttachmentDefinitions name. Frames of the VMs' MACs cross
# Docker's bridge between the workers. kind's nodes have the CNI plugins kindnet needs,
# not bridge: the pinned one goes into every node.
docker network inspect "$RT_NETWORK" >/dev/null 2>&1 || docker network create "$RT_NETWORK" >/dev/null
mapfile -t nodes < <("$KIND" get nodes --name "$KIND_CLUSTER")
for node in "${nodes[@]}"; do
  docker cp "$CNI_BRIDGE_BIN" "$node:/opt/cni/bin/bridge"
done
mapfile -t workers < <("$KUBECTL" get nodes -l '!node-role.kubernetes.io/control-plane' -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
[[ ${#workers[@]} -ge 2 ]] || die "want two worker nodes (kind-config.yaml), found ${#workers[@]}: ${workers[*]}"
for node in "${workers[@]}"; do
  if docker exec "$node" ip link show "$RT_UPLINK" >/dev/null 2>&1; then
    continue
  fi
  docker network connect "$RT_NETWORK" "$node"
  mac=$(docker inspect -f "{{(index .NetworkSettings.Networks \"$RT_NETWORK\").MacAddress}}" "$node")
  docker exec "$node" sh -euc '
    dev=$(ip -o link | awk -v m="$1" '"'"'index($0, m) {sub(":", "", $2); sub("@.*", "", $2); print $2; exit}'"'"')
    [ -n "$dev" ] || { echo "no interface with MAC $1" >&2; exit 1; }
    ip link set "$dev" down
    ip addr flush dev "$dev"
    ip link set "$dev" name "$2"
    ip link add "$3" type bridge
    ip link set "$2" master "$3"
    ip link set "$2" up
    ip link set "$3" up' rt "$mac" "$RT_UPLINK" "$RT_BRIDGE"
  echo "e2e-kind: node $node: RT uplink $RT_UPLINK (Docker network $RT_NETWORK), a port of bridge $RT_BRIDGE"
done

# whereabouts, the RT network's IPAM (cluster-wide leases): its CRDs and DaemonSet (which
# installs its CNI binary and configuration on every node and runs ip-control-loop) from
# its Go module at WHEREABOUTS_VERSION, the image pinned to that release instead of the
# manifest's :latest.
echo "e2e-kind: installing whereabouts $WHEREABOUTS_VERSION"
"$KUBECTL" apply --server-side -f "$WHEREABOUTS_DIR/doc/crds/whereabouts.cni.cncf.io_ippools.yaml" \
  -f "$WHEREABOUTS_DIR/doc/crds/whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml"
sed "s|ghcr.io/k8snetworkplumbingwg/whereabouts:latest|ghcr.io/k8snetworkplumbingwg/whereabouts:$WHEREABOUTS_VERSION|" \
  "$WHEREABOUTS_DIR/doc/crds/daemonset-install.yaml" | "$KUBECTL" apply --server-side -f -

echo "e2e-kind: installing Multus $MULTUS_VERSION (thick plugin)"
"$KUBECTL" apply --server-side -f \
  "https://raw.githubusercontent.com/k8snetworkplumbingwg/multus-cni/$MULTUS_VERSION/deployments/multus-daemonset-thick.yml"

echo "e2e-kind: installing KubeVirt $KUBEVIRT_VERSION"
"$KUBECTL" apply --server-side -f \
  "https://github.com/kubevirt/kubevirt/releases/download/$KUBEVIRT_VERSION/kubevirt-operator.yaml"
"$KUBECTL" -n kubevirt wait deployment/virt-operator --for=condition=Available --timeout=300s
cr=$("$KUSTOMIZE" build "$here/kubevirt")
if ! docker exec "${workers[0]}" test -c /dev/kvm; then
  echo "e2e-kind: no /dev/kvm in the nodes: KubeVirt uses software emulation (useEmulation)"
  cr=${cr/developerConfiguration:/developerConfiguration:
      useEmulation: true}
fi
"$KUBECTL" apply --server-side -f - <<<"$cr"
"$KUBECTL" -n kubevirt wait kv/kubevirt --for=condition=Available --timeout=900s
"$KUBECTL" -n kube-system rollout status daemonset/kube-multus-ds --timeout=300s
"$KUBECTL" -n kube-system rollout status daemonset/whereabouts --timeout=300s

# virt-handler labels CPU-Manager nodes once it has seen the kubelet's static policy.
for _ in $(seq 1 60); do
  labelled=0
  for w in "${workers[@]}"; do
    if "$KUBECTL" get node "$w" -o jsonpath='{.metadata.labels.kubevirt\.io/cpumanager}' | grep -qx true; then
      labelled=$((labelled + 1))
    fi
  done
  if [[ $labelled -eq ${#workers[@]} ]]; then
    echo "e2e-kind: cluster ready (KUBECONFIG=$KUBECONFIG_OUT)"
    exit 0
  fi
  sleep 5
done
die "workers ${workers[*]}: not all got kubevirt.io/cpumanager=true: is the kubelet's CPU Manager static?"
