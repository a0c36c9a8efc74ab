# isochron: every workflow is a target here; `make help` lists them.

##@ Versions (the one place each tool and dependency is pinned)

# Kubernetes: the API server, etcd and kubectl that tests and the demo run, built from Go
# modules. K8S_LIB_VERSION must match the k8s.io/* versions in go.mod.
KUBE_VERSION ?= v1.37.2
K8S_LIB_VERSION ?= v0.37.2
ETCD_VERSION ?= v3.7.3
KUBEVIRT_VERSION ?= v1.8.4
CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.7.1
# Monitoring: promtool's Go module (hack/tools/promtool/go.mod; v0.309.1 is Prometheus 3.9.1) and
# the prometheus-operator API module in go.mod (its CRDs: make prometheus-operator-crds).
PROMETHEUS_VERSION ?= v0.309.1
PROMETHEUS_OPERATOR_VERSION ?= v0.95.2
# Helm: the library hack/release renders and lints the chart with (its go.mod) and the CLI
# the local cluster installs it with (hack/tools/helm/go.mod), both this version.
HELM_VERSION ?= v3.22.0
# Linters (make lint): golangci-lint and kube-api-linter, which publishes no releases
# (a pseudo-version), both pinned by the module hack/tools/golangci-lint.
GOLANGCI_LINT_VERSION ?= v2.15.0
KUBE_API_LINTER_VERSION ?= v0.0.0-20260716143926-092fe0c72997
# actionlint (make lint-workflows), pinned by the module hack/tools/actionlint.
ACTIONLINT_VERSION ?= v1.7.12
# e2e on kind (hack/make/e2e.mk, docs/dev/e2e.md): kind, its node image, Multus (thick plugin).
KIND_VERSION ?= v0.30.0
KIND_NODE_IMAGE ?= kindest/node:v1.34.0
MULTUS_VERSION ?= v4.2.3
# whereabouts (IPAM) on both e2e clusters, pinned by e2e/local/modules/whereabouts/go.mod.
WHEREABOUTS_VERSION ?= v0.9.2
# The CNI bridge plugin kind's nodes lack (the RT network's), built from its Go module.
CNI_PLUGINS_VERSION ?= v1.7.1

# The release, written only here: the version of the latest release, whose commit carries
# it as a git tag. config/ names its images (internal/slo's TestDefaultImageMatchesTheRelease
# holds those copies to it).
RELEASE_VERSION ?= v0.1.0
# VERSION tags the images (make docker-build) and every binary reports it (--version,
# internal/version): RELEASE_VERSION on a clean checkout of its tag; after it git's
# description (v0.1.0-3-g<commit>); without the tag in the history RELEASE_VERSION-g<commit>;
# -dirty with uncommitted changes. So images rebuilt from another commit get another tag.
# Computed once per make run (sub-makes inherit it); outside git, RELEASE_VERSION.
GIT_DESCRIBE := $(shell git describe --tags --always --dirty --abbrev=12 --match '$(RELEASE_VERSION)' 2>/dev/null)
VERSION ?= $(if $(filter $(RELEASE_VERSION)%,$(GIT_DESCRIBE)),$(GIT_DESCRIBE),$(RELEASE_VERSION)$(if $(GIT_DESCRIBE),-g$(GIT_DESCRIBE)))
export VERSION
GIT_COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE := $(or $(BUILD_DATE),$(shell date -u +%Y-%m-%dT%H:%M:%SZ))
# What every go build of a binary of ours gets (make build, demo, bench-*; the images ship
# make build's): the build it reports (internal/version).
GO_LDFLAGS := -X isochron.io/isochron/internal/version.Version=$(VERSION) \
	-X isochron.io/isochron/internal/version.Commit=$(GIT_COMMIT) \
	-X isochron.io/isochron/internal/version.Date=$(BUILD_DATE)
GO_BUILD = CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(GO_LDFLAGS)'

