##@ End-to-end: the suite (e2e/) and the Debian packages of every e2e workflow (e2e/prereqs.sh); docs/dev/e2e.md

# The e2e suite (e2e/, build tag e2e) and its two clusters: kind with nested
# virtualisation (for users; cannot run on the project's machines) and a local cluster
# of binaries built from Go modules. Expects LOCALBIN, GO, KUBE_VERSION, ENVTEST_ASSETS,
# KUSTOMIZE, VERSION, PLUGIN_BUILD, IMG, PROBE_IMG, NIC_AGENT_IMG and the E2E_* / KIND_* /
# MULTUS_VERSION / WHEREABOUTS_VERSION pins from the main Makefile.
E2E_ARTIFACTS ?= $(LOCALBIN)/e2e-artifacts
# kubectl-isochron for the suite, alone in its directory, which goes on kubectl's PATH.
E2E_KUBECTL_ISOCHRON ?= $(LOCALBIN)/e2e-plugin/kubectl-isochron
E2E_LOCAL_STATE ?= $(LOCALBIN)/e2e-local
E2E_LOCAL_IMAGES := $(E2E_LOCAL_STATE)/images
KIND_CLUSTER ?= isochron-e2e
# How long one run of the suite may take (go test -timeout).
E2E_TIMEOUT ?= 45m
KIND ?= $(LOCALBIN)/kind-$(KIND_VERSION)
SHELLCHECK ?= shellcheck
SHELL_SCRIPTS = $(wildcard e2e/*.sh e2e/*/*.sh e2e/*/*/*.sh e2e/*/*/*/*.sh hack/*/*.sh)
# Installs the Debian packages of the sets given (config, kind, local) as root, or names
# the missing ones: the first step of every e2e workflow below.
E2E_PREREQS = e2e/prereqs.sh
# The guest the suite boots: KubeVirt's demo containerDisk of the pinned release, or the
# e2e guest (e2e/guest) on the local cluster.
E2E_GUEST_IMAGE ?= quay.io/kubevirt/cirros-container-disk-demo:$(KUBEVIRT_VERSION)

.PHONY: e2e
e2e: $(KUSTOMIZE) $(ENVTEST_ASSETS)/kubectl ## Run the e2e suite against the cluster of KUBECONFIG (KubeVirt, Multus, static CPU Manager), deploying IMG, NIC_AGENT_IMG and PROBE_IMG; kubectl isochron, built here, is run through kubectl.
	$(PLUGIN_BUILD) -o $(E2E_KUBECTL_ISOCHRON) ./cmd/kubectl-isochron
	E2E_IMG=$(IMG) E2E_NIC_AGENT_IMG=$(NIC_AGENT_IMG) E2E_PROBE_IMG=$(PROBE_IMG) E2E_GUEST_IMAGE=$(E2E_GUEST_IMAGE) E2E_ARTIFACTS=$(E2E_ARTIFACTS) \
		KUSTOMIZE=$(KUSTOMIZE) KUBECTL=$(ENVTEST_ASSETS)/kubectl E2E_KUBECTL_ISOCHRON=$(E2E_KUBECTL_ISOCHRON) \
		$(GO) test -tags e2e ./e2e/... -count=1 -v -timeout $(E2E_TIMEOUT) $(E2E_GO_TEST_FLAGS)

.PHONY: test-e2e-config
test-e2e-config: $(KUSTOMIZE) ## Check the e2e suite compiles, the guest's tests, the providers' YAML and every shell script (shellcheck; part of make test).
	$(E2E_PREREQS) config
	$(GO) vet -tags e2e ./e2e/...
	$(GO) test ./e2e/... -count=1
	cd e2e/local/modules/kubevirt && $(GO) vet ./virthandler/ && $(GO) test ./virthandler/ -count=1
	$(SHELLCHECK) -x $(SHELL_SCRIPTS)
	$(KUSTOMIZE) build e2e/kind/kubevirt >/dev/null
	$(KUSTOMIZE) build e2e/local/kubevirt >/dev/null
	$(KUSTOMIZE) build e2e/local/kubevirt-nodes >/dev/null

##@ End-to-end: kind with nested virtualisation (e2e/kind; users' machines and CI, not here)

