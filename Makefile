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

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and RBAC manifests from the API markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./..." output:crd:artifacts:config=config/crd/bases

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
verify-generated: manifests generate ## Fail if generated files differ from what is committed.
	X

.PHONY: test-unit
test-unit: ## Run the unit tests of the pure core (no API server).
	$(GO) test ./internal/... ./api/...

.PHONY: test
test: vet verify-generated test-unit ## Run every test: unit, integration on a real API server, KubeVirt admission.

##@ Build

.PHONY: build
build: ## Build the manager and isochronctl into bin/.
	$(GO) build -o $(LOCALBIN)/manager ./cmd/manager
	$(GO) build -o $(LOCALBIN)/isochronctl ./cmd/isochronctl

##@ Tools

$(CONTROLLER_GEN):
	GOBIN=$(LOCALBIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(LOCALBIN)/controller-gen $@

$(KUSTOMIZE):
	GOBIN=$(LOCALBIN) $(GO) install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
	mv $(LOCALBIN)/kustomize $@