# Images (make docker-build, docker-save): the tags of the manager, NIC agent and rtprobe images.
IMG ?= isochron/manager:$(VERSION)
PROBE_IMG ?= isochron/rtprobe:$(VERSION)
NIC_AGENT_IMG ?= isochron/nic-agent:$(VERSION)
# Where a release's images are pushed (make docker-push) and what dist/install.yaml names
# (make build-installer): REGISTRY/manager:VERSION, REGISTRY/nic-agent, REGISTRY/rtprobe.
REGISTRY ?= ghcr.io/isochron

# The alerts' runbook_url (config/prometheus/rules.yaml) is this base followed by
# docs/operations.md#<alert>. The rules hold RUNBOOK_BASE_URL_SOURCE, so that `kubectl apply
# -k` installs working links; `make deploy RUNBOOK_BASE_URL=...` points them at your copy
# of the docs (a fork, or a release: .../blob/v0.1.0/), and `make docs-check` checks that
# every runbook_url starts with RUNBOOK_BASE_URL_SOURCE and names a heading that exists.
RUNBOOK_BASE_URL_SOURCE := https://github.com/isochron/isochron/blob/main/
RUNBOOK_BASE_URL ?= $(RUNBOOK_BASE_URL_SOURCE)

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

.PHONY: api-docs
api-docs: ## Regenerate docs/api.md, the API reference, from the CRDs (hack/apidocs); make docs-check fails when it is stale.
	$(GO) run ./hack/apidocs -crds config/crd/bases -out docs/api.md

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
test-unit: ## Run the unit tests of the pure core, the CLIs and the probes, and hold the admission policies to the Go code that enforces the same rules (no API server).
	$(GO) test ./internal/... ./api/... ./cmd/... ./probes/... ./build/... ./test/health/... ./test/monitoring/... ./test/policies/...

.PHONY: test-integration
test-integration: envtest-bins $(KUSTOMIZE) ## Run the operator against a real kube-apiserver and etcd (envtest) with the real CRDs; install config/default and run the manager binary (test/deploy); the kubectl plugin's commands.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) KUSTOMIZE=$(KUSTOMIZE) $(GO) test ./controllers/... ./test/integration/... ./test/deploy/... ./cmd/kubectl-isochron/... -count=1 -timeout 20m

.PHONY: test-admission
test-admission: ## Judge every rendered VMI with KubeVirt's own admission code (module test/kubevirt).
	cd test/kubevirt && $(GO) test ./... -count=1

.PHONY: docs-check
docs-check: ## Check the links of README, CHANGELOG, DEVELOPERS and docs/ and the alerts' runbook_url (hack/linkcheck; no network), and that docs/api.md is current (hack/apidocs).
	$(GO) test ./hack/linkcheck ./hack/apidocs
	$(GO) run ./hack/linkcheck -runbook-base $(RUNBOOK_BASE_URL_SOURCE)

.PHONY: test
test: docs-check vet verify-generated lint lint-workflows test-unit test-rules test-integration test-admission test-e2e-config test-chart ## Run every test: links in the docs, linters (Go and the GitHub workflows), unit, Prometheus rules, integration on a real API server, KubeVirt admission, e2e configs, the Helm chart against install.yaml.

##@ Demo (hack/demo)

.PHONY: demo
# Static and -trimpath, as the Kubernetes binaries are built: the packages they share with the
# manager (k8s.io/api, apimachinery, client-go...) then come from Go's build cache.
demo: $(ENVTEST_ASSETS)/kube-apiserver $(ENVTEST_ASSETS)/etcd ## Start a local control plane, run the operator on the samples, print what it decided.
	$(GO_BUILD) -o $(LOCALBIN)/manager ./cmd/manager
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) CGO_ENABLED=0 $(GO) run -trimpath ./hack/demo --bin $(LOCALBIN)

##@ Benchmarks (figures in docs/benchmarks.md)

# make bench-placement CRAWLERS=5000 NODES=500; QPS is both clients' (manager, kube-scheduler).
CRAWLERS ?= 2000
NODES ?= 200
QPS ?= 1000
STEADY ?= 0s