# The kind cluster's RT network (e2e/kind/up.sh): a Docker network that spans the workers,
# its interface in each the uplink of the bridge the suite's RT networks name.
KIND_RT_NETWORK ?= isochron-e2e-rt
KIND_RT_BRIDGE ?= isochronrt
KIND_RT_UPLINK ?= rtuplink0
# The CNI bridge plugin, copied into kind's nodes (their image has only kindnet's plugins).
KIND_CNI_BRIDGE ?= $(LOCALBIN)/cni-bridge-$(CNI_PLUGINS_VERSION)
# The suite on kind: the tests between nodes move crawlers between the workers
# (kind-config.yaml labels them), the node-loss test kills one worker's container, and
# the manager stays on the control plane, off the workers the tests drain and kill.
E2E_KIND_ENV = KUBECONFIG=$(LOCALBIN)/kind-$(KIND_CLUSTER).kubeconfig E2E_RT_UPLINK=$(KIND_RT_UPLINK) \
	E2E_MOVE_NODES=isochron.io/e2e-node=kind E2E_STOP_NODE='docker kill "$$NODE"' \
	E2E_OPERATOR_NODE_SELECTOR=node-role.kubernetes.io/control-plane=

.PHONY: e2e-kind
e2e-kind: e2e-kind-prereqs docker-build $(KIND) $(KUSTOMIZE) $(ENVTEST_ASSETS)/kubectl $(KIND_CNI_BRIDGE) ## Create a kind cluster (two workers) with KubeVirt, Multus, whereabouts and an RT network, load the images, run the suite, the node-loss test last (needs a Docker engine, /dev/kvm or emulation).
	wa=$$(cd e2e/local/modules/whereabouts && $(GO) mod download $(WHEREABOUTS_MODULE) && $(GO) list -m -f '{{.Dir}}' $(WHEREABOUTS_MODULE)); \
	KUBECTL=$(ENVTEST_ASSETS)/kubectl KIND=$(KIND) KIND_CLUSTER=$(KIND_CLUSTER) KIND_NODE_IMAGE=$(KIND_NODE_IMAGE) \
		KUBEVIRT_VERSION=$(KUBEVIRT_VERSION) MULTUS_VERSION=$(MULTUS_VERSION) WHEREABOUTS_VERSION=$(WHEREABOUTS_VERSION) WHEREABOUTS_DIR=$$wa \
		CNI_BRIDGE_BIN=$(abspath $(KIND_CNI_BRIDGE)) RT_NETWORK=$(KIND_RT_NETWORK) RT_BRIDGE=$(KIND_RT_BRIDGE) RT_UPLINK=$(KIND_RT_UPLINK) \
		IMG=$(IMG) NIC_AGENT_IMG=$(NIC_AGENT_IMG) PROBE_IMG=$(PROBE_IMG) KUSTOMIZE=$(KUSTOMIZE) \
		KUBECONFIG_OUT=$(LOCALBIN)/kind-$(KIND_CLUSTER).kubeconfig e2e/kind/up.sh
	$(E2E_KIND_ENV) $(MAKE) e2e E2E_GO_TEST_FLAGS='-skip $(E2E_NODE_LOSS_TEST)' E2E_TIMEOUT=75m
	$(E2E_KIND_ENV) $(MAKE) e2e E2E_GO_TEST_FLAGS='-run $(E2E_NODE_LOSS_TEST)'

$(KIND_CNI_BRIDGE):
	GOBIN=$(LOCALBIN) CGO_ENABLED=0 $(GO) install -trimpath github.com/containernetworking/plugins/plugins/main/bridge@$(CNI_PLUGINS_VERSION)
	mv $(LOCALBIN)/bridge $@

.PHONY: e2e-kind-prereqs
e2e-kind-prereqs: ## Install the Debian packages e2e-kind needs (a Docker client and engine) as root, or name the missing ones.
	$(E2E_PREREQS) kind

.PHONY: e2e-kind-down
e2e-kind-down: $(KIND) ## Delete the kind cluster e2e-kind created, and its RT network.
	$(KIND) delete cluster --name $(KIND_CLUSTER)
	docker network rm $(KIND_RT_NETWORK) 2>/dev/null || true

