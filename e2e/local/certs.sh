#!/usr/bin/env bash
# Generates the PKI and kubeconfigs of the local e2e cluster with openssl:
#
#   e2e/local/certs.sh STATE_DIR NODE_NAME NODE_IP API_PORT
#   e2e/local/certs.sh STATE_DIR NODE_NAME NODE_IP API_PORT --node
#
# One CA signs every certificate (serving and client); a separate key pair signs
# service account tokens. Existing files are kept, so a restart reuses them. With
# --node, only a node VM's (nodes-up.sh): its kubelet's client and serving certificates,
# kubelet-NODE_NAME and kubelet-serving-NODE_NAME.
set -euo pipefail

die() { echo "certs: $*" >&2; exit 1; }
[[ $# -eq 4 || ( $# -eq 5 && $5 == --node ) ]] || die "usage: $0 STATE_DIR NODE_NAME NODE_IP API_PORT [--node]"
state=$1 node=$2 ip=$3 port=$4
pki=$state/pki
mkdir -p "$pki"

[[ ${5:-} != --node || -f $pki/ca.key ]] || die "no CA in $pki: bring the cluster up first"
if [[ ! -f $pki/ca.crt ]]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=isochron-e2e-ca" \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
fi
if [[ ! -f $pki/sa.key ]]; then
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
fi

# cert NAME SUBJECT [SANS]: a key and a certificate signed by the CA.
cert() {
  local name=$1 subj=$2 sans=${3:-}
  [[ -f $pki/$name.crt ]] && return 0
  local ext=$pki/$name.ext
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n $sans ]]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$sans"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$ext"
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$pki/$name.key" \
    -out "$pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 3650 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$ext"
}

if [[ ${5:-} == --node ]]; then
  cert "kubelet-$node" "/O=system:nodes/CN=system:node:$node"
  cert "kubelet-serving-$node" "/O=system:nodes/CN=system:node:$node" "DNS:$node,DNS:localhost,IP:127.0.0.1,IP:$ip"
  exit 0
fi

cert apiserver "/CN=kube-apiserver" \
  "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1,IP:$ip"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert admin "/O=system:masters/CN=isochron-e2e-admin"
cert controller-manager "/CN=system:kube-controller-manager"
cert scheduler "/CN=system:kube-scheduler"
cert kubelet "/O=system:nodes/CN=system:node:$node"
# kube-proxy: the user the bootstrap ClusterRoleBinding system:node-proxier names.
cert kube-proxy "/CN=system:kube-proxy"
# The aggregation layer's client (virt-api is an aggregated API server: it reads
# requestheader-client-ca-file from the extension-apiserver-authentication ConfigMap).
cert front-proxy-client "/CN=front-proxy-client"
# Multus' thin plugin: its own user, bound to Multus' ClusterRole (multus-rbac.yaml).
cert multus "/CN=multus"
# whereabouts (IPAM): its own user too, bound to whereabouts' ClusterRole (whereabouts-rbac.yaml).
cert whereabouts "/CN=whereabouts"
cert kubelet-serving "/O=system:nodes/CN=system:node:$node" "DNS:$node,DNS:localhost,IP:127.0.0.1,IP:$ip"

# kubeconfig NAME USER: a kubeconfig for the certificate NAME.
kubeconfig() {
  local name=$1 user=$2
  cat >"$state/$name.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: e2e-local
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority: $pki/ca.crt
users:
- name: $user
  user:
    client-certificate: $pki/$name.crt
    client-key: $pki/$name.key
contexts:
- name: e2e-local
  context: {cluster: e2e-local, user: $user}
current-context: e2e-local
KC
}
kubeconfig admin isochron-e2e-admin
kubeconfig controller-manager system:kube-controller-manager
kubeconfig scheduler system:kube-scheduler
kubeconfig kubelet "system:node:$node"
kubeconfig kube-proxy system:kube-proxy
kubeconfig multus multus
# whereabouts keeps its IPPools and leases in its kubeconfig's namespace, kube-system
# when the context names none (as here).
kubeconfig whereabouts whereabouts
