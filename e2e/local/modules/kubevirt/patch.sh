#!/bin/sh
# patch.sh DIR: copy KubeVirt's module (the version go.mod requires) to DIR/kubevirt and
# write DIR/go.mod and DIR/go.sum replacing KubeVirt by the copy (../copy-module.sh), then
# add virthandler/slowstart.go to the copy's pkg/virt-handler and make its vm.go leave a
# Scheduled VMI's domain that may still be starting instead of deleting it as inactive,
# for `go build -modfile DIR/go.mod` (build-kubevirt.sh).
#
# The change is the one kubevirt/kubevirt#18545 makes (merged after v1.9.0) for issue
# #17367, written here for v1.8.4; why the local cluster needs it: virthandler/slowstart.go.
# It fails if vm.go no longer has the block it changes. Run from e2e/local/modules/kubevirt.
set -eu
out=$1
mod=kubevirt.io/kubevirt
../copy-module.sh "$mod" "$out" kubevirt
cp virthandler/slowstart.go "$out/kubevirt/pkg/virt-handler/isochron_slowstart.go"
f="$out/kubevirt/pkg/virt-handler/vm.go"
perl -0pi -e 's/\tif !domainAlive && domainExists && !vmi\.IsFinal\(\) \{\n\t\tc\.logger\.Object\(vmi\)\.V\(3\)\.Info\("Deleting inactive domain for vmi\."\)\n\t\tshouldDelete = true\n\t\}\n/\tif !domainAlive && domainExists && !vmi.IsFinal() {\n\t\tif domainMayStillBeStarting(vmi, domain, time.Now()) {\n\t\t\tc.logger.Object(vmi).Info("Domain is Shutoff with no reason while the VMI is Scheduled: it may still be starting, not deleting it yet.")\n\t\t\tc.queue.AddAfter(key, slowStartupRecheck)\n\t\t} else {\n\t\t\tc.logger.Object(vmi).V(3).Info("Deleting inactive domain for vmi.")\n\t\t\tshouldDelete = true\n\t\t}\n\t}\n/' "$f"
if [ "$(grep -c 'domainMayStillBeStarting(vmi, domain, time.Now())' "$f")" != 1 ]; then
  echo "patch.sh: $mod's pkg/virt-handler/vm.go has no inactive-domain deletion to patch (KubeVirt changed): review the patch" >&2
  exit 1
fi
