##@ Lint (.golangci.yml; the linters built from hack/tools/golangci-lint)

# golangci-lint with kube-api-linter (the Kubernetes API conventions linter) compiled in,
# built from the separate module hack/tools/golangci-lint, which pins both (its go.mod must
# require GOLANGCI_LINT_VERSION and KUBE_API_LINTER_VERSION). .golangci.yml says which
# linters run and why, and keeps kube-api-linter to api/. Expects LOCALBIN, GO,
# GOLANGCI_LINT_VERSION and KUBE_API_LINTER_VERSION from the main Makefile.
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
GOLANGCI_LINT_MODULE := hack/tools/golangci-lint

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (.golangci.yml) on the operator's module, and kube-api-linter on api/ (part of make test).
	$(GOLANGCI_LINT) run ./...

.PHONY: lint-fix
lint-fix: $(GOLANGCI_LINT) ## Run golangci-lint and apply the fixes it suggests (formatting, imports).
	$(GOLANGCI_LINT) run --fix ./...

$(GOLANGCI_LINT): $(GOLANGCI_LINT_MODULE)/go.mod $(GOLANGCI_LINT_MODULE)/go.sum $(GOLANGCI_LINT_MODULE)/main.go
	@cd $(GOLANGCI_LINT_MODULE) && for pin in github.com/golangci/golangci-lint/v2=$(GOLANGCI_LINT_VERSION) sigs.k8s.io/kube-api-linter=$(KUBE_API_LINTER_VERSION); do \
		got=$$($(GO) list -m -f '{{.Version}}' $${pin%%=*}); \
		if [ "$$got" != "$${pin#*=}" ]; then \
			echo "$(GOLANGCI_LINT_MODULE)/go.mod pins $${pin%%=*} $$got but the Makefile says $${pin#*=}; bump one of them" >&2; exit 1; \
		fi; \
	done
	cd $(GOLANGCI_LINT_MODULE) && CGO_ENABLED=0 $(GO) build -trimpath -o $(abspath $@) .
