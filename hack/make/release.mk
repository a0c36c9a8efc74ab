##@ Release (dist/: the manifests and images a platform engineer installs; docs/operations.md, "From a release")

# A release from one source, without a Docker engine: `make docker-push build-installer`.
# docker-push cross-compiles the binaries for RELEASE_PLATFORMS and pushes each image
# (build/NAME.Dockerfile: FROM scratch, its files, user, entrypoint and labels) as an OCI
# image index REGISTRY/NAME:VERSION, with hack/release/imagepush (go-containerregistry),
# and records the indexes' digests in RELEASE_DIGESTS; build-installer writes
# dist/install.yaml and dist/monitoring.yaml, every image REGISTRY/NAME:VERSION, pinned by
# digest when RELEASE_DIGESTS has it (hack/release/installer). The tools are the separate
# module hack/release, which pins go-containerregistry. Expects LOCALBIN, GO, VERSION,
# REGISTRY, KUSTOMIZE, RUNBOOK_BASE, GO_BUILD (the binaries as make build builds them)
# and agent-disk from the main Makefile.
DIST ?= dist
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64
# The cross-compiled binaries and agent disk, one directory a platform (linux-arm64/...).
RELEASE_BIN ?= $(LOCALBIN)/release
RELEASE_DIGESTS ?= $(DIST)/digests.txt
# Each image of the release, and the repository config/ names it by (config/manager,
# config/nic-agent, the manager's --probe-image): build-installer replaces those.
RELEASE_IMAGES := manager=isochron/manager nic-agent=isochron/nic-agent rtprobe=isochron/rtprobe
RELEASE_NAMES = $(foreach i,$(RELEASE_IMAGES),$(firstword $(subst =, ,$(i))))
RELEASE_TOOL = cd hack/release && $(GO) run

.PHONY: release-binaries
release-binaries: ## Cross-compile the images' binaries (CGO_ENABLED=0) and the probe agent's disk for each of RELEASE_PLATFORMS into RELEASE_BIN/OS-ARCH/.
	@for p in $(RELEASE_PLATFORMS); do \
		os=$${p%%/*}; arch=$${p#*/}; dir=$(abspath $(RELEASE_BIN))/$$os-$$arch; mkdir -p $$dir; \
		for name in $(RELEASE_NAMES); do \
			echo "GOOS=$$os GOARCH=$$arch go build -o $$dir/$$name ./cmd/$$name"; \
			GOOS=$$os GOARCH=$$arch $(GO_BUILD) -o $$dir/$$name ./cmd/$$name; \
		done; \
		$(call agent-disk,$$dir); \
	done

.PHONY: docker-push
docker-push: release-binaries ## Build the images FROM scratch for RELEASE_PLATFORMS (linux/amd64, linux/arm64) without a Docker engine and push one OCI image index each to REGISTRY/NAME:VERSION; record their digests in RELEASE_DIGESTS.
	$(RELEASE_TOOL) ./imagepush -registry $(REGISTRY) -version $(VERSION) -dockerfiles $(abspath build) \
		$(foreach p,$(RELEASE_PLATFORMS),-context $(p)=$(abspath $(RELEASE_BIN))/$(subst /,-,$(p))) \
		-digests $(abspath $(RELEASE_DIGESTS)) $(RELEASE_NAMES)

.PHONY: build-installer
build-installer: $(KUSTOMIZE) ## Write dist/install.yaml (config/default) and dist/monitoring.yaml (config/monitoring) for REGISTRY and VERSION, images pinned by digest after make docker-push; runbooks under RUNBOOK_BASE_URL.
	mkdir -p $(DIST)
	$(KUSTOMIZE) build config/default | $(RUNBOOK_BASE) | ($(RELEASE_TOOL) ./installer -digests $(abspath $(RELEASE_DIGESTS)) \
		$(foreach i,$(RELEASE_IMAGES),-image $(lastword $(subst =, ,$(i)))=$(REGISTRY)/$(firstword $(subst =, ,$(i))):$(VERSION))) > $(DIST)/install.yaml.tmp
	mv $(DIST)/install.yaml.tmp $(DIST)/install.yaml
	$(KUSTOMIZE) build config/monitoring | $(RUNBOOK_BASE) > $(DIST)/monitoring.yaml.tmp
	mv $(DIST)/monitoring.yaml.tmp $(DIST)/monitoring.yaml
	@echo "wrote $(DIST)/install.yaml and $(DIST)/monitoring.yaml for $(REGISTRY), $(VERSION)"