.PHONY: bench-placement
bench-placement: envtest-bins $(ENVTEST_ASSETS)/kube-scheduler ## Placement throughput on a real kube-apiserver: the manager binary against kube-scheduler, CRAWLERS crawlers (and as many Guaranteed pods) on NODES fake RT nodes, in one run; then what each side's write per decision costs the API server.
	$(GO_BUILD) -o $(LOCALBIN)/manager ./cmd/manager
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
bench-scale: envtest-bins ## The manager binary on a real kube-apiserver: SCALE_CRAWLERS crawlers on SCALE_NODES RT nodes, without and then with OTHER_PODS other pods (and OTHER_NODES ordinary nodes): time to place all, CPU, peak and idle RSS (docs/benchmarks.md, "Scale").
	$(GO_BUILD) -o $(LOCALBIN)/manager ./cmd/manager
	for pods in 0 $(OTHER_PODS); do \
		KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) run ./hack/bench-placement -manager $(LOCALBIN)/manager -skip-scheduler \
			-crawlers $(SCALE_CRAWLERS) -nodes $(SCALE_NODES) -other-nodes $(OTHER_NODES) -other-pods $$pods \
			-qps $(QPS) -burst $$(( $(QPS) * 2 )) -steady $(SCALE_STEADY) -gomemlimit $(GOMEMLIMIT_MANAGER) -timeout 60m || exit 1; \
	done

##@ Build

.PHONY: build
build: ## Build the manager, isochronctl, nic-agent and rtprobe static (CGO_ENABLED=0, -trimpath) into bin/, as the images ship them, and the probe agent's disk.
	$(GO_BUILD) -o $(LOCALBIN)/manager ./cmd/manager
	$(GO_BUILD) -o $(LOCALBIN)/isochronctl ./cmd/isochronctl
	$(GO_BUILD) -o $(LOCALBIN)/nic-agent ./cmd/nic-agent
	$(GO_BUILD) -o $(LOCALBIN)/rtprobe ./cmd/rtprobe
	$(call agent-disk,$(LOCALBIN))

# $(call agent-disk,DIR): the probe agent's disk DIR/agent.img (rtprobe's
# /disk/agent.img, a VMI's containerDisk) from DIR/rtprobe, as make build and make
# release-binaries write it: the static rtprobe itself, padded to whole 512-byte sectors,
# read-only for qemu (107), as KubeVirt asks of a containerDisk. The guest copies it out
# and runs it. One shell command, for use inside a recipe's loop too.
agent-disk = rm -f $(1)/agent.img && cp $(1)/rtprobe $(1)/agent.img && truncate -s %512 $(1)/agent.img && chmod 0440 $(1)/agent.img

# The kubectl plugin's builds (make kubectl-plugin): OS/arch pairs, each a tar.gz in dist/.
# Built as every binary of ours, so that kubectl isochron version reports the build
# (internal/version) as the manager does.
PLUGIN_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
PLUGIN_BUILD = $(GO_BUILD)

