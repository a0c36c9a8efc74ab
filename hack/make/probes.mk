##@ Probes

# Side-by-side comparisons of rtprobe with the standard tools on this machine;
# the figures go into docs/probes.md. Run as root (SCHED_FIFO, mlockall).
# Knobs: ROUNDS, DURATION_S, CPU, PRIORITY, INTERVAL_US, CYCLICTEST_EXTRA (see the script).

.PHONY: probe-compare-timer
probe-compare-timer: ## Compare rtprobe timer with cyclictest side by side (needs rt-tests)
	hack/probe-compare/timer.sh
