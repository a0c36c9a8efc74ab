package readiness

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// DefaultReleaseAfter is how long a crawler may be down, stopped by a person or with its
// launcher refused by the API server, before it gives up its reservation: long enough
// for a restart by hand or a quota raised while someone looks, short against the
// real-time CPUs it keeps from other crawlers meanwhile.
const DefaultReleaseAfter = 10 * time.Minute

// Released says whether the crawler's reservation was released (Placed=False, Released):
// it holds none until a launcher of it exists again.
func Released(conditions []metav1.Condition) bool {
	c := apimeta.FindStatusCondition(conditions, isov1.ConditionPlaced)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == isov1.ReasonReleased
}

// DownSince is when a crawler that is not Ready went down: the start of its open outage
// (one that ran and stopped), else, for one that never ran, when KubeVirt first failed
// to create its launcher (vmi's Synchronized condition), else when its Ready condition
// last turned. Zero when it is Ready.
func DownSince(ready *metav1.Condition, outages []isov1.Outage, vmi *kubevirtv1.VirtualMachineInstance) time.Time {
	if ready == nil || ready.Status == metav1.ConditionTrue {
		return time.Time{}
	}
	if len(outages) > 0 && outages[0].End == nil {
		return outages[0].Start.Time
	}
	if vmi != nil {
		for _, c := range vmi.Status.Conditions {
			if c.Type == kubevirtv1.VirtualMachineInstanceSynchronized && c.Status == corev1.ConditionFalse && c.Reason == FailedCreate && !c.LastTransitionTime.IsZero() {
				return c.LastTransitionTime.Time
			}
		}
	}
	return ready.LastTransitionTime.Time
}

// Release decides whether a crawler that holds a reservation gives it up: it has been down
// (since) for after because a person stopped it (VMStopped) or the API server refuses its
// launcher (LauncherRefused), so that nothing runs on what it holds and nothing isochron
// or KubeVirt does brings it back. Any other reason keeps it: a crawler KubeVirt restarts,
// moves or waits for is coming back. wait is how long until then, for a crawler down for
// such a reason.
func Release(ready *metav1.Condition, since, now time.Time, after time.Duration) (release bool, wait time.Duration) {
	if ready == nil || ready.Status == metav1.ConditionTrue || since.IsZero() {
		return false, 0
	}
	if ready.Reason != isov1.ReasonVMStopped && ready.Reason != isov1.ReasonLauncherRefused {
		return false, 0
	}
	if w := since.Add(after).Sub(now); w > 0 {
		return false, w
	}
	return true, 0
}