$(KIND):
	GOBIN=$(LOCALBIN) $(GO) install sigs.k8s.io/kind@$(KIND_VERSION)
	mv $(LOCALBIN)/kind $@

##@ End-to-end: a local cluster from Go modules and Debian packages (e2e/local, the guest in e2e/guest)

# Every e2e-local target starts with e2e-local-prereqs, so that no step runs before the
# Debian packages it uses are there.
.PHONY: e2e-local-prereqs
e2e-local-prereqs: ## Install the Debian packages the local cluster, KubeVirt's build and the guest need (e2e/prereqs.sh local) as root, or name the missing ones.
	$(E2E_PREREQS) local

.PHONY: e2e-local-bins
e2e-local-bins: envtest-bins $(ENVTEST_ASSETS)/kube-scheduler $(ENVTEST_ASSETS)/kubelet $(ENVTEST_ASSETS)/kube-proxy ## Build every Kubernetes binary the local cluster runs.

.PHONY: e2e-local-images
e2e-local-images: build ## Write the pause, rtprobe, manager and nic-agent images (FROM scratch, no engine) to bin/e2e-local/images.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(LOCALBIN)/pause ./e2e/local/pause
	e2e/local/image-archive.sh localhost/isochron/pause:e2e $(LOCALBIN)/pause $(E2E_LOCAL_IMAGES)/pause.tar
	e2e/local/image-archive.sh $(PROBE_IMG) $(LOCALBIN)/rtprobe $(E2E_LOCAL_IMAGES)/rtprobe.tar $(LOCALBIN)/agent.img:/disk/agent.img:107:107:0440
	e2e/local/image-archive.sh $(IMG) $(LOCALBIN)/manager $(E2E_LOCAL_IMAGES)/manager.tar
	e2e/local/image-archive.sh $(NIC_AGENT_IMG) $(LOCALBIN)/nic-agent $(E2E_LOCAL_IMAGES)/nic-agent.tar

# Multus' thin plugin, pinned by the separate module e2e/local/modules/multus (its go.mod must
# require MULTUS_VERSION, the version the kind provider deploys).
E2E_LOCAL_MULTUS ?= $(LOCALBIN)/multus

.PHONY: e2e-local-multus
e2e-local-multus: $(E2E_LOCAL_MULTUS) ## Build Multus' thin CNI plugin from its Go module (e2e/local/modules/multus/go.mod), with multus-cni#1453's one-line change (patch.sh).

# $(call pinned-module-bin,NAME,MODULE,VERSION,PACKAGE,LDFLAGS[,BUILDFLAGS]): build PACKAGE of
# MODULE into $@ from the separate module e2e/local/modules/NAME, after checking that its
# go.mod requires MODULE at VERSION (the Makefile's pin).
define pinned-module-bin
@grep -q '$(2) $(3)$$' e2e/local/modules/$(1)/go.mod || \
	{ echo "e2e/local/modules/$(1)/go.mod does not require $(2) $(3)"; exit 1; }
cd e2e/local/modules/$(1) && CGO_ENABLED=0 $(GO) build -trimpath $(6) -o $(abspath $@) -ldflags '-s -w $(5)' $(4)
endef

MULTUS_MODULE := gopkg.in/k8snetworkplumbingwg/multus-cni.v4

# With the one change of multus-cni#1453 (e2e/local/modules/multus/patch.sh): the pod's
# live query waits 2.5 s, not 250 ms, which an emulated node's plugin could not meet.
E2E_LOCAL_MULTUS_SRC = $(abspath $(LOCALBIN))/multus-src

$(E2E_LOCAL_MULTUS): e2e/local/modules/multus/go.mod e2e/local/modules/multus/go.sum e2e/local/modules/multus/patch.sh e2e/local/modules/copy-module.sh
	cd e2e/local/modules/multus && GO=$(GO) ./patch.sh $(E2E_LOCAL_MULTUS_SRC)
	$(call pinned-module-bin,multus,$(MULTUS_MODULE),$(MULTUS_VERSION),$(MULTUS_MODULE)/cmd/multus,-X $(MULTUS_MODULE)/pkg/multus.version=$(MULTUS_VERSION),-modfile $(E2E_LOCAL_MULTUS_SRC)/go.mod)

