# isochron: every workflow is a target here; `make help` lists them.

##@ Versions (the one place each tool and dependency is pinned)

# Kubernetes: the API server, etcd and kubectl that tests and the demo run, built from Go
# modules. K8S_LIB_VERSION must match the k8s.io/* versions in go.mod.
KUBE_VERSION ?= v1.34.3
K8S_LIB_VERSION ?= v0.34.3
ETCD_VERSION ?= v3.6.5
KUBEVIRT_VERSION ?= v1.8.4
CONTROLLER_TOOLS_VERSION ?= v0.19.0
KUSTOMIZE_VERSION ?= v5.7.1
# Monitoring: promtool's Go module (hack/tools/promtool/go.mod; v0.309.1 is Prometheus 3.9.1) and
# the prometheus-operator API module in go.mod (its CRDs: make prometheus-operator-crds).
PROMETHEUS_VERSION ?= v0.309.1
PROMETHEUS_OPERATOR_VERSION ?= v0.89.0
# Linters (make lint): golangci-lint and kube-api-linter, which publishes no releases
# (a pseudo-version), both pinned by the module hack/tools/golangci-lint.
GOLANGCI_LINT_VERSION ?= v2.15.0
KUBE_API_LINTER_VERSION ?= v0.0.0-20260716143926-092fe0c72997
# e2e on kind (hack/make/e2e.mk, docs/e2e.md): kind, its node image, Multus (thick plugin).
KIND_VERSION ?= v0.30.0
KIND_NODE_IMAGE ?= kindest/node:v1.34.0
MULTUS_VERSION ?= v4.2.3
# whereabouts (IPAM) on both e2e clusters, pinned by e2e/local/modules/whereabouts/go.mod.
WHEREABOUTS_VERSION ?= v0.9.2
# The CNI bridge plugin kind's nodes lack (the RT network's), built from its Go module.
CNI_PLUGINS_VERSION ?= v1.7.1

# Images (make docker-build, docker-save): the tags of the manager and rtprobe images.
VERSION ?= v0.1.0
IMG ?= isochron/manager:$(VERSION)
PROBE_IMG ?= isochron/rtprobe:$(VERSION)
NIC_AGENT_IMG ?= isochron/nic-agent:$(VERSION)

LOCALBIN := $(shell pwd)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
KUSTOMIZE ?= $(LOCALBIN)/kustomize-$(KUSTOMIZE_VERSION)
ENVTEST_ASSETS ?= $(LOCALBIN)/k8s/$(KUBE_VERSION)

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
GO ?= go

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development (api/, controllers/, internal/, cmd/, test/)

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and RBAC manifests from the API markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="{./api/...,./controllers/...}" output:crd:artifacts:config=config/crd/bases

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate the API's DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## Run go fmt.
	$(GO) fmt ./...

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: verify-generated
verify-generated: manifests generate ## Regenerate; under CI (CI=true) fail if that changed what is committed.
	@changed="$$(git status --porcelain -- api config/crd config/rbac)"; \
	if [ -n "$$changed" ]; then \
		echo "$$changed"; \
		if [ -n "$(CI)" ]; then echo "generated files are stale: run 'make manifests generate' and commit them"; exit 1; fi; \
		echo "note: generated files above differ from the last commit; commit them with your change"; \
	fi

.PHONY: test-unit
test-unit: ## Run the unit tests of the pure core, the CLIs and the probes (no API server).
	$(GO) test ./internal/... ./api/... ./cmd/... ./probes/... ./build/... ./test/health/... ./test/monitoring/...

.PHONY: test-integration
test-integration: envtest-bins $(KUSTOMIZE) ## Run the operator against a real kube-apiserver and etcd (envtest) with the real CRDs; install config/default and run the manager binary (test/deploy).
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) KUSTOMIZE=$(KUSTOMIZE) $(GO) test ./controllers/... ./test/integration/... ./test/deploy/... -count=1 -timeout 20m

.PHONY: test-admission
test-admission: ## Judge every rendered VMI with KubeVirt's own admission code (module test/kubevirt).
	cd test/kubevirt && $(GO) test ./... -count=1

.PHONY: test
test: vet verify-generated lint test-unit test-rules test-integration test-admission test-e2e-config ## Run every test: linters, unit, Prometheus rules, integration on a real API server, KubeVirt admission, e2e configs.

##@ Demo (hack/demo)

.PHONY: demo
# Static and -trimpath, as the Kubernetes binaries are built: the packages they share with the
# manager (k8s.io/api, apimachinery, client-go...) then come from Go's build cache.
demo: $(ENVTEST_ASSETS)/kube-apiserver $(ENVTEST_ASSETS)/etcd ## Start a local control plane, run the operator on the samples, print what it decided.
	CGO_ENABLED=0 $(GO) build -trimpath -o $(LOCALBIN)/manager ./cmd/manager
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) CGO_ENABLED=0 $(GO) run -trimpath ./hack/demo --bin $(LOCALBIN)

