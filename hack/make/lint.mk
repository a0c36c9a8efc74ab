##@ Lint (.golangci.yml; the linters built from hack/tools/golangci-lint)

# golangci-lint with kube-api-linter (the Kubernetes API conventions linter) compiled in,
# built from the separate module hack/tools/golangci-lint, which pins both (its go.mod must
# require GOLANGCI_LINT_VERSION and KUBE_API_LINTER_VERSION). .golangci.yml says which
# linters run and why, and keeps kube-api-linter to api/. Expects LOCALBIN, GO,
# GOLANGCI_LINT_VERSION, KUBE_API_LINTER_VERSION and ACTIONLINT_VERSION from the main Makefile.
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

# actionlint checks .github/workflows (the release workflow runs only on a tag, so this is
# what catches a wrong expression, an unknown input or a bad `needs` before then), built
# from the module hack/tools/actionlint, which must pin ACTIONLINT_VERSION. The workflows'
# `run:` scripts go through Debian's shellcheck (installed as make test-e2e-config does,
# E2E_PREREQS and SHELLCHECK from hack/make/e2e.mk); no pyflakes (no Python steps).
ACTIONLINT ?= $(LOCALBIN)/actionlint-$(ACTIONLINT_VERSION)
ACTIONLINT_MODULE := hack/tools/actionlint

.PHONY: lint-workflows
lint-workflows: $(ACTIONLINT) ## Check the GitHub Actions workflows (.github/workflows) with actionlint and their scripts with shellcheck (part of make test).
	$(E2E_PREREQS) config
	$(ACTIONLINT) -no-color -shellcheck=$(SHELLCHECK) -pyflakes= .github/workflows/*.yaml

$(ACTIONLINT): $(ACTIONLINT_MODULE)/go.mod $(ACTIONLINT_MODULE)/go.sum
	@got=$$(cd $(ACTIONLINT_MODULE) && $(GO) list -m -f '{{.Version}}' github.com/rhysd/actionlint); \
	if [ "$$got" != "$(ACTIONLINT_VERSION)" ]; then \
		echo "$(ACTIONLINT_MODULE)/go.mod pins github.com/rhysd/actionlint $$got but ACTIONLINT_VERSION=$(ACTIONLINT_VERSION); bump one of them" >&2; exit 1; \
	fi
	cd $(ACTIONLINT_MODULE) && CGO_ENABLED=0 $(GO) build -trimpath -o $(abspath $@) github.com/rhysd/actionlint/cmd/actionlint
