#!/usr/bin/env bash
# Compare rtprobe's crawler and gateway with Apache's own log and with httperf
# (issue 4): interval error at 1,000 rps for DURATION (default 60s), all on
# loopback. Needs apache2 and httperf (Debian). Prints a table.
#
#   hack/compare-interval.sh [DURATION]
set -euo pipefail

DURATION=${1:-60s}
RPS=1000
APACHE_PORT=${APACHE_PORT:-8081}
GATEWAY_PORT=${GATEWAY_PORT:-8082}
GO=${GO:-go}
MODULES=/usr/lib/apache2/modules

for tool in apache2 httperf; do
	command -v "$tool" >/dev/null || { echo "compare-interval: $tool not found; apt-get install -y apache2 httperf" >&2; exit 1; }
done

cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/isochron-compare.XXXXXX)
chmod 755 "$tmp"
apache_pid=""
cleanup() {
	if [[ -n "$apache_pid" ]]; then kill "$apache_pid" 2>/dev/null || true; wait "$apache_pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

"$GO" build -o "$tmp/rtprobe" ./cmd/rtprobe
"$GO" build -o "$tmp/intervalerr" ./hack/intervalerr

mkdir -p "$tmp/htdocs"
echo ok >"$tmp/htdocs/index.html"

start_apache() { # $1: log file
	cat >"$tmp/httpd.conf" <<CONF
ServerRoot $tmp
ServerName localhost
Listen 127.0.0.1:$APACHE_PORT
LoadModule mpm_event_module $MODULES/mod_mpm_event.so
LoadModule authz_core_module $MODULES/mod_authz_core.so
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

echo "== (a) rtprobe crawl -> Apache, $DURATION at $RPS rps" >&2
start_apache "$tmp/apache-crawl.log"
crawl_a=$("$tmp/rtprobe" crawl --target "http://127.0.0.1:$APACHE_PORT/index.html" --rps "$RPS" --duration "$DURATION" --json | tail -n1)
stop_apache
apache_crawl=$(grep -v 'point=warmup' "$tmp/apache-crawl.log" | "$tmp/intervalerr" --json)

echo "== (b) rtprobe crawl -> rtprobe gateway, $DURATION at $RPS rps" >&2
"$tmp/rtprobe" gateway --listen "127.0.0.1:$GATEWAY_PORT" --json >"$tmp/gateway.out" 2>"$tmp/gateway.err" &
gateway_pid=$!
for _ in $(seq 50); do
	curl -s "http://127.0.0.1:$GATEWAY_PORT/metrics" >/dev/null 2>&1 && break
	sleep 0.1
done
crawl_b=$("$tmp/rtprobe" crawl --target "http://127.0.0.1:$GATEWAY_PORT/" --rps "$RPS" --duration "$DURATION" --json | tail -n1)
sleep 0.5
kill -TERM "$gateway_pid"
wait "$gateway_pid" || true
gateway=$(tail -n1 "$tmp/gateway.out")

echo "== (c) httperf --rate $RPS --wlog -> Apache, $DURATION" >&2
# No --hog: past ~33,000 connections httperf --hog stopped sending (twice, here);
# without it, loopback reuses TIME_WAIT ports (net.ipv4.tcp_tw_reuse=2).
# The crawl's points in its order (point i at offset i ms), NUL-separated; wrapped.
for ((i = 0; i < RPS; i++)); do printf '/index.html?point=%d\0' "$i"; done >"$tmp/wlog"
seconds=${DURATION%s}
start_apache "$tmp/apache-httperf.log"
timeout "$((seconds + 60))" httperf --server 127.0.0.1 --port "$APACHE_PORT" --wlog "y,$tmp/wlog" \
	--rate "$RPS" --num-conns "$((RPS * seconds))" --num-calls 1 --timeout 5 >"$tmp/httperf.out" 2>&1 || true
stop_apache
apache_httperf=$(grep -v 'point=warmup' "$tmp/apache-httperf.log" | "$tmp/intervalerr" --json)

echo
echo "interval error and send lateness, microseconds ($DURATION at $RPS rps, loopback)"
printf '%-34s %8s %8s %8s %8s %9s %9s\n' "measurement" count p50 p99 p99.9 p99.999 max
row "rtprobe crawl, Apache log" "$apache_crawl"
row "rtprobe crawl, rtprobe gateway" "$gateway"
row "httperf, Apache log" "$apache_httperf"
row "(crawl lateness vs Apache)" "$(grep -o '"sendLateness":{[^}]*}' <<<"$crawl_a")"
row "(crawl lateness vs gateway)" "$(grep -o '"sendLateness":{[^}]*}' <<<"$crawl_b")"
echo
echo "counts: Apache/crawl $(grep -o '"missing":[0-9]*,"duplicates":[0-9]*' <<<"$apache_crawl")," \
	"gateway $(grep -o '"missing":[0-9]*,"duplicates":[0-9]*' <<<"$gateway")," \
	"Apache/httperf $(grep -o '"missing":[0-9]*,"duplicates":[0-9]*' <<<"$apache_httperf")"
echo "crawl errors: Apache $(field "$crawl_a" errors), gateway $(field "$crawl_b" errors)"
grep -o '"firstError":"[^"]*"' <<<"$crawl_a$crawl_b" || true
grep -v 'AH00489\|AH00094\|AH00491' "$tmp/error.log" || true
echo "httperf: $(grep -E '^(Total|Request rate|Errors: total)' "$tmp/httperf.out" | tr '\n' ' ')"

# The issue's targets. "Agree" is read as: within 30% of the larger or 1 ms.
a999=$(field "$apache_crawl" p999)
g999=$(field "$gateway" p999)
a5=$(field "$apache_crawl" p99999)
h5=$(field "$apache_httperf" p99999)
echo
awk -v a="$a999" -v g="$g999" 'BEGIN {
	d = a - g; if (d < 0) d = -d; m = (a > g ? a : g)
	printf "target 1, Apache-log and gateway p99.9 agree (within 30%% or 1 ms): %s vs %s us -> %s\n", a, g, (d <= 0.3 * m || d <= 1000) ? "MET" : "NOT MET"
}'
awk -v a="$a5" -v h="$h5" 'BEGIN {
	printf "target 2, rtprobe p99.999 (Apache log) no worse than httperf: %s vs %s us -> %s\n", a, h, (a <= h) ? "MET" : "NOT MET"
}'
echo
echo "raw JSON:"
printf '%s\n' "apache-crawl $apache_crawl" "gateway $gateway" "apache-httperf $apache_httperf" "crawl-apache $crawl_a" "crawl-gateway $crawl_b"
