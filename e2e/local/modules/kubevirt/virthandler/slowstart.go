// Package virthandler holds isochron's change to KubeVirt's virt-handler for the local
// e2e cluster: patch.sh copies slowstart.go into the copy of kubevirt.io/kubevirt's
// pkg/virt-handler it builds from, and makes vm.go call domainMayStillBeStarting.
//
// Why: virt-handler's SyncVMI call to the launcher times out after 20 s (cmd-client's
// longTimeout). On a node VM under emulation a launcher's first define and start took
// longer (define about 10 s, start 11-16 s). The next sync pass then saw the domain
// defined but Shutoff, deleted it as inactive ("Deleting inactive domain for vmi"),
// the launcher's sidecars exited and the VMI failed ("containerdisk still not ready
// after one minute"): 8 of 18 launcher pods in one whole e2e run (docs/dev/e2e.md).
// KubeVirt issue #17367 reports the same race; pull request #18545, merged after
// v1.9.0, fixes it the same way: while the VMI is Scheduled and the domain Shutoff
// with no reason yet, deletion waits, for a bounded time.
package virthandler

import (
	"time"

	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
)

// slowStartupWindow bounds how long a Scheduled VMI's Shutoff domain is left alone:
// past it the domain is deleted as before, so a launcher that never starts its domain
// still fails its VMI.
const slowStartupWindow = 5 * time.Minute

// slowStartupRecheck is how soon virt-handler looks again at a domain it left alone.
const slowStartupRecheck = 5 * time.Second

// domainMayStillBeStarting says whether a domain that is not alive may be one whose
// start is still under way: the VMI is Scheduled (never Running), the domain Shutoff
// for no reason libvirt reported (Unknown or empty, as a defined, not yet started
// domain is; Crashed, Failed, Destroyed and the rest are outcomes), and the VMI was
// scheduled less than slowStartupWindow before now. A VMI without a Scheduled
// timestamp is not deferred.
func domainMayStillBeStarting(vmi *v1.VirtualMachineInstance, domain *api.Domain, now time.Time) bool {
	if vmi == nil || domain == nil || !vmi.IsScheduled() || domain.Status.Status != api.Shutoff {
		return false
	}
	if r := domain.Status.Reason; r != api.ReasonUnknown && r != "" {
		return false
	}
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == v1.Scheduled {
			return now.Sub(t.PhaseTransitionTimestamp.Time) < slowStartupWindow
		}
	}
	return false
}
