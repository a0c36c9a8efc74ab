#!/usr/bin/env bash
# Creates the kind cluster of `make e2e-kind`: kind-config.yaml (static CPU Manager,
# reservedSystemCPUs, hugepages), KubeVirt KUBEVIRT_VERSION from its release manifest
# with the CR in kubevirt/ (software emulation when the node has no /dev/kvm), Multus
# MULTUS_VERSION (thick plugin), and the locally built images IMG, NIC_AGENT_IMG and PROBE_IMG loaded
# into the node. Writes the cluster's kubeconfig to KUBECONFIG_OUT.
#
# Every version comes from the Makefile (make e2e-kind); nothing here has a default.
set -euo pipefail

die() { echo "e2e-kind: $*" >&2; exit 1; }
for v in KIND KIND_CLUSTER KIND_NODE_IMAGE KUBEVIRT_VERSION MULTUS_VERSION IMG NIC_AGENT_IMG PROBE_IMG KUSTOMIZE KUBECONFIG_OUT; do
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

echo "e2e-kind: installing Multus $MULTUS_VERSION (thick plugin)"
"$KUBECTL" apply --server-side -f \
  "https://raw.githubusercontent.com/k8snetworkplumbingwg/multus-cni/$MULTUS_VERSION/deployments/multus-daemonset-thick.yml"

echo "e2e-kind: installing KubeVirt $KUBEVIRT_VERSION"
"$KUBECTL" apply --server-side -f \
  "https://github.com/kubevirt/kubevirt/releases/download/$KUBEVIRT_VERSION/kubevirt-operator.yaml"
"$KUBECTL" -n kubevirt wait deployment/virt-operator --for=condition=Available --timeout=300s
cr=$("$KUSTOMIZE" build "$here/kubevirt")
node=$("$KUBECTL" get nodes -o jsonpath='{.items[0].metadata.name}')
if ! docker exec "$node" test -c /dev/kvm; then
  echo "e2e-kind: no /dev/kvm in the node: KubeVirt uses software emulation (useEmulation)"
  cr=${cr/developerConfiguration:/developerConfiguration:
      useEmulation: true}
fi
"$KUBECTL" apply --server-side -f - <<<"$cr"
"$KUBECTL" -n kubevirt wait kv/kubevirt --for=condition=Available --timeout=900s
"$KUBECTL" -n kube-system rollout status daemonset/kube-multus-ds --timeout=300s

# virt-handler labels CPU-Manager nodes once it has seen the kubelet's static policy.
for _ in $(seq 1 60); do
  if "$KUBECTL" get node "$node" -o jsonpath='{.metadata.labels.kubevirt\.io/cpumanager}' | grep -qx true; then
    echo "e2e-kind: cluster ready (KUBECONFIG=$KUBECONFIG_OUT)"
    exit 0
  fi
  sleep 5
done
die "node $node never got kubevirt.io/cpumanager=true: is the kubelet's CPU Manager static?"
