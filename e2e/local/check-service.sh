#!/usr/bin/env bash
# kube-proxy check of the local e2e cluster: ClusterIP Services work (kube-proxy in
# iptables mode, e2e/local/up.sh). Creates an rtprobe pod serving HTTP
# (`rtprobe gateway --listen=:8080`, whose /metrics the probe gateway Service exposes)
# with a ClusterIP Service in front of it, and a second rtprobe pod as client; fetches
# http://<clusterIP>:8080/metrics from the host and from the client pod's network
# namespace (`nsenter -n curl`: the image has no shell), and the API server's /version
# through the `kubernetes` Service (10.96.0.1:443) from that pod, checking the serving
# certificate against the cluster CA.
set -euo pipefail
# shellcheck source=e2e/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[[ -n ${PROBE_IMG:-} ]] || die "PROBE_IMG is not set: run make e2e-local-check, which passes the Makefile's"
ns=e2e-service-check
api_ip=${SERVICE_CIDR%.0/*}.1

# A namespace of an earlier run may still be terminating: start from a fresh one.
kubectl_ delete namespace "$ns" --ignore-not-found --timeout=120s >/dev/null
kubectl_ create namespace "$ns" --dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
for name in web client; do
  kubectl_ apply -f - >/dev/null <<JSON
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "$name", "namespace": "$ns", "labels": {"app": "$name"}},
 "spec": {"automountServiceAccountToken": false, "terminationGracePeriodSeconds": 1,
  "nodeName": "$NODE_NAME",
  "containers": [{"name": "rtprobe", "image": "$PROBE_IMG", "imagePullPolicy": "Never",
   "args": ["gateway", "--listen=:8080"], "ports": [{"name": "http", "containerPort": 8080}]}]}}
JSON
done
kubectl_ apply -f - >/dev/null <<JSON
{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "web", "namespace": "$ns"},
 "spec": {"type": "ClusterIP", "selector": {"app": "web"},
  "ports": [{"name": "http", "port": 8080, "targetPort": "http"}]}}
JSON
kubectl_ wait -n "$ns" --for=condition=Ready pod/web pod/client --timeout=120s >/dev/null ||
  { kubectl_ describe pod -n "$ns"; die "the pods did not start"; }

cip=$(kubectl_ get service -n "$ns" web -o jsonpath='{.spec.clusterIP}')
web_ip=$(kubectl_ get pod -n "$ns" web -o jsonpath='{.status.podIP}')
cid=$(kubectl_ get pod -n "$ns" client -o jsonpath='{.status.containerStatuses[0].containerID}')
cid=${cid#containerd://}
pid=$(ctr_ tasks ls | awk -v c="$cid" '$1 == c { print $2 }')
[[ -n $pid ]] || die "no task for container $cid of pod client"
echo "service $ns/web: clusterIP $cip:8080 -> pod web $web_ip:8080; client pod pid $pid"

# get WHERE URL [CURL ARGS...]: fetch URL, retrying while kube-proxy syncs the new Service.
get() {
  local where=$1 url=$2 out
  shift 2
  for ((i = 0; i < 30; i++)); do
    if [[ $where == host ]]; then
      out=$(curl -fsS --max-time 5 "$@" "$url" 2>&1) && { echo "$out"; return 0; }
    else
      out=$(in_cluster nsenter -t "$pid" -n curl -fsS --max-time 5 "$@" "$url" 2>&1) && { echo "$out"; return 0; }
    fi
    sleep 1
  done
  log "FAIL: $where: $url: $out"
  return 1
}

fail=false
echo "host: curl http://$cip:8080/metrics"
if out=$(get host "http://$cip:8080/metrics"); then head -n 5 <<<"$out" | sed 's/^/    /'; else fail=true; fi
echo "pod client: curl http://$cip:8080/metrics"
if out=$(get pod "http://$cip:8080/metrics"); then head -n 5 <<<"$out" | sed 's/^/    /'; else fail=true; fi
echo "pod client: curl --cacert ca.crt https://$api_ip:443/version"
if out=$(get pod "https://$api_ip:443/version" --cacert "$STATE/pki/ca.crt"); then
  grep -q "\"gitVersion\": \"$KUBE_VERSION\"" <<<"$out" || { log "FAIL: /version says $out"; fail=true; }
  grep gitVersion <<<"$out" | sed 's/^ */    /'
else fail=true; fi
echo "kube-proxy's rules for $ns/web:"
iptables -t nat -S | grep -F "$ns/web" | sed 's/^/    /'

kubectl_ delete namespace "$ns" --wait=false >/dev/null
$fail && die "Service check failed"
echo "PASS: ClusterIP $cip:8080 served /metrics of pod web ($web_ip) to the host and to pod client; pod client reached the API server at $api_ip:443"
