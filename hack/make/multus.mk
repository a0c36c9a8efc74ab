# Multus NetworkAttachmentDefinition CRD, copied from the Go module that
# defines the type (the version the operator's go.mod requires), so CRD and
# client types cannot drift apart. Expects GO from the main Makefile.
NAD_CLIENT_MODULE := github.com/k8snetworkplumbingwg/network-attachment-definition-client
MULTUS_CRD := config/thirdparty/multus/networks-crd.yaml

.PHONY: multus-crds
multus-crds: ## Copy the Multus NetworkAttachmentDefinition CRD into config/thirdparty/multus
	$(GO) mod download $(NAD_CLIENT_MODULE)
	@dir=$$($(GO) list -m -f '{{.Dir}}' $(NAD_CLIENT_MODULE)); \
	version=$$($(GO) list -m -f '{{.Version}}' $(NAD_CLIENT_MODULE)); \
	src="$$dir/artifacts/networks-crd.yaml"; \
	grep -q '^apiVersion: apiextensions.k8s.io/v1$$' "$$src" || { echo "$$src is not an apiextensions.k8s.io/v1 CRD" >&2; exit 1; }; \
	mkdir -p $(dir $(MULTUS_CRD)); \
	{ echo "# Copied from $(NAD_CLIENT_MODULE) $$version artifacts/networks-crd.yaml; regenerate with: make multus-crds"; cat "$$src"; } > $(MULTUS_CRD); \
	echo "wrote $(MULTUS_CRD) from $(NAD_CLIENT_MODULE) $$version"
