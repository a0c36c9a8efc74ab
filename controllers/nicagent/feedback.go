package nicagent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/rtnet"
)

// FlowStats is what the host's schedule counted for one flow's class.
type FlowStats struct {
	// Drops is the packets of the class dropped since the schedule was programmed.
	Drops uint64
}

// feedbackOf is a crawler's feedback state from its status; a status for another
// deadline is none.
func feedbackOf(c *isov1.CrawlerVM) rtnet.FeedbackState {
	n := c.Status.RTNIC
	if n == nil || c.Spec.RTNIC == nil || n.Deadline.Duration != c.Spec.RTNIC.Deadline.Duration {
		return rtnet.FeedbackState{}
	}
	s := rtnet.FeedbackState{Raise: int(n.Raise), Deadline: n.Deadline.Duration, Clean: int(n.Clean), Evidence: n.Evidence, Message: n.Message}
	if n.LastChange != nil {
		s.LastChange = n.LastChange.Time
	}
	return s
}

// statusOf is the status.rtNIC of a feedback state.
func statusOf(s rtnet.FeedbackState) *isov1.RTNICStatus {
	out := &isov1.RTNICStatus{
		Class: rtnet.ForDeadline(s.Deadline, s.Raise).DSCP.Name, Raise: int32(s.Raise), Deadline: metav1.Duration{Duration: s.Deadline},
		Clean: int32(s.Clean), Evidence: s.Evidence, Message: s.Message,
	}
	if !s.LastChange.IsZero() {
		out.LastChange = &metav1.Time{Time: s.LastChange}
	}
	return out
}

// observations are what the agent sees of a flow: its last probe's round trips, and
// packets of its class the host dropped since the last reading (prev, when known).
func observations(c *isov1.CrawlerVM, link string, now FlowStats, prev *FlowStats) []rtnet.Observation {
	var out []rtnet.Observation
	if p := c.Status.LastProbe; p != nil && p.RTNIC != nil && p.Job != "" {
		rt := p.RTNIC
		out = append(out, rtnet.Observation{ID: "probe/" + p.Job, Missed: rt.Misses > 0,
			Detail: fmt.Sprintf("probe %s: %d of %d round trips missed the %s deadline, longest %s",
				p.Job, rt.Misses, rt.Sent, format.Duration(rt.Deadline.Duration), format.Duration(rt.Max.Duration))})
	}
	if prev != nil && now.Drops > prev.Drops {
		out = append(out, rtnet.Observation{Missed: true,
			Detail: fmt.Sprintf("the host dropped %d packets of its class on %s", now.Drops-prev.Drops, link)})
	}
	return out
}

// feedback runs the feedback on a crawler's observations and writes status.rtNIC with
// what the host does for it (host) when it changed (server-side apply of that one field,
// the agent its only owner); a change of class, and the host starting to schedule none
// of its traffic, are Events on the crawler.
func (r *Reconciler) feedback(ctx context.Context, c *isov1.CrawlerVM, obs []rtnet.Observation, host hostState) error {
	s := feedbackOf(c)
	s.Deadline = c.Spec.RTNIC.Deadline.Duration
	for _, o := range obs {
		var change rtnet.Change
		s, change = r.Feedback.Next(s, o, c.Spec.RTNIC.Deadline.Duration, r.Clock.Now())
		switch change {
		case rtnet.Raised:
			r.Recorder.Event(c, corev1.EventTypeWarning, isov1.EventReasonRTNICRaised, "RT-NIC "+s.Message)
		case rtnet.Lowered:
			r.Recorder.Event(c, corev1.EventTypeNormal, isov1.EventReasonRTNICLowered, "RT-NIC "+s.Message)
		}
	}
	want := statusOf(s)
	want.Uplink, want.NotScheduled = host.uplink, host.notScheduled
	if equality.Semantic.DeepEqual(c.Status.RTNIC, want) {
		return nil
	}
	if host.notScheduled != "" && (c.Status.RTNIC == nil || c.Status.RTNIC.NotScheduled != host.notScheduled) {
		r.Recorder.Event(c, corev1.EventTypeWarning, isov1.EventReasonRTNICNotScheduled, "RT-NIC: "+host.notScheduled)
	}
	field, err := runtime.DefaultUnstructuredConverter.ToUnstructured(want)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"rtNIC": field}}}
	u.SetGroupVersionKind(isov1.GroupVersion.WithKind("CrawlerVM"))
	u.SetNamespace(c.Namespace)
	u.SetName(c.Name)
	if err := r.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(isov1.NICAgent), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying status.rtNIC of %s/%s: %w", c.Namespace, c.Name, err)
	}
	return nil
}
