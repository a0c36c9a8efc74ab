// Package kubelet plays, in tests on a real API server, the parts no test cluster runs:
// the kubelet ending a probe pod (with rtprobe's termination message) and virt-handler
// reporting a VMI's phase (package virtsim plays KubeVirt's controllers).
package kubelet

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"isochron.io/isochron/probes/gateway"
	"isochron.io/isochron/probes/interval"
	"isochron.io/isochron/probes/report"
	"isochron.io/isochron/probes/rtt"
	"isochron.io/isochron/probes/stats"
)

// SetVMIPhase reports a VMI's phase, and the node it runs on, as virt-controller and
// virt-handler would: the phase's transition time, and for a running VMI the
// LiveMigratable condition virt-handler computes (True: isochron's VMIs have nothing
// that stops a migration). The VMI is read again when someone else changed it meanwhile
// (KubeVirt's VM controller adopting or annotating it); the interfaces the caller set
// in vmi's status are reported too. vmi ends as written.
func SetVMIPhase(ctx context.Context, c client.Client, vmi *kubevirtv1.VirtualMachineInstance, phase kubevirtv1.VirtualMachineInstancePhase, node string) error {
	uid, ifaces := vmi.UID, vmi.Status.Interfaces
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
			return err
		}
		if len(ifaces) > 0 {
			vmi.Status.Interfaces = ifaces
		}
		if vmi.UID != uid {
			return fmt.Errorf("VMI %s was replaced (uid %s, was %s)", vmi.Name, vmi.UID, uid)
		}
		vmi.Status.Phase = phase
		vmi.Status.NodeName = node
		vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
			kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.Now()})
		if phase == kubevirtv1.Running {
			setCondition(vmi, kubevirtv1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue, "", "")
		}
		return c.Update(ctx, vmi)
	})
	if err != nil {
		return fmt.Errorf("setting the phase of VMI %s: %w", vmi.Name, err)
	}
	return nil
}

// SetLiveMigratable reports whether the VMI can be live-migrated, as virt-handler does
// (calculateLiveMigrationCondition): False with its reason (for example
// InterfaceNotLiveMigratable) and message.
func SetLiveMigratable(ctx context.Context, c client.Client, vmi *kubevirtv1.VirtualMachineInstance, ok bool, reason, message string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
			return err
		}
		status := corev1.ConditionTrue
		if !ok {
			status = corev1.ConditionFalse
		}
		setCondition(vmi, kubevirtv1.VirtualMachineInstanceIsMigratable, status, reason, message)
		return c.Update(ctx, vmi)
	})
}

func setCondition(vmi *kubevirtv1.VirtualMachineInstance, typ kubevirtv1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus, reason, message string) {
	c := kubevirtv1.VirtualMachineInstanceCondition{Type: typ, Status: status, Reason: reason, Message: message}
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == typ {
			vmi.Status.Conditions[i] = c
			return
		}
	}
	vmi.Status.Conditions = append(vmi.Status.Conditions, c)
}

// FinishPod reports the end of a probe pod's rtprobe container as the kubelet would,
// with its termination message.
func FinishPod(ctx context.Context, c client.Client, pod *corev1.Pod, exitCode int32, message string) error {
	phase := corev1.PodSucceeded
	if exitCode != 0 {
		phase = corev1.PodFailed
	}
	now := metav1.Now()
	pod.Status.Phase = phase
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name:  "rtprobe",
		Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exitCode, Message: message, StartedAt: now, FinishedAt: now,
		}},
	}}
	if err := c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("reporting the end of probe pod %s: %w", pod.Name, err)
	}
	return nil
}

// ProbeReport is rtprobe's report of n intervals with atUs microseconds of error at the
// objective (99.999) and over of them past the tolerance and, if sent > 0, of round trips
// of which late missed the deadline.
func ProbeReport(n int64, atUs float64, over, sent, late int64) (string, error) {
	now := time.Now().UTC()
	r := report.Report{Version: report.Version, Start: now.Add(-10 * time.Second), End: now, Objective: 99.999}
	r.Interval = &gateway.Result{
		Summary:       stats.Summary{Metric: gateway.Metric, Unit: "us", Count: n, Min: 3, P50: 150, P99: 900, P999: 1500, P99999: atUs, Max: atUs},
		Requests:      n,
		Counts:        interval.Counts{Arrivals: n, Points: 400, Intervals: n},
		AtObjective:   &atUs,
		OverTolerance: &over,
	}
	if sent > 0 {
		at := 1800.0
		s := stats.Summary{Metric: rtt.Metric, Unit: "us", Count: sent, P99: 700, P99999: at, Max: 6000}
		r.RTT = &rtt.Result{Summary: s.WithDeadline(5000, late), Sent: sent, Late: late, AtObjective: &at}
	}
	b, err := r.Marshal()
	return string(b), err
}
