package virthandler

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
)

func TestDomainMayStillBeStarting(t *testing.T) {
	now := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	vmi := func(phase v1.VirtualMachineInstancePhase, scheduledAgo time.Duration) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: phase}}
		if scheduledAgo >= 0 {
			v.Status.PhaseTransitionTimestamps = []v1.VirtualMachineInstancePhaseTransitionTimestamp{
				{Phase: v1.Pending, PhaseTransitionTimestamp: metav1.NewTime(now.Add(-scheduledAgo - time.Minute))},
				{Phase: v1.Scheduled, PhaseTransitionTimestamp: metav1.NewTime(now.Add(-scheduledAgo))},
			}
		}
		return v
	}
	domain := func(status api.LifeCycle, reason api.StateChangeReason) *api.Domain {
		d := &api.Domain{}
		d.Status.Status, d.Status.Reason = status, reason
		return d
	}
	for _, tc := range []struct {
		name   string
		vmi    *v1.VirtualMachineInstance
		domain *api.Domain
		want   bool
	}{
		{"defined, not started, 30 s after scheduling", vmi(v1.Scheduled, 30*time.Second), domain(api.Shutoff, api.ReasonUnknown), true},
		{"no reason yet", vmi(v1.Scheduled, 30*time.Second), domain(api.Shutoff, ""), true},
		{"just inside the window", vmi(v1.Scheduled, slowStartupWindow-time.Second), domain(api.Shutoff, api.ReasonUnknown), true},
		{"window over: deleted as before", vmi(v1.Scheduled, slowStartupWindow), domain(api.Shutoff, api.ReasonUnknown), false},
		{"crashed at start is an outcome", vmi(v1.Scheduled, 30*time.Second), domain(api.Shutoff, api.ReasonCrashed), false},
		{"failed at start is an outcome", vmi(v1.Scheduled, 30*time.Second), domain(api.Shutoff, api.ReasonFailed), false},
		{"destroyed is an outcome", vmi(v1.Scheduled, 30*time.Second), domain(api.Shutoff, api.ReasonDestroyed), false},
		{"crashed domain", vmi(v1.Scheduled, 30*time.Second), domain(api.Crashed, api.ReasonUnknown), false},
		{"a Running VMI's Shutoff domain is not starting", vmi(v1.Running, 30*time.Second), domain(api.Shutoff, api.ReasonUnknown), false},
		{"no Scheduled timestamp", vmi(v1.Scheduled, -1), domain(api.Shutoff, api.ReasonUnknown), false},
		{"no domain", vmi(v1.Scheduled, 30*time.Second), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := domainMayStillBeStarting(tc.vmi, tc.domain, now); got != tc.want {
				t.Fatalf("domainMayStillBeStarting = %v, want %v", got, tc.want)
			}
		})
	}
}