# whereabouts, the IPAM plugin that leases secondary networks' addresses cluster-wide
# (config/samples/rt-net.yaml uses it), pinned by the separate module
# e2e/local/modules/whereabouts (its go.mod must require WHEREABOUTS_VERSION). up.sh
# installs the CRDs of the same module version, from its source in the module cache.
WHEREABOUTS_MODULE := github.com/k8snetworkplumbingwg/whereabouts
E2E_LOCAL_WHEREABOUTS ?= $(LOCALBIN)/whereabouts

.PHONY: e2e-local-whereabouts
e2e-local-whereabouts: $(E2E_LOCAL_WHEREABOUTS) ## Build whereabouts' IPAM CNI plugin from its Go module (e2e/local/modules/whereabouts/go.mod).

$(E2E_LOCAL_WHEREABOUTS): e2e/local/modules/whereabouts/go.mod e2e/local/modules/whereabouts/go.sum
	$(call pinned-module-bin,whereabouts,$(WHEREABOUTS_MODULE),$(WHEREABOUTS_VERSION),$(WHEREABOUTS_MODULE)/cmd,-X $(WHEREABOUTS_MODULE)/pkg/version.Version=$(WHEREABOUTS_VERSION) -X $(WHEREABOUTS_MODULE)/pkg/version.ReleaseStatus=released)

# KubeVirt (stage 3): its components from the kubevirt.io/kubevirt module pinned by
# e2e/local/modules/kubevirt (which must require KUBEVIRT_VERSION), libvirt and QEMU from Debian
# (E2E_KUBEVIRT_SUITE), and the e2e guest as a containerDisk. Binaries and the Debian
# layer are cached outside bin/e2e-local, so PURGE=1 keeps them.
E2E_KUBEVIRT_BIN ?= $(LOCALBIN)/kubevirt-$(KUBEVIRT_VERSION)
E2E_KUBEVIRT_SUITE ?= trixie
E2E_KUBEVIRT_ROOTFS ?= $(LOCALBIN)/kubevirt-rootfs-$(E2E_KUBEVIRT_SUITE).tar
E2E_KUBEVIRT_IMAGES := $(E2E_LOCAL_IMAGES)/kubevirt
E2E_GUEST_IMG ?= localhost/isochron/e2e-guest:$(VERSION)
E2E_KUBEVIRT_ARCHIVES = $(addprefix $(E2E_KUBEVIRT_IMAGES)/,virt-operator.tar virt-api.tar virt-controller.tar virt-handler.tar virt-launcher.tar) $(E2E_LOCAL_IMAGES)/e2e-guest.tar

.PHONY: e2e-local-kubevirt-bins
e2e-local-kubevirt-bins: $(E2E_KUBEVIRT_BIN)/kubevirt-operator.yaml ## Build KubeVirt's components and operator manifest from its Go module (cgo: gcc, libvirt-dev), virt-handler with the change of kubevirt#18545 (patch.sh).

$(E2E_KUBEVIRT_BIN)/kubevirt-operator.yaml: e2e/local/modules/kubevirt/go.mod e2e/local/modules/kubevirt/go.sum e2e/local/build-kubevirt.sh \
		e2e/local/modules/kubevirt/patch.sh e2e/local/modules/kubevirt/virthandler/slowstart.go e2e/local/modules/copy-module.sh | e2e-local-prereqs
	GO=$(GO) e2e/local/build-kubevirt.sh $(KUBEVIRT_VERSION) $(E2E_KUBEVIRT_BIN)

$(E2E_KUBEVIRT_ROOTFS): e2e/local/kubevirt-rootfs.sh | e2e-local-prereqs
	SUITE=$(E2E_KUBEVIRT_SUITE) e2e/local/kubevirt-rootfs.sh $@