##@ Benchmarks (figures in docs/placement.md and docs/contention-model.md)

# make bench-placement CRAWLERS=5000 NODES=500; QPS is both clients' (manager, kube-scheduler).
CRAWLERS ?= 2000
NODES ?= 200
QPS ?= 1000
STEADY ?= 0s

.PHONY: bench-placement
bench-placement: envtest-bins $(ENVTEST_ASSETS)/kube-scheduler ## Placement throughput on a real kube-apiserver: the manager binary against kube-scheduler, CRAWLERS crawlers (and as many Guaranteed pods) on NODES fake RT nodes, in one run; then what each side's write per decision costs the API server.
	CGO_ENABLED=0 $(GO) build -trimpath -o $(LOCALBIN)/manager ./cmd/manager
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) run ./hack/bench-placement -manager $(LOCALBIN)/manager \
		-crawlers $(CRAWLERS) -nodes $(NODES) -qps $(QPS) -burst $$(( $(QPS) * 2 )) -steady $(STEADY) -writes

# make bench-scale: the manager's memory and placement time on a cluster with other pods.
SCALE_CRAWLERS ?= 10000
SCALE_NODES ?= 1000
OTHER_NODES ?= 500
OTHER_PODS ?= 100000
SCALE_STEADY ?= 30s
GOMEMLIMIT_MANAGER ?= 440MiB

.PHONY: bench-scale
bench-scale: envtest-bins ## The manager binary on a real kube-apiserver: SCALE_CRAWLERS crawlers on SCALE_NODES RT nodes, without and then with OTHER_PODS other pods (and OTHER_NODES ordinary nodes): time to place all, CPU, peak and idle RSS (docs/placement.md).
	CGO_ENABLED=0 $(GO) build -trimpath -o $(LOCALBIN)/manager ./cmd/manager
	for pods in 0 $(OTHER_PODS); do \
		KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) run ./hack/bench-placement -manager $(LOCALBIN)/manager -skip-scheduler \
			-crawlers $(SCALE_CRAWLERS) -nodes $(SCALE_NODES) -other-nodes $(OTHER_NODES) -other-pods $$pods \
			-qps $(QPS) -burst $$(( $(QPS) * 2 )) -steady $(SCALE_STEADY) -gomemlimit $(GOMEMLIMIT_MANAGER) -timeout 60m || exit 1; \
	done

##@ Build

.PHONY: build
build: ## Build the manager, isochronctl, nic-agent and rtprobe static (CGO_ENABLED=0, -trimpath) into bin/, as the images ship them, and the probe agent's disk.
	CGO_ENABLED=0 $(GO) build -trimpath -o $(LOCALBIN)/manager ./cmd/manager
	CGO_ENABLED=0 $(GO) build -trimpath -o $(LOCALBIN)/isochronctl ./cmd/isochronctl
	CGO_ENABLED=0 $(GO) build -trimpath -o $(LOCALBIN)/nic-agent ./cmd/nic-agent
	CGO_ENABLED=0 $(GO) build -trimpath -o $(LOCALBIN)/rtprobe ./cmd/rtprobe
	# The agent's disk (rtprobe's /disk/agent.img, a VMI's containerDisk): the static
	# rtprobe itself, padded to whole 512-byte sectors, read-only for qemu (107), as
	# KubeVirt asks of a containerDisk. The guest copies it out and runs it.
	rm -f $(LOCALBIN)/agent.img
	cp $(LOCALBIN)/rtprobe $(LOCALBIN)/agent.img
	truncate -s %512 $(LOCALBIN)/agent.img
	chmod 0440 $(LOCALBIN)/agent.img

##@ Deployment (config/)

.PHONY: install
install: $(KUSTOMIZE) ## Install the CRDs (CrawlerVM, ContentionProfile) into the cluster of the current kubeconfig.
	$(KUSTOMIZE) build config/crd | kubectl apply --server-side -f -

.PHONY: deploy
deploy: $(KUSTOMIZE) ## Install CRDs, RBAC and manager (config/default) into the current cluster.
	$(KUSTOMIZE) build config/default | kubectl apply --server-side -f -

.PHONY: undeploy
undeploy: $(KUSTOMIZE) ## Remove what deploy installed.
	$(KUSTOMIZE) build config/default | kubectl delete --ignore-not-found -f -

# Tools, installed into bin/ at the pinned versions.

$(CONTROLLER_GEN):
	GOBIN=$(LOCALBIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(LOCALBIN)/controller-gen $@

$(KUSTOMIZE):
	GOBIN=$(LOCALBIN) $(GO) install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
	mv $(LOCALBIN)/kustomize $@

# Workflows kept in their own files; their targets are listed by `make help` too.
include hack/make/lint.mk
include hack/make/kube.mk
include hack/make/kubevirt.mk
include hack/make/multus.mk
include hack/make/probes.mk
include hack/make/docker.mk
include hack/make/e2e.mk
include hack/make/prometheus.mk
include hack/make/netlab.mk
