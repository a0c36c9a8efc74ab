#!/usr/bin/env bash
# The CPU the probe agent costs inside a guest (docs/probes.md): the e2e guest (Debian's
# kernel and e2e/guest as PID 1) boots under QEMU's software emulation (TCG) with the
# agent's disk and a NoCloud disk whose user data is isochron's agent part, exactly the
# disks a VMI gets; the guest finds and starts the agent as it does in the e2e cluster.
# rtprobe slo on this machine announces a window at RPS (default 1000) for DURATION_S
# seconds (default 60), reached from the guest through QEMU's user network; the agent
# reports what the window cost its process, from getrusage(2) inside the guest, on the
# serial console. The QEMU process's own CPU over the window (the whole emulated VM, on
# this machine) is read from /proc/<pid>/stat beside it.
#
# Under TCG every guest instruction is translated, so the guest's figure is an upper
# bound, inflated by the emulation; docs/probes.md puts it next to the native one.
#
# Usage: hack/probe-compare/agent-cost-guest.sh DISK.img AGENT.img
#        (env RPS, DURATION_S, GUEST_CPUS (default 1), GUEST_MEMORY_MB (default 512))
set -euo pipefail
cd "$(dirname "$0")/../.."
die() { echo "agent-cost-guest: $*" >&2; exit 1; }
[[ $# -eq 2 ]] || die "usage: $0 DISK.img AGENT.img"
disk=$1 agent_img=$2
[[ -f $disk && -f $agent_img ]] || die "$disk or $agent_img is missing: make probe-agent-cost-guest builds both"
rps=${RPS:-1000} duration=${DURATION_S:-60} cpus=${GUEST_CPUS:-1} memory=${GUEST_MEMORY_MB:-512}

tmp=$(mktemp -d)
qemu=
trap '[[ -n $qemu ]] && kill "$qemu" 2>/dev/null; rm -rf "$tmp"' EXIT
"${GO:-go}" build -o "$tmp/rtprobe" ./cmd/rtprobe
port=$((20000 + RANDOM % 10000))

# The NoCloud disk: isochron's part of the user data as the renderer writes it
# (internal/render/cloudinit.go), its gateway this machine as QEMU's user network shows
# it to the guest (10.0.2.1), with a probe key that rtprobe slo checks too.
ISOCHRON_PROBE_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export ISOCHRON_PROBE_KEY
mkdir "$tmp/cidata"
cat >"$tmp/cidata/user-data" <<EOF
#!/bin/sh
# isochron: probe agent (docs/probes.md)
k=$ISOCHRON_PROBE_KEY
a="agent --gateway=http://10.0.2.1:$port --key-file=/etc/isochron/probe-key"
EOF
printf 'instance-id: agent-cost\nlocal-hostname: agent-cost\n' >"$tmp/cidata/meta-data"
xorriso -as mkisofs -quiet -V cidata -J -r -o "$tmp/cidata.iso" "$tmp/cidata" 2>/dev/null

# The e2e guest's disk boots with 10.0.2.2/24 via 10.0.2.1 (KubeVirt's masquerade
# addresses); QEMU's user network is given the same. SeaBIOS boots the first disk only
# when told to (bootindex): the other two are not bootable.
qemu-system-x86_64 -accel tcg -smp "$cpus" -m "$memory" -display none -monitor none -no-reboot \
  -serial "file:$tmp/console.log" \
  -drive "file=$disk,format=raw,if=none,snapshot=on,id=boot" -device virtio-blk-pci,drive=boot,bootindex=0 \
  -drive "file=$agent_img,format=raw,if=none,readonly=on,id=agent" -device virtio-blk-pci,drive=agent,serial=isochron-agent \
  -drive "file=$tmp/cidata.iso,format=raw,if=virtio,readonly=on" \
  -netdev "user,id=net0,net=10.0.2.0/24,host=10.0.2.1,dns=10.0.2.3,dhcpstart=10.0.2.15" \
  -device virtio-net-pci,netdev=net0 &
qemu=$!

wait_for() { # PATTERN SECONDS: wait until the console shows PATTERN
  local deadline=$((SECONDS + $2))
  until grep -q "$1" "$tmp/console.log" 2>/dev/null; do
    kill -0 "$qemu" 2>/dev/null || { cat "$tmp/console.log" >&2; die "QEMU exited"; }
    ((SECONDS < deadline)) || { cat "$tmp/console.log" >&2; die "no '$1' on the guest's console in $2 s"; }
    sleep 1
  done
}
wait_for 'agent: /isochron-agent' 300
grep -m1 'isochron-e2e-guest: up' "$tmp/console.log"

tck=$(getconf CLK_TCK)
qemu_cpu() { awk -v t="$tck" '{ printf "%.2f %.2f", $14 / t, $15 / t }' "/proc/$qemu/stat"; }
echo "agent-cost-guest: the agent in the e2e guest (TCG, $cpus vCPU, ${memory} MiB) crawling ${rps} rps for ${duration} s; this machine: $(nproc) CPUs, $(uname -r)"
read -r u0 s0 <<<"$(qemu_cpu)"
"$tmp/rtprobe" slo --listen "127.0.0.1:$port" --period 1s --delay 10ms --duration "${duration}s" \
  --crawl-rps "$rps" --key-env ISOCHRON_PROBE_KEY --report "$tmp/report.json" >/dev/null 2>"$tmp/slo.err" || { cat "$tmp/slo.err" >&2; die "rtprobe slo failed"; }
read -r u1 s1 <<<"$(qemu_cpu)"
wait_for 'agent: window of' 60
requests=$(grep -o '"requests":[0-9]*' "$tmp/report.json" | head -1 | cut -d: -f2)
intervals=$(grep -o '"intervals":[0-9]*' "$tmp/report.json" | head -1 | cut -d: -f2)
echo "gateway: ${requests:-0} requests arrived, ${intervals:-0} intervals counted"
echo "in the guest: $(grep -m1 'agent: window of' "$tmp/console.log" | tr -d '\r')"
awk -v u0="$u0" -v u1="$u1" -v s0="$s0" -v s1="$s1" -v n="${requests:-0}" -v d="$duration" \
  'BEGIN { u = u1 - u0; s = s1 - s0
    printf "on this machine: QEMU (the whole emulated VM) %.2f s user + %.2f s system = %.1f%% of one CPU", u, s, (u + s) / d * 100
    if (n > 0) printf ", %.1f us per request", (u + s) / n * 1e6
    printf "\n" }'
