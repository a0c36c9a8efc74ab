# Side-by-side comparison of rtprobe's crawler and gateway with Apache's own
# access log and with httperf (issue 4). Expects GO from the main Makefile.
# COMPARE_DURATION defaults to the 60 s the issue asks for.
COMPARE_DURATION ?= 60s

.PHONY: probe-compare-interval
probe-compare-interval: ## Compare rtprobe crawl/gateway with Apache's log and httperf (needs apache2, httperf)
	GO=$(GO) hack/probe-compare/interval.sh $(COMPARE_DURATION)
