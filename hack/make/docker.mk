##@ Images (build/)

# Container images FROM scratch for the manager and rtprobe (build/*.Dockerfile),
# built from the static binaries `make build` writes to bin/; no base image is pulled. Each image is
# built from a context that holds only its binary, bin/image-context/<name>/:
# bin/ itself also holds the Kubernetes binaries (hundreds of MB) and, being
# git-ignored, has no .dockerignore. Expects LOCALBIN, GO, VERSION, IMG and
# PROBE_IMG from the main Makefile.
DOCKER ?= docker
IMAGE_CONTEXT := $(LOCALBIN)/image-context
IMAGE_ARCHIVES := $(LOCALBIN)/images

# $(call docker-image,NAME,TAG[,FILES]): build build/NAME.Dockerfile as TAG from a
# context holding only bin/NAME and the other files of bin/ named in FILES.
define docker-image
rm -rf $(IMAGE_CONTEXT)/$(1)
mkdir -p $(IMAGE_CONTEXT)/$(1)
cp $(LOCALBIN)/$(1) $(IMAGE_CONTEXT)/$(1)/$(1)
$(foreach f,$(3),cp -p $(LOCALBIN)/$(f) $(IMAGE_CONTEXT)/$(1)/$(f)
)$(DOCKER) build -f build/$(1).Dockerfile --build-arg VERSION=$(VERSION) -t $(2) $(IMAGE_CONTEXT)/$(1)
endef

.PHONY: docker-build
docker-build: build ## Build the images IMG (manager), NIC_AGENT_IMG (nic-agent) and PROBE_IMG (rtprobe) FROM scratch; needs a Docker engine.
	$(call docker-image,manager,$(IMG))
	$(call docker-image,nic-agent,$(NIC_AGENT_IMG))
	$(call docker-image,rtprobe,$(PROBE_IMG),agent.img)

.PHONY: docker-save
docker-save: docker-build ## Save the images to bin/images/{manager,nic-agent,rtprobe}.tar (for ctr images import, kind load image-archive).
	mkdir -p $(IMAGE_ARCHIVES)
	$(DOCKER) save -o $(IMAGE_ARCHIVES)/manager.tar $(IMG)
	$(DOCKER) save -o $(IMAGE_ARCHIVES)/nic-agent.tar $(NIC_AGENT_IMG)
	$(DOCKER) save -o $(IMAGE_ARCHIVES)/rtprobe.tar $(PROBE_IMG)
