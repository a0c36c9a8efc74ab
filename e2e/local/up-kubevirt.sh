#!/usr/bin/env bash
# Stage 3 of the local cluster (docs/dev/e2e.md): KubeVirt, built from its Go module and
# Debian's libvirt and QEMU, on the cluster up.sh started. Imports the image archives
# of KUBEVIRT_ARCHIVES (space-separated; kubevirt-images.sh, guest-image.sh), applies
# the operator manifest KUBEVIRT_MANIFEST (build-kubevirt.sh) and the CR of
# e2e/local/kubevirt (software emulation), and waits until KubeVirt is Available
# and virt-handler has labelled the node for the static CPU Manager.
set -euo pipefail
# shellcheck source=e2e/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

: "${KUBEVIRT_MANIFEST:?}" "${KUBEVIRT_ARCHIVES:?}"
[[ -f $KUBEVIRT_MANIFEST ]] || die "$KUBEVIRT_MANIFEST is missing: make e2e-local-kubevirt"
alive kubelet || die "the local cluster is not running: make e2e-local-up"
t0=$SECONDS

for archive in $KUBEVIRT_ARCHIVES; do
  t=$SECONDS
  ctr_ images import "$archive" >/dev/null
  log "imported $(basename "$archive") into containerd (k8s.io) in $((SECONDS - t))s"
done

# virt-operator only runs on control-plane nodes (a required node affinity); the one
# node is that, too.
kubectl_ label node "$NODE_NAME" node-role.kubernetes.io/control-plane= --overwrite >/dev/null
# The operator: CRD, RBAC, Deployment (server-side: the CRD is over the 256 KiB limit
# of client-side apply's annotation).
kubectl_ apply --server-side --force-conflicts -f "$KUBEVIRT_MANIFEST" >/dev/null
kubectl_ -n kubevirt wait deployment/virt-operator --for=condition=Available --timeout=300s >/dev/null ||
  die "virt-operator is not Available; kubectl -n kubevirt describe pods -l kubevirt.io=virt-operator"
log "virt-operator Available after $((SECONDS - t0))s"
kubectl_ apply --server-side -k "$repo/e2e/local/kubevirt" >/dev/null
if ! kubectl_ -n kubevirt wait kv/kubevirt --for=condition=Available --timeout=600s >/dev/null; then
  kubectl_ -n kubevirt get pods -o wide >&2 || true
  die "KubeVirt is not Available after 600s; see kubectl -n kubevirt get kv kubevirt -o yaml"
fi
log "KubeVirt Available after $((SECONDS - t0))s"
for ((i = 0; i < 120; i++)); do
  if [[ $(kubectl_ get node "$NODE_NAME" -o jsonpath='{.metadata.labels.kubevirt\.io/cpumanager}') == true ]]; then
    log "stage 3 up in $((SECONDS - t0))s: node $NODE_NAME has kubevirt.io/cpumanager=true"
    kubectl_ -n kubevirt get pods -o wide
    exit 0
  fi
  sleep 1
done
die "node $NODE_NAME never got kubevirt.io/cpumanager=true from virt-handler"
