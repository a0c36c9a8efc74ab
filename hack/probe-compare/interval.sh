#!/usr/bin/env bash
# Compare rtprobe's crawler and gateway with Apache's own log and with httperf
# (issue 4): interval error at 1,000 rps for DURATION (default 60s), all on
# loopback. Needs apache2 and httperf (Debian). Prints a table.
#
# Each comparison is made so that the machine's noise from one minute to the next does
# not pass for a difference between the tools:
#  (1) rtprobe crawl -> Apache, which logs each arrival (%{usec}t) and proxies it to
#      rtprobe gateway (mod_proxy_http): Apache's log and the gateway judge the same
#      request stream (target 1: their p99.9 interval errors agree);
#  (2) rtprobe crawl and httperf (open loop, --wlog of the same point URLs), each alone
#      against Apache serving a file at 1,000 rps, in ROUNDS (default 3) alternating
#      turns (target 2: the median of rtprobe's p99.999 interval error from Apache's
#      log is no worse than httperf's). Run together they doubled the load on the
#      2-core VM; in turns both see the machine in the same states.
#
#   hack/probe-compare/interval.sh [DURATION]
set -euo pipefail

DURATION=${1:-60s}
ROUNDS=${ROUNDS:-3}
RPS=1000
APACHE_PORT=${APACHE_PORT:-8081}
GATEWAY_PORT=${GATEWAY_PORT:-8082}
GO=${GO:-go}
MODULES=/usr/lib/apache2/modules

for tool in apache2 httperf; do
	command -v "$tool" >/dev/null || { echo "compare-interval: $tool not found; apt-get install -y apache2 httperf" >&2; exit 1; }
done

cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/isochron-compare.XXXXXX)
chmod 755 "$tmp"
apache_pid=""
cleanup() {
	if [[ -n "$apache_pid" ]]; then kill "$apache_pid" 2>/dev/null || true; wait "$apache_pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

"$GO" build -o "$tmp/rtprobe" ./cmd/rtprobe
"$GO" build -o "$tmp/intervalerr" ./hack/probe-compare/intervalerr

mkdir -p "$tmp/htdocs"
echo ok >"$tmp/htdocs/index.html"

start_apache() { # $1: log file, $2: "proxy" to proxy to the gateway, else serve files
	local proxy=""
	if [[ ${2:-} == proxy ]]; then
		proxy="LoadModule proxy_module $MODULES/mod_proxy.so
LoadModule proxy_http_module $MODULES/mod_proxy_http.so
ProxyPass \"/\" \"http://127.0.0.1:$GATEWAY_PORT/\" keepalive=On
ProxyTimeout 10"
	fi
	cat >"$tmp/httpd.conf" <<CONF
ServerRoot $tmp
ServerName localhost
Listen 127.0.0.1:$APACHE_PORT
LoadModule mpm_event_module $MODULES/mod_mpm_event.so
LoadModule authz_core_module $MODULES/mod_authz_core.so
$proxy
User www-data
Group www-data
PidFile $tmp/httpd.pid
ErrorLog $tmp/error.log
DocumentRoot $tmp/htdocs
LogFormat "%{usec}t %q" isochron
CustomLog $1 isochron
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 15
ServerLimit 4
ThreadsPerChild 64
MaxRequestWorkers 256
StartServers 2
<Directory $tmp/htdocs>
  Require all granted
</Directory>
CONF
	apache2 -f "$tmp/httpd.conf" -DFOREGROUND &
	apache_pid=$!
	for _ in $(seq 50); do
		curl -sf "http://127.0.0.1:$APACHE_PORT/index.html?point=warmup" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "compare-interval: Apache did not start; see $tmp/error.log" >&2
	cat "$tmp/error.log" >&2
	exit 1
}

stop_apache() {
	kill "$apache_pid"
	wait "$apache_pid" 2>/dev/null || true
	apache_pid=""
}

# field JSON KEY: one numeric field of a one-line JSON object.
field() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" <<<"$1"; }

row() { # name json
	printf '%-34s %8s %8s %8s %8s %9s %9s\n' "$1" "$(field "$2" count)" "$(field "$2" p50)" \
		"$(field "$2" p99)" "$(field "$2" p999)" "$(field "$2" p99999)" "$(field "$2" max)"
}

start_gateway() {
	"$tmp/rtprobe" gateway --listen "127.0.0.1:$GATEWAY_PORT" --json >"$tmp/gateway.out" 2>"$tmp/gateway.err" &
	gateway_pid=$!
	for _ in $(seq 50); do
		curl -s "http://127.0.0.1:$GATEWAY_PORT/metrics" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "compare-interval: rtprobe gateway did not start" >&2
	exit 1
}

echo "== (1) rtprobe crawl -> Apache (logs, proxies) -> rtprobe gateway, $DURATION at $RPS rps" >&2
start_gateway
start_apache "$tmp/apache-proxy.log" proxy
crawl_1=$("$tmp/rtprobe" crawl --target "http://127.0.0.1:$APACHE_PORT/" --rps "$RPS" --duration "$DURATION" --json | tail -n1)
sleep 0.5
stop_apache
kill -TERM "$gateway_pid"
wait "$gateway_pid" || true
gateway=$(tail -n1 "$tmp/gateway.out")
# The warm-up request went through the proxy too: drop it from both sides' counts by
# leaving it out of Apache's (the gateway counts it as one more point, no interval).
apache_proxy=$(grep -v 'point=warmup' "$tmp/apache-proxy.log" | "$tmp/intervalerr" --json)

# (2) rtprobe crawl and httperf, each alone against Apache serving a file, in turns
# (ROUNDS rounds, the order alternating), so both see the machine in the same states
# and neither doubles the load on the other; compared by the median of their p99.999.
for ((i = 0; i < RPS; i++)); do printf '/index.html?point=%d&src=httperf\0' "$i"; done >"$tmp/wlog"
seconds=${DURATION%s}
run_crawl() {
	start_apache "$tmp/apache-crawl-$1.log"
	crawl_2=$("$tmp/rtprobe" crawl --target "http://127.0.0.1:$APACHE_PORT/index.html?src=crawl" --rps "$RPS" --duration "$DURATION" --json | tail -n1)
	stop_apache
	apache_crawl=$(grep 'src=crawl' "$tmp/apache-crawl-$1.log" | "$tmp/intervalerr" --json)
	crawl_p5+=("$(field "$apache_crawl" p99999)")
}
run_httperf() {
	# No --hog: past ~33,000 connections httperf --hog stopped sending (twice, here);
	# without it, loopback reuses TIME_WAIT ports (net.ipv4.tcp_tw_reuse=2).
	start_apache "$tmp/apache-httperf-$1.log"
	timeout "$((seconds + 60))" httperf --server 127.0.0.1 --port "$APACHE_PORT" --wlog "y,$tmp/wlog" \
		--rate "$RPS" --num-conns "$((RPS * seconds))" --num-calls 1 --timeout 5 >"$tmp/httperf.out" 2>&1 || true
	stop_apache
	apache_httperf=$(grep 'src=httperf' "$tmp/apache-httperf-$1.log" | "$tmp/intervalerr" --json)
	httperf_p5+=("$(field "$apache_httperf" p99999)")
}
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
crawl_p5=() httperf_p5=()
for round in $(seq 1 "$ROUNDS"); do
	echo "== (2) round $round: rtprobe crawl and httperf --rate $RPS --wlog, each alone -> Apache, $DURATION" >&2
	if ((round % 2)); then run_crawl "$round"; run_httperf "$round"; else run_httperf "$round"; run_crawl "$round"; fi
	echo "   round $round p99.999: crawl ${crawl_p5[-1]} us, httperf ${httperf_p5[-1]} us" >&2
done

echo
echo "interval error and send lateness, microseconds ($DURATION at $RPS rps, loopback)"
printf '%-34s %8s %8s %8s %8s %9s %9s\n' "measurement" count p50 p99 p99.9 p99.999 max
row "(1) crawl, Apache log (proxy)" "$apache_proxy"
row "(1) crawl, rtprobe gateway" "$gateway"
row "(1) crawl send lateness" "$(grep -o '"sendLateness":{[^}]*}' <<<"$crawl_1")"
row "(2) crawl, Apache log (last round)" "$apache_crawl"
row "(2) httperf, Apache log (last round)" "$apache_httperf"
row "(2) crawl send lateness (last round)" "$(grep -o '"sendLateness":{[^}]*}' <<<"$crawl_2")"
echo "(2) p99.999 per round, crawl: ${crawl_p5[*]}; httperf: ${httperf_p5[*]}"
echo
echo "counts: (1) Apache $(grep -o '"missing":[0-9]*,"duplicates":[0-9]*' <<<"$apache_proxy")," \
	"gateway $(grep -o '"missing":[0-9]*,"duplicates":[0-9]*' <<<"$gateway");" \
	"(2) crawl $(grep -o '"missing":[0-9]*,"duplicates":[0-9]*' <<<"$apache_crawl")," \
	"httperf $(grep -o '"missing":[0-9]*,"duplicates":[0-9]*' <<<"$apache_httperf")"
echo "crawl errors: (1) $(field "$crawl_1" errors), (2) $(field "$crawl_2" errors)"
grep -o '"firstError":"[^"]*"' <<<"$crawl_1$crawl_2" || true
grep -v 'AH00489\|AH00094\|AH00491' "$tmp/error.log" || true
echo "httperf: $(grep -E '^(Total|Request rate|Errors: total)' "$tmp/httperf.out" | tr '\n' ' ')"

# The issue's targets. "Agree" is read as: within 30% of the larger or 1 ms.
a999=$(field "$apache_proxy" p999)
g999=$(field "$gateway" p999)
a5=$(median "${crawl_p5[@]}")
h5=$(median "${httperf_p5[@]}")
echo
awk -v a="$a999" -v g="$g999" 'BEGIN {
	d = a - g; if (d < 0) d = -d; m = (a > g ? a : g)
	printf "target 1, same requests: Apache-log and gateway p99.9 agree (within 30%% or 1 ms): %s vs %s us -> %s\n", a, g, (d <= 0.3 * m || d <= 1000) ? "MET" : "NOT MET"
}'
awk -v a="$a5" -v h="$h5" 'BEGIN {
	printf "target 2, median over the rounds: rtprobe p99.999 (Apache log) no worse than httperf: %s vs %s us -> %s\n", a, h, (a <= h) ? "MET" : "NOT MET"
}'
echo
echo "raw JSON:"
printf '%s\n' "apache-proxy $apache_proxy" "gateway $gateway" "apache-crawl $apache_crawl" "apache-httperf $apache_httperf" "crawl-1 $crawl_1" "crawl-2 $crawl_2"
