#!/usr/bin/env bash
# The CPU the probe agent costs a guest during a probe window (docs/probes.md): rtprobe
# slo announces a window at RPS (default 1000) for DURATION_S seconds (default 60) on
# loopback, rtprobe agent crawls it, and the agent's user and system CPU time over the
# window is read from /proc/<pid>/stat (both with a probe key, as isochron runs them: the
# agent sends its token with every request and the gateway checks each), the bytes it wrote and read from /proc/<pid>/io,
# and the bytes and packets that crossed loopback (requests, answers, ACKs and the
# window polls: the probe's traffic on the wire) from /proc/net/dev. ROUNDS (default 2)
# repeats it.
#
# Usage: hack/probe-compare/agent-cost.sh   (env RPS, DURATION_S, ROUNDS)
set -euo pipefail
cd "$(dirname "$0")/../.."
rps=${RPS:-1000} duration=${DURATION_S:-60} rounds=${ROUNDS:-2}
tmp=$(mktemp -d)
trap 'kill "$agent" 2>/dev/null || true; rm -rf "$tmp"' EXIT
"${GO:-go}" build -o "$tmp/rtprobe" ./cmd/rtprobe
port=$((20000 + RANDOM % 10000))
ISOCHRON_PROBE_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export ISOCHRON_PROBE_KEY
(umask 077; echo "$ISOCHRON_PROBE_KEY" >"$tmp/probe-key")
"$tmp/rtprobe" agent --gateway "http://127.0.0.1:$port" --key-file "$tmp/probe-key" --poll 1s >"$tmp/agent.out" 2>"$tmp/agent.err" &
agent=$!
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{ printf "%.2f %.2f", $14 / t, $15 / t }' "/proc/$agent/stat"; }
io() { awk '$1 == "rchar:" { r = $2 } $1 == "wchar:" { w = $2 } END { print w, r }' "/proc/$agent/io"; }
lo() { awk -F'[: ]+' '$2 == "lo" { print $3, $4 }' /proc/net/dev; }
echo "agent-cost: rtprobe agent crawling ${rps} rps for ${duration} s, ${rounds} rounds ($(nproc) CPUs, $(uname -r))"
for ((r = 1; r <= rounds; r++)); do
  read -r u0 s0 <<<"$(cpu)"
  read -r w0 r0 <<<"$(io)"
  read -r b0 p0 <<<"$(lo)"
  "$tmp/rtprobe" slo --listen "127.0.0.1:$port" --period 1s --delay 10ms --duration "${duration}s" \
    --crawl-rps "$rps" --key-env ISOCHRON_PROBE_KEY --report "$tmp/report.json" >/dev/null 2>"$tmp/slo.err"
  sleep 2 # the agent's last requests and its log line
  read -r u1 s1 <<<"$(cpu)"
  read -r w1 r1 <<<"$(io)"
  read -r b1 p1 <<<"$(lo)"
  requests=$(grep -o '"requests":[0-9]*' "$tmp/report.json" | head -1 | cut -d: -f2)
  awk -v u0="$u0" -v u1="$u1" -v s0="$s0" -v s1="$s1" -v n="$requests" -v d="$duration" -v r="$r" \
    'BEGIN { u = u1 - u0; s = s1 - s0
      printf "round %d: %d requests; agent CPU %.2f s user + %.2f s system = %.1f us per request, %.1f%% of one CPU over the window\n", r, n, u, s, (u + s) / n * 1e6, (u + s) / d * 100 }'
  awk -v w="$((w1 - w0))" -v rd="$((r1 - r0))" -v b="$((b1 - b0))" -v p="$((p1 - p0))" -v n="$requests" -v d="$duration" \
    'BEGIN { printf "         agent wrote %.0f and read %.0f bytes per request; loopback carried %.0f bytes in %.1f packets per request, %.2f Mbit/s\n", w / n, rd / n, b / n, p / n, b * 8 / d / 1e6 }'
done
