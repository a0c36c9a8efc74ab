##@ Probes: rtprobe beside the standard tools (hack/probe-compare, docs/probes.md)

# Side-by-side comparisons of rtprobe with the standard tools on this machine; the
# figures go into docs/benchmarks.md. Expects GO from the main Makefile.

# The timer against cyclictest. Run as root (SCHED_FIFO, mlockall). Knobs: ROUNDS,
# DURATION_S, CPU, PRIORITY, INTERVAL_US, CYCLICTEST_EXTRA (see the script).
.PHONY: probe-compare-timer
probe-compare-timer: ## Compare rtprobe timer with cyclictest side by side (needs rt-tests)
	hack/probe-compare/timer.sh

# The crawler and gateway against Apache's own access log and httperf, for
# COMPARE_DURATION (60 s by default).
COMPARE_DURATION ?= 60s

.PHONY: probe-compare-interval
probe-compare-interval: ## Compare rtprobe crawl/gateway with Apache's log and httperf (needs apache2, httperf)
	GO=$(GO) hack/probe-compare/interval.sh $(COMPARE_DURATION)

# The probe agent's CPU in a guest during a window (RPS, DURATION_S, ROUNDS).
.PHONY: probe-agent-cost
probe-agent-cost: ## Measure the CPU and network the probe agent spends crawling a probe window at 1000 rps (loopback)
	GO=$(GO) hack/probe-compare/agent-cost.sh

.PHONY: probe-agent-cost-guest
probe-agent-cost-guest: build ## Measure the probe agent's CPU at 1000 rps inside the e2e guest, booted here under QEMU's software emulation (an upper bound)
	e2e/prereqs.sh guest-vm
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(LOCALBIN)/e2e-guest-init ./e2e/guest
	e2e/guest/image.sh $(E2E_GUEST_IMG) $(LOCALBIN)/e2e-guest-init $(LOCALBIN)/e2e-guest/image.tar $(LOCALBIN)/e2e-guest
	GO=$(GO) hack/probe-compare/agent-cost-guest.sh $(LOCALBIN)/e2e-guest/disk.img $(LOCALBIN)/agent.img