.PHONY: e2e-local-kubevirt-images
e2e-local-kubevirt-images: e2e-local-prereqs e2e-local-kubevirt-bins $(E2E_KUBEVIRT_ROOTFS) ## Write KubeVirt's images (Debian's libvirt and QEMU) and the e2e guest's containerDisk to bin/e2e-local/images.
	KV_BIN=$(E2E_KUBEVIRT_BIN) KV_SRC=$$(cd e2e/local/modules/kubevirt && $(GO) list -m -f '{{.Dir}}' kubevirt.io/kubevirt) \
		ROOTFS=$(E2E_KUBEVIRT_ROOTFS) TAG=$(KUBEVIRT_VERSION) e2e/local/kubevirt-images.sh $(E2E_KUBEVIRT_IMAGES)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(LOCALBIN)/e2e-guest-init ./e2e/guest
	e2e/guest/image.sh $(E2E_GUEST_IMG) $(LOCALBIN)/e2e-guest-init $(E2E_LOCAL_IMAGES)/e2e-guest.tar $(LOCALBIN)/e2e-guest

# The registry the local cluster pulls releases from over plain HTTP (e2e/local/up.sh
# starts it; e2e/local/common.sh REGISTRY_ADDR), the distribution project's
# (hack/release/registry).
E2E_LOCAL_REGISTRY ?= 127.0.0.1:5000
E2E_LOCAL_REGISTRY_BIN ?= $(LOCALBIN)/registry

.PHONY: e2e-local-registry
e2e-local-registry: ## Build the registry the local cluster pulls releases from (the distribution project's registry, hack/release/registry) into bin/.
	cd hack/release && CGO_ENABLED=0 $(GO) build -trimpath -o $(abspath $(E2E_LOCAL_REGISTRY_BIN)) ./registry

.PHONY: e2e-local-up
e2e-local-up: e2e-local-prereqs e2e-local-bins e2e-local-images e2e-local-registry $(E2E_LOCAL_MULTUS) $(E2E_LOCAL_WHEREABOUTS) e2e-local-kubevirt-images ## Start etcd, API server, controller-manager, scheduler, kube-proxy, containerd (Multus as CNI, whereabouts as IPAM), a kubelet (static CPU Manager), a registry and KubeVirt here; run e2e-local-check.
	wa=$$(cd e2e/local/modules/whereabouts && $(GO) mod download $(WHEREABOUTS_MODULE) && $(GO) list -m -f '{{.Dir}}' $(WHEREABOUTS_MODULE)); \
	KUBE_VERSION=$(KUBE_VERSION) E2E_LOCAL_STATE=$(E2E_LOCAL_STATE) MULTUS_BIN=$(abspath $(E2E_LOCAL_MULTUS)) \
		WHEREABOUTS_BIN=$(abspath $(E2E_LOCAL_WHEREABOUTS)) \
		WHEREABOUTS_CRDS="$$wa/doc/crds/whereabouts.cni.cncf.io_ippools.yaml $$wa/doc/crds/whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml" \
		IMAGE_ARCHIVES="$(E2E_LOCAL_IMAGES)/pause.tar $(E2E_LOCAL_IMAGES)/rtprobe.tar $(E2E_LOCAL_IMAGES)/manager.tar $(E2E_LOCAL_IMAGES)/nic-agent.tar" \
		REGISTRY_BIN=$(abspath $(E2E_LOCAL_REGISTRY_BIN)) E2E_LOCAL_REGISTRY=$(E2E_LOCAL_REGISTRY) \
		e2e/local/up.sh
	$(MAKE) e2e-local-check
	KUBE_VERSION=$(KUBE_VERSION) E2E_LOCAL_STATE=$(E2E_LOCAL_STATE) KUBEVIRT_MANIFEST=$(E2E_KUBEVIRT_BIN)/kubevirt-operator.yaml \
		KUBEVIRT_ARCHIVES="$(E2E_KUBEVIRT_ARCHIVES)" e2e/local/up-kubevirt.sh

# Two releases in the local registry, as a platform engineer gets them (make docker-push
# build-installer helm-chart): this build (VERSION), and a rebuild of it that reports
# another version (E2E_UPGRADE_VERSION: other binaries, other digests), the upgrade's
# target. Each in its own directory: install.yaml, monitoring.yaml, digests.txt and
# chart/isochron (TestReleaseInstallsUpgradesAndUninstallsFromTheRegistry).
E2E_RELEASE_DIR ?= $(LOCALBIN)/e2e-release
E2E_UPGRADE_VERSION = $(VERSION)-upgrade