# The Helm chart is made from the same kustomize builds as build-installer's manifests;
# hack/release/chart templatises only what values.yaml sets (docs/operations.md, "With Helm").
CHART_DIR ?= $(DIST)/chart/isochron

.PHONY: helm-chart
helm-chart: $(KUSTOMIZE) ## Write the Helm chart dist/chart/isochron (version VERSION; images REGISTRY/NAME, pinned by RELEASE_DIGESTS when it has them) from config/default and config/monitoring (hack/release/chart).
	mkdir -p $(DIST)
	$(KUSTOMIZE) build config/default | $(RUNBOOK_BASE) > $(DIST)/chart-default.yaml.tmp
	$(KUSTOMIZE) build config/monitoring | $(RUNBOOK_BASE) > $(DIST)/chart-monitoring.yaml.tmp
	$(RELEASE_TOOL) ./chart -registry $(REGISTRY) -version $(VERSION) -digests $(abspath $(RELEASE_DIGESTS)) \
		$(foreach i,$(RELEASE_IMAGES),-image $(lastword $(subst =, ,$(i)))=$(firstword $(subst =, ,$(i)))) \
		-default $(abspath $(DIST))/chart-default.yaml.tmp -monitoring $(abspath $(DIST))/chart-monitoring.yaml.tmp -out $(abspath $(CHART_DIR))
	rm -f $(DIST)/chart-default.yaml.tmp $(DIST)/chart-monitoring.yaml.tmp

# The chart against build-installer's manifests, rendered and linted with Helm's Go library.
.PHONY: test-chart
test-chart: $(KUSTOMIZE) ## Check that the Helm chart (make helm-chart), rendered with its default values, is dist/install.yaml (and with monitoring.enabled, monitoring.yaml too), that each value lands where it should, and helm lint (hack/release/chart).
	cd hack/release && $(GO) vet ./chart && $(GO) test ./chart -count=1 $(CHART_TEST_FLAGS)

# Not part of make test: it cross-compiles for two platforms (minutes; DEVELOPERS.md, "Images").
.PHONY: test-release
test-release: $(KUSTOMIZE) ## Push the release into a registry the test starts in-process (distribution, in memory), check each image index and build-installer's manifests (hack/release).
	cd hack/release && $(GO) vet ./... && $(GO) test ./... -count=1 -timeout 30m $(RELEASE_TEST_FLAGS)

# helm, the CLI, built from Helm's own Go module: the separate module hack/tools/helm pins
# it (hack/release pins the same version of the library, which make test-chart uses).
HELM ?= $(LOCALBIN)/helm-$(HELM_VERSION)

.PHONY: helm
helm: $(HELM) ## Build helm (the CLI) from Helm's Go module (hack/tools/helm) into bin/.

$(HELM):
	@for m in hack/tools/helm hack/release; do \
		v=$$(cd $$m && $(GO) list -m -f '{{.Version}}' helm.sh/helm/v3); \
		if [ "$$v" != "$(HELM_VERSION)" ]; then \
			echo "$$m/go.mod pins helm.sh/helm/v3 $$v but HELM_VERSION=$(HELM_VERSION); bump one of them" >&2; \
			exit 1; \
		fi; \
	done
	cd hack/tools/helm && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION)" \
		-o $(abspath $@) helm.sh/helm/v3/cmd/helm

.PHONY: helm-package
helm-package: $(HELM) ## Package the chart make helm-chart wrote as DIST/isochron-<chart version>.tgz, the file a release publishes.
	$(HELM) package $(CHART_DIR) --destination $(DIST)
