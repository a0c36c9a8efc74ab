##@ Network lab: the RTvNIC study's comparison on real Linux queueing (hack/netlab, docs/dev/netlab.md)

# Debian's kernel under QEMU's software emulation with the lab's static binary as PID 1:
# two RT flows and a saturating best-effort flow over a bridge, the uplink and a 10 Mbit/s
# wire, without and with the NIC agent's schedule (internal/nic). Not part of make test:
# it boots a VM and takes about five minutes. Expects LOCALBIN and GO from the main
# Makefile; NETLAB_DURATION is each run's measured traffic.
NETLAB_DIR ?= $(LOCALBIN)/netlab
NETLAB_DURATION ?= 60s

.PHONY: netlab
netlab: ## Run the network lab: the RTvNIC comparison (5 ms and 10 ms flows against saturating best effort) without and with the NIC agent's schedule, in Debian's kernel under QEMU; prints the table.
	e2e/prereqs.sh guest-vm
	CGO_ENABLED=0 $(GO) build -trimpath -o $(NETLAB_DIR)/netlab ./hack/netlab
	CGO_ENABLED=0 $(GO) test -c -trimpath -o $(NETLAB_DIR)/nic.test ./internal/nic
	hack/netlab/initramfs.sh $(NETLAB_DIR)/netlab $(NETLAB_DIR)/nic.test $(NETLAB_DIR)
	$(NETLAB_DIR)/netlab -kernel $(NETLAB_DIR)/vmlinuz -initrd $(NETLAB_DIR)/initrd.gz -duration $(NETLAB_DURATION)
