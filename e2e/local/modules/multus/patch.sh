#!/bin/sh
# patch.sh DIR: copy Multus' module (the version go.mod requires) to DIR/multus-cni and
# write DIR/go.mod and DIR/go.sum replacing Multus by the copy (../copy-module.sh), then
# change one line of the copy's pkg/multus/multus.go, for `go build -modfile DIR/go.mod`.
#
# The change is the one k8snetworkplumbingwg/multus-cni#1453 proposes for issue #1461
# ("The kubernetes API timeout value is too short"; unmerged, in v4.2.3 and on master
# as of Nov 2026): the last try to read the pod, the live query after the poll, waits
# shortPollTimeout (2.5 s) instead of pollDuration (250 ms). On a node VM under
# emulation a fresh plugin process does not finish its TLS handshake with the API
# server within 250 ms: a launcher or probe pod's sandbox failed with "error waiting for
# pod: ... context deadline exceeded" and its retry cost about 40 s (session 16:
# scheduled 00:49:43, failed 00:50:05, its network up 00:50:24).
# Run from the module directory e2e/local/modules/multus.
set -eu
out=$1
mod=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
../copy-module.sh "$mod" "$out" multus-cni
f="$out/multus-cni/pkg/multus/multus.go"
perl -0pi -e 's/context\.WithTimeout\(context\.TODO\(\), pollDuration\)(\n\s*defer cancel\(\)\n\s*pod, err = kubeClient\.GetPodAPILiveQuery)/context.WithTimeout(context.TODO(), shortPollTimeout)$1/' "$f"
if [ "$(grep -c 'WithTimeout(context.TODO(), shortPollTimeout)' "$f")" != 1 ]; then
  echo "patch.sh: $mod's pkg/multus/multus.go has no live query of the pod to patch (Multus changed): review the patch" >&2
  exit 1
fi
