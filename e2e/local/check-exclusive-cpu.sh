#!/usr/bin/env bash
# Stage 1 check of the local e2e cluster: a Guaranteed pod with an integer CPU request
# gets CPUs of its own from the kubelet's static CPU Manager. Runs two pods of the
# rtprobe image (FROM scratch, imported into containerd, never pulled): one Guaranteed
# with 1 CPU, one BestEffort (the shared pool). Reads each container's cpuset from the
# host (the cgroup of its process, and the kernel's Cpus_allowed_list) and the
# kubelet's CPU Manager checkpoint, and fails unless the Guaranteed container's CPUs
# are disjoint from the shared pool and from reservedSystemCPUs.
set -euo pipefail
# shellcheck source=e2e/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[[ -n ${PROBE_IMG:-} ]] || die "PROBE_IMG is not set: run make e2e-local-check, which passes the Makefile's"
ns=e2e-cpu-check

# The node has one allocatable CPU (2 CPUs, 1 reserved). Once KubeVirt (stage 3) runs,
# its pods request part of it, so no pod can get a whole CPU: the check then says so
# and passes without running (make e2e-local starts from an empty cluster, where it runs).
requested=$(kubectl_ get pods -A --field-selector "spec.nodeName=$NODE_NAME,status.phase=Running" \
  -o jsonpath='{range .items[*].spec.containers[*]}{.resources.requests.cpu}{"\n"}{end}' |
  awk '/m$/ { sub(/m$/, ""); t += $0; next } NF { t += $0 * 1000 } END { print t + 0 }')
if ((requested > 0)) && kubectl_ get namespace kubevirt >/dev/null 2>&1; then
  echo "SKIP: running pods request ${requested}m of node $NODE_NAME's one allocatable CPU (KubeVirt is installed): no pod can get an exclusive CPU now; make e2e-local runs this check on an empty cluster"
  exit 0
fi

pod() { # pod NAME RESOURCES_JSON
  cat <<JSON
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "$1", "namespace": "$ns"},
 "spec": {"automountServiceAccountToken": false, "terminationGracePeriodSeconds": 1,
  "nodeName": "$NODE_NAME",
  "containers": [{"name": "rtprobe", "image": "$PROBE_IMG", "imagePullPolicy": "Never",
   "args": ["gateway", "--listen=:8080"], "resources": $2}]}}
JSON
}

# cpuset POD: the CPUs of the pod's container, from its process's cgroup on the host.
cpuset() {
  local cid pid cg
  cid=$(kubectl_ get pod -n "$ns" "$1" -o jsonpath='{.status.containerStatuses[0].containerID}')
  cid=${cid#containerd://}
  pid=$(ctr_ tasks ls | awk -v c="$cid" '$1 == c { print $2 }')
  [[ -n $pid ]] || die "no task for container $cid of pod $1"
  if [[ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]]; then # cgroup v1
    cg=$(awk -F: '$2 == "cpuset" { print $3 }' <(in_cluster cat "/proc/$pid/cgroup"))
    echo "$(cat "/sys/fs/cgroup/cpuset$cg/cpuset.cpus") cgroup=cpuset:$cg"
  else
    cg=$(awk -F: '$1 == "0" { print $3 }' <(in_cluster cat "/proc/$pid/cgroup"))
    echo "$(cat "/sys/fs/cgroup$cg/cpuset.cpus.effective") cgroup=$cg"
  fi
  in_cluster grep Cpus_allowed_list "/proc/$pid/status" | sed 's/^/    /'
}

# expand LIST: "0-2,5" -> "0 1 2 5"
expand() {
  local part parts
  IFS=, read -ra parts <<<"$1"
  for part in "${parts[@]}"; do
    if [[ $part == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
  done | paste -sd' ' -
}

# A namespace of an earlier run may still be terminating: start from a fresh one.
kubectl_ delete namespace "$ns" --ignore-not-found --timeout=120s >/dev/null
kubectl_ create namespace "$ns" --dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
pod guaranteed '{"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}' | kubectl_ apply -f - >/dev/null
pod besteffort '{}' | kubectl_ apply -f - >/dev/null
kubectl_ wait -n "$ns" --for=condition=Ready pod/guaranteed pod/besteffort --timeout=120s >/dev/null ||
  { kubectl_ describe pods -n "$ns"; die "the check pods did not start"; }

qos=$(kubectl_ get pod -n "$ns" guaranteed -o jsonpath='{.status.qosClass}')
g=$(cpuset guaranteed)
b=$(cpuset besteffort)
state=$(cat "$KUBELET_ROOT/cpu_manager_state")
echo "node $NODE_NAME: $(nproc --all) CPUs, reservedSystemCPUs 0"
echo "guaranteed ($qos, 1 CPU): $g"
echo "besteffort (shared pool): $b"
echo "kubelet cpu_manager_state: $state"

g_cpus=$(expand "${g%% *}")
b_cpus=$(expand "${b%% *}")
fail=false
[[ $qos == Guaranteed ]] || { log "FAIL: pod guaranteed has QoS $qos"; fail=true; }
[[ $(wc -w <<<"$g_cpus") -eq 1 ]] || { log "FAIL: the Guaranteed container has CPUs {$g_cpus}, want exactly 1"; fail=true; }
for c in $g_cpus; do
  if [[ " $b_cpus " == *" $c "* ]]; then log "FAIL: CPU $c is in the Guaranteed container and in the shared pool {$b_cpus}"; fail=true; fi
  if [[ $c == 0 ]]; then log "FAIL: CPU 0 is reserved (reservedSystemCPUs) but given to the Guaranteed container"; fail=true; fi
done
grep -q '"policyName":"static"' <<<"$state" || { log "FAIL: the CPU Manager policy is not static"; fail=true; }

kubectl_ delete namespace "$ns" --wait=false >/dev/null
$fail && die "exclusive CPU check failed"
echo "PASS: the Guaranteed pod runs alone on CPU(s) {$g_cpus}; the shared pool is {$b_cpus}"