.PHONY: e2e-local-release
e2e-local-release: helm ## Push this build (VERSION) and a rebuild of it (VERSION-upgrade) as two releases to the running local cluster's registry; their manifests and charts in bin/e2e-release/{release,upgrade}.
	$(MAKE) docker-push build-installer helm-chart REGISTRY=$(E2E_LOCAL_REGISTRY)/isochron \
		DIST=$(E2E_RELEASE_DIR)/release RELEASE_BIN=$(E2E_RELEASE_DIR)/bin
	$(MAKE) docker-push build-installer helm-chart REGISTRY=$(E2E_LOCAL_REGISTRY)/isochron VERSION=$(E2E_UPGRADE_VERSION) \
		DIST=$(E2E_RELEASE_DIR)/upgrade RELEASE_BIN=$(E2E_RELEASE_DIR)/bin

# The local node has 2 CPUs, one reserved: the probe pod gets a fraction of the shared
# pool instead of an exclusive CPU (the manager's --probe-cpu).
E2E_LOCAL_PROBE_CPU ?= 200m
# The uplink of the RT network up.sh makes for the NIC agent test, named in one place,
# e2e/local/common.sh (RT_UPLINK): the suite runs on the node and checks its schedule there.
E2E_LOCAL_RT_UPLINK = $(shell sed -n 's/^RT_UPLINK=//p' e2e/local/common.sh)

.PHONY: e2e-local
e2e-local: e2e-local-prereqs ## Bring up the local cluster from scratch (all stages; e2e-local-down PURGE=1 first) and run the e2e suite on it.
	$(MAKE) e2e-local-down PURGE=1
	$(MAKE) e2e-local-up
	$(MAKE) e2e-local-release
	$(E2E_LOCAL_ENV) $(E2E_LOCAL_RELEASE_ENV) $(MAKE) e2e E2E_GUEST_IMAGE=$(E2E_GUEST_IMG)

# The suite on the local cluster's own node (this machine's kernel).
E2E_LOCAL_ENV = KUBECONFIG=$(E2E_LOCAL_STATE)/admin.kubeconfig E2E_PROBE_CPU=$(E2E_LOCAL_PROBE_CPU) E2E_GUEST_RUNS_AGENT=1 \
	E2E_RT_UPLINK=$(E2E_LOCAL_RT_UPLINK)
# The releases of make e2e-local-release, installed with kubectl and helm: only on the
# local node, which reaches the registry on its loopback address (the node VMs do not).
E2E_LOCAL_RELEASE_ENV = E2E_RELEASE=$(E2E_RELEASE_DIR)/release E2E_RELEASE_UPGRADE=$(E2E_RELEASE_DIR)/upgrade E2E_HELM=$(abspath $(HELM))

# Worker nodes that are VMs (e2e/local/nodes-up.sh; docs/dev/e2e.md, "Nodes that are VMs"):
# Debian E2E_NODE_SUITE booted by systemd under QEMU's software emulation, joined to the
# running local cluster. Their disk is cached outside bin/e2e-local, so PURGE=1 keeps it.
E2E_NODE_SUITE ?= $(E2E_KUBEVIRT_SUITE)
E2E_NODE_IMAGE ?= $(LOCALBIN)/e2e-node-$(E2E_NODE_SUITE)
E2E_LOCAL_NODES ?= 1
# Set, e2e-local-nodes-up boots the node VMs and returns; they join the cluster on the
# next e2e-local-nodes-up without it (e2e-local-multi boots them during the single-node tests).
E2E_LOCAL_NODES_HOLD ?=
E2E_LOCAL_MULTI_NODES ?= 2
# What the nodes run from the cluster's images (KubeVirt's control plane stays on the
# host's node: e2e/local/kubevirt places it there).
E2E_NODE_ARCHIVES = $(addprefix $(E2E_LOCAL_IMAGES)/,pause.tar rtprobe.tar manager.tar nic-agent.tar e2e-guest.tar) \
	$(addprefix $(E2E_KUBEVIRT_IMAGES)/,virt-handler.tar virt-launcher.tar)

