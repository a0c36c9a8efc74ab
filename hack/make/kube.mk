##@ Kubernetes binaries, built from Go modules (hack/tools/kube, etcd, kube-proxy)

# Kubernetes binaries built from Go modules by hack/tools/build-kube-bins.sh.
# Expects LOCALBIN, KUBE_VERSION and ETCD_VERSION from the main Makefile.
#
# The version is in the directory name, so a bump builds afresh, and the
# file targets below never go stale (the script rejects a go.mod that
# disagrees with KUBE_VERSION/ETCD_VERSION).
ENVTEST_ASSETS ?= $(LOCALBIN)/k8s/$(KUBE_VERSION)
BUILD_KUBE_BINS = KUBE_VERSION=$(KUBE_VERSION) ETCD_VERSION=$(ETCD_VERSION) hack/tools/build-kube-bins.sh $(ENVTEST_ASSETS)

.PHONY: envtest-bins
envtest-bins: $(ENVTEST_ASSETS)/kube-apiserver $(ENVTEST_ASSETS)/etcd $(ENVTEST_ASSETS)/kubectl $(ENVTEST_ASSETS)/kube-controller-manager ## Build kube-apiserver, etcd, kubectl and kube-controller-manager (its garbage collector) from Go modules into bin/

# One target per binary, so the demo builds only what it runs; the packages they share
# are compiled once and then come from Go's build cache.
$(ENVTEST_ASSETS)/kube-apiserver $(ENVTEST_ASSETS)/kubectl $(ENVTEST_ASSETS)/kube-controller-manager:
	$(BUILD_KUBE_BINS) $(@F)

$(ENVTEST_ASSETS)/etcd:
	$(BUILD_KUBE_BINS) etcd

# Not needed by envtest; for the e2e cluster.
$(ENVTEST_ASSETS)/kube-scheduler $(ENVTEST_ASSETS)/kubelet $(ENVTEST_ASSETS)/kube-proxy:
	$(BUILD_KUBE_BINS) $(@F)