.PHONY: kubectl-plugin
kubectl-plugin: ## Build kubectl-isochron (VERSION) for linux and darwin, amd64 and arm64, as dist/kubectl-isochron-<os>-<arch>.tar.gz, and dist/isochron.yaml, krew's manifest (plugins/isochron.yaml) with their sha256.
	rm -rf dist/kubectl-isochron-* dist/isochron.yaml
	mkdir -p dist
	manifest="$$(sed 's/VERSION/$(VERSION)/g' plugins/isochron.yaml)"; \
	for p in $(PLUGIN_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; dir=dist/kubectl-isochron-$$os-$$arch; \
		mkdir -p $$dir; \
		GOOS=$$os GOARCH=$$arch $(PLUGIN_BUILD) -o $$dir/kubectl-isochron ./cmd/kubectl-isochron; \
		tar -C $$dir -czf $$dir.tar.gz kubectl-isochron; \
		rm -rf $$dir; \
		sum=$$(sha256sum $$dir.tar.gz | cut -d' ' -f1); \
		key=$$(echo "SHA256_$${os}_$${arch}" | tr a-z A-Z); \
		manifest="$$(echo "$$manifest" | sed "s/$$key/$$sum/")"; \
	done; \
	echo "$$manifest" > dist/isochron.yaml
	@if grep -q SHA256_ dist/isochron.yaml; then echo "dist/isochron.yaml: a platform was not built:"; grep SHA256_ dist/isochron.yaml; exit 1; fi

##@ Deployment (config/)

.PHONY: install
install: $(KUSTOMIZE) ## Install the CRDs (CrawlerVM, ContentionProfile, NodeCalibration) and the policy that keeps them from an accidental delete into the cluster of the current kubeconfig.
	$(KUSTOMIZE) build config/default | kubectl apply --server-side -l app.kubernetes.io/component=api -f -

.PHONY: deploy
deploy: $(KUSTOMIZE) ## Install CRDs, RBAC, manager and NIC agent (config/default) of the images IMG, NIC_AGENT_IMG, PROBE_IMG (VERSION) into the current cluster; alerts' runbooks under RUNBOOK_BASE_URL.
	$(KUSTOMIZE) build config/default | $(RUNBOOK_BASE) | $(SET_VERSION) | kubectl apply --server-side -f -

.PHONY: deploy-monitoring
deploy-monitoring: $(KUSTOMIZE) ## Add monitoring (config/monitoring: ServiceMonitor, PodMonitor, rules, dashboard) where prometheus-operator runs; alerts' runbooks under RUNBOOK_BASE_URL.
	$(KUSTOMIZE) build config/monitoring | $(RUNBOOK_BASE) | kubectl apply --server-side -f -

.PHONY: deploy-certmanager
deploy-certmanager: $(KUSTOMIZE) ## Issue the metrics endpoint's serving certificate with cert-manager (config/certmanager), which the ServiceMonitor verifies.
	$(KUSTOMIZE) build config/certmanager | kubectl apply --server-side -f -

.PHONY: undeploy
undeploy: $(KUSTOMIZE) ## Remove isochron (and its monitoring), leaving the CRDs, every CrawlerVM and its running VM, and the settings in isochron-system; deploy again adopts them.
	$(KUSTOMIZE) build config/monitoring | kubectl delete --ignore-not-found -f - 2>/dev/null || true
	$(KUSTOMIZE) build config/default | kubectl delete --ignore-not-found -l 'app.kubernetes.io/component notin (api,settings)' -f -

.PHONY: uninstall
uninstall: $(KUSTOMIZE) ## Remove isochron's CRDs and settings (namespace isochron-system) after undeploy: refused while any CrawlerVM exists (deleting a CRD deletes each crawler and its VM).
	@n=$$(kubectl get crawlervms.isochron.io -A --no-headers --ignore-not-found 2>/dev/null | wc -l); \
	if [ "$$n" -gt 0 ]; then echo "uninstall: $$n CrawlerVMs exist; delete them first (each one's VM goes with it), then run make uninstall again" >&2; exit 1; fi
	kubectl annotate crd -l app.kubernetes.io/name=isochron,app.kubernetes.io/component=api isochron.io/uninstall=delete-every-crawler --overwrite
	$(KUSTOMIZE) build config/default | kubectl delete --ignore-not-found -l 'app.kubernetes.io/component in (api,settings)' -f -

# Rewrites the runbook_url base of a kustomize build's output to RUNBOOK_BASE_URL.
RUNBOOK_BASE = sed 's|^\( *runbook_url: \)$(RUNBOOK_BASE_URL_SOURCE)|\1$(RUNBOOK_BASE_URL)|'
# Points a kustomize build's output at the images of VERSION (IMG, NIC_AGENT_IMG and the
# manager's --probe-image PROBE_IMG) and labels the manager and the NIC agent
# app.kubernetes.io/version=VERSION: config/ names the release's (RELEASE_VERSION).
SET_VERSION = sed -e 's|isochron/manager:$(RELEASE_VERSION)$$|$(IMG)|' -e 's|isochron/nic-agent:$(RELEASE_VERSION)$$|$(NIC_AGENT_IMG)|' \
	-e 's|isochron/rtprobe:$(RELEASE_VERSION)$$|$(PROBE_IMG)|' -e 's|^\( *app.kubernetes.io/version: \)$(RELEASE_VERSION)$$|\1$(VERSION)|'

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
include hack/make/release.mk