.PHONY: e2e-local-nodes-prereqs
e2e-local-nodes-prereqs: ## Install the Debian packages the node VMs need (e2e/prereqs.sh nodes: QEMU, qemu-img, mke2fs, mmdebstrap) as root, or name the missing ones.
	$(E2E_PREREQS) nodes

.PHONY: e2e-local-node-image
e2e-local-node-image: e2e-local-nodes-prereqs ## Build the node VMs' disk and kernel (Debian E2E_NODE_SUITE, systemd, containerd, its kernel and modules) into E2E_NODE_IMAGE.
	SUITE=$(E2E_NODE_SUITE) e2e/local/node-image.sh $(E2E_NODE_IMAGE)

.PHONY: e2e-local-nodes-up
e2e-local-nodes-up: e2e-local-node-image ## Add E2E_LOCAL_NODES worker nodes that are QEMU VMs (TCG, 4 vCPUs each) to the running local cluster (make e2e-local-up first).
	KUBE_VERSION=$(KUBE_VERSION) E2E_LOCAL_STATE=$(E2E_LOCAL_STATE) NODE_IMAGE=$(E2E_NODE_IMAGE) E2E_LOCAL_NODES=$(E2E_LOCAL_NODES) \
		MULTUS_BIN=$(abspath $(E2E_LOCAL_MULTUS)) WHEREABOUTS_BIN=$(abspath $(E2E_LOCAL_WHEREABOUTS)) \
		E2E_LOCAL_NODES_HOLD=$(E2E_LOCAL_NODES_HOLD) IMAGE_ARCHIVES="$(E2E_NODE_ARCHIVES)" e2e/local/nodes-up.sh

# The multi-node run: the tests between nodes move crawlers between the node VMs
# (E2E_MOVE_NODES) and the node-loss test stops one by killing its QEMU (E2E_STOP_NODE);
# that node stays dead, so the node-loss test runs last, on its own. A probe pod on an
# emulated node took over 5 min to start on a loaded machine (the manager's default
# --probe-grace), so there the manager gives it E2E_LOCAL_MULTI_PROBE_GRACE.
E2E_LOCAL_MULTI_PROBE_GRACE ?= 15m
E2E_LOCAL_MULTI_ENV = KUBECONFIG=$(E2E_LOCAL_STATE)/admin.kubeconfig E2E_PROBE_CPU=$(E2E_LOCAL_PROBE_CPU) E2E_GUEST_RUNS_AGENT=1 \
	E2E_PROBE_GRACE=$(E2E_LOCAL_MULTI_PROBE_GRACE) \
	E2E_RT_UPLINK=$(shell sed -n 's/^NODE_RT_UPLINK=//p' e2e/local/common.sh) E2E_MOVE_NODES=$(shell sed -n 's/^NODE_LABELS=//p' e2e/local/common.sh) \
	E2E_STOP_NODE='kill -9 "$$(cat $(E2E_LOCAL_STATE)/run/node-$$NODE.pid)"' E2E_OPERATOR_NODE_SELECTOR=node-role.kubernetes.io/control-plane=
E2E_NODE_LOSS_TEST = TestLostNodeCrawlersRunElsewhereOnceFenced
# The tests one node answers: e2e-local-multi runs them on the cluster's own node before
# the node VMs join (there a launcher pod starts in seconds, on an emulated node in
# minutes; the node VMs boot meanwhile, their kubelets held), and the suite on the node
# VMs leaves them out.
E2E_SINGLE_NODE_TESTS = TestCrashedCrawlerRestartsByItself|TestDrainOfTheOnlyNodeWaits|TestSharedCrawlerRunsOnTheSharedPool|TestUnplaceableCrawlerIsReportedAndCreatesNothing
# The suite before the node-loss test on the node VMs: 75 min (4517 s) was too short on
# 26 Nov 2026, when the emulated nodes started a launcher pod in 4-6 min
# (docs/dev/e2e.md, "Nodes that are VMs").
E2E_LOCAL_MULTI_TIMEOUT ?= 120m

