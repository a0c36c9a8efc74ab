#!/usr/bin/env bash
# Stage 2 check of the local e2e cluster: Multus (the thin plugin, the node's primary
# CNI, e2e/local/up.sh) attaches a second network from a NetworkAttachmentDefinition,
# whose address whereabouts leases cluster-wide. Creates a NAD of a second bridge
# ($NAD_BRIDGE, whereabouts IPAM over $NAD_CIDR, the form of config/samples/rt-net.yaml)
# and a pod of the rtprobe image (FROM scratch, no shell) annotated
# k8s.v1.cni.cncf.io/networks: <ns>/<nad>; reads the pod's interfaces from the host with
# `nsenter -t <pid> -n ip addr`, Multus' network-status annotation and whereabouts'
# IPPool of the range, and fails unless the pod has eth0 on the default network, net1
# with an address in $NAD_CIDR, and the IPPool holds that address for the pod.
set -euo pipefail
# shellcheck source=e2e/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[[ -n ${PROBE_IMG:-} ]] || die "PROBE_IMG is not set: run make e2e-local-check, which passes the Makefile's"
ns=e2e-multus-check
nad=second-bridge

# A namespace of an earlier run may still be terminating: start from a fresh one.
kubectl_ delete namespace "$ns" --ignore-not-found --timeout=120s >/dev/null
kubectl_ create namespace "$ns" --dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
kubectl_ apply -f - >/dev/null <<JSON
{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
 "metadata": {"name": "$nad", "namespace": "$ns"},
 "spec": {"config": "{\"cniVersion\": \"0.4.0\", \"name\": \"$nad\", \"type\": \"bridge\", \"bridge\": \"$NAD_BRIDGE\", \"ipam\": {\"type\": \"whereabouts\", \"range\": \"$NAD_CIDR\"}}"}}
JSON
kubectl_ apply -f - >/dev/null <<JSON
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "two-networks", "namespace": "$ns",
  "annotations": {"k8s.v1.cni.cncf.io/networks": "$ns/$nad"}},
 "spec": {"automountServiceAccountToken": false, "terminationGracePeriodSeconds": 1,
  "nodeName": "$NODE_NAME",
  "containers": [{"name": "rtprobe", "image": "$PROBE_IMG", "imagePullPolicy": "Never",
   "args": ["gateway", "--listen=:8080"]}]}}
JSON
kubectl_ wait -n "$ns" --for=condition=Ready pod/two-networks --timeout=120s >/dev/null ||
  { kubectl_ describe pod -n "$ns" two-networks; tail -n 30 "$LOGS/multus.log" "$LOGS/whereabouts.log" 2>/dev/null; die "the pod with two networks did not start"; }

cid=$(kubectl_ get pod -n "$ns" two-networks -o jsonpath='{.status.containerStatuses[0].containerID}')
cid=${cid#containerd://}
pid=$(ctr_ tasks ls | awk -v c="$cid" '$1 == c { print $2 }')
[[ -n $pid ]] || die "no task for container $cid of pod two-networks"
addrs=$(in_cluster nsenter -t "$pid" -n ip -o -4 addr show)
status=$(kubectl_ get pod -n "$ns" two-networks -o jsonpath='{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}')
echo "pod $ns/two-networks (pid $pid), nsenter -n ip addr:"
in_cluster nsenter -t "$pid" -n ip addr show | sed 's/^/    /'
echo "k8s.v1.cni.cncf.io/network-status: $status"
# whereabouts' pool of the range (named after it, in its kubeconfig's namespace,
# kube-system): the lease, by offset from the range's first address, names the pod.
pool=${NAD_CIDR//\//-}
leases=$(kubectl_ get ippools.whereabouts.cni.cncf.io -n kube-system "$pool" \
  -o jsonpath='{range .spec.allocations.*}{.podref}{"\n"}{end}' 2>&1) || leases="(no IPPool $pool: $leases)"
echo "whereabouts IPPool kube-system/$pool leases to: $(tr '\n' ' ' <<<"$leases")"

fail=false
net1=$(awk '$2 == "net1" { print $4 }' <<<"$addrs")
eth0=$(awk '$2 == "eth0" { print $4 }' <<<"$addrs")
[[ -n $eth0 ]] || { log "FAIL: no IPv4 address on eth0 (the default network)"; fail=true; }
[[ $net1 == "${NAD_CIDR%.0/*}".* ]] || { log "FAIL: net1 has '${net1}', want an address in $NAD_CIDR"; fail=true; }
grep -q "\"$ns/$nad\"" <<<"$status" || { log "FAIL: network-status does not list $ns/$nad"; fail=true; }
grep -qx "$ns/two-networks" <<<"$leases" || { log "FAIL: whereabouts' IPPool $pool leases nothing to $ns/two-networks"; fail=true; }

kubectl_ delete namespace "$ns" --wait=false >/dev/null
$fail && die "Multus check failed"
echo "PASS: Multus gave the pod eth0 $eth0 (default network) and net1 $net1 ($ns/$nad on $NAD_BRIDGE, leased by whereabouts in IPPool $pool)"