.PHONY: e2e-local-multi
e2e-local-multi: e2e-local-prereqs e2e-local-nodes-prereqs ## Bring up the local cluster from scratch, run the single-node tests on its own node, add two node VMs (E2E_LOCAL_MULTI_NODES) and run the rest of the suite on them, the node-loss test last.
	$(MAKE) e2e-local-down PURGE=1
	$(MAKE) e2e-local-up
	$(MAKE) e2e-local-nodes-up E2E_LOCAL_NODES=$(E2E_LOCAL_MULTI_NODES) E2E_LOCAL_NODES_HOLD=1
	$(E2E_LOCAL_ENV) $(MAKE) e2e E2E_GUEST_IMAGE=$(E2E_GUEST_IMG) E2E_GO_TEST_FLAGS="-run '$(E2E_SINGLE_NODE_TESTS)'"
	$(MAKE) e2e-local-nodes-up E2E_LOCAL_NODES=$(E2E_LOCAL_MULTI_NODES)
	$(MAKE) e2e-local-multi-suite

# E2E_RUN, a go test -run pattern, picks tests of the suite (e2e-local-multi-suite).
E2E_RUN ?=

.PHONY: e2e-local-multi-suite
e2e-local-multi-suite: ## Run the suite but the single-node tests on the running local cluster with node VMs (e2e-local-up, e2e-local-nodes-up), the node-loss test last; E2E_RUN=pattern runs only the tests it matches.
ifeq ($(E2E_RUN),)
	@# The node-loss test runs even when a test before it failed; the target fails if either did.
	rc=0; \
	$(E2E_LOCAL_MULTI_ENV) $(MAKE) e2e E2E_GUEST_IMAGE=$(E2E_GUEST_IMG) E2E_GO_TEST_FLAGS="-skip '$(E2E_SINGLE_NODE_TESTS)|$(E2E_NODE_LOSS_TEST)'" E2E_TIMEOUT=$(E2E_LOCAL_MULTI_TIMEOUT) || rc=$$?; \
	$(E2E_LOCAL_MULTI_ENV) $(MAKE) e2e E2E_GUEST_IMAGE=$(E2E_GUEST_IMG) E2E_GO_TEST_FLAGS='-run $(E2E_NODE_LOSS_TEST)' || rc=$$?; \
	exit $$rc
else
	$(E2E_LOCAL_MULTI_ENV) $(MAKE) e2e E2E_GUEST_IMAGE=$(E2E_GUEST_IMG) E2E_GO_TEST_FLAGS="-run '$(E2E_RUN)'" E2E_TIMEOUT=$(E2E_LOCAL_MULTI_TIMEOUT)
endif

.PHONY: e2e-local-nodes-down
e2e-local-nodes-down: ## Stop the node VMs (e2e-local-down stops them too).
	KUBE_VERSION=$(KUBE_VERSION) E2E_LOCAL_STATE=$(E2E_LOCAL_STATE) e2e/local/nodes-down.sh

.PHONY: e2e-local-check
e2e-local-check: e2e-local-prereqs ## Check the running local cluster: a Guaranteed pod gets an exclusive CPU; Multus attaches a NAD's second network with a whereabouts address; a ClusterIP Service answers (kube-proxy).
	KUBE_VERSION=$(KUBE_VERSION) E2E_LOCAL_STATE=$(E2E_LOCAL_STATE) PROBE_IMG=$(PROBE_IMG) \
		e2e/local/check-exclusive-cpu.sh
	KUBE_VERSION=$(KUBE_VERSION) E2E_LOCAL_STATE=$(E2E_LOCAL_STATE) PROBE_IMG=$(PROBE_IMG) \
		e2e/local/check-multus.sh
	KUBE_VERSION=$(KUBE_VERSION) E2E_LOCAL_STATE=$(E2E_LOCAL_STATE) PROBE_IMG=$(PROBE_IMG) \
		e2e/local/check-service.sh

.PHONY: e2e-local-down
e2e-local-down: e2e-local-prereqs ## Stop the local cluster (PURGE=1 also deletes bin/e2e-local).
	KUBE_VERSION=$(KUBE_VERSION) E2E_LOCAL_STATE=$(E2E_LOCAL_STATE) e2e/local/down.sh $(if $(PURGE),--purge)
