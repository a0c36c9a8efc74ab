package slo

import (
	"fmt"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// State is what the controller observed of a crawler's probes.
type State struct {
	Now time.Time
	// VMIUID is the UID of the crawler's VMI when it is Running, runs the current spec
	// and is not moving; empty otherwise.
	VMIUID string
	// Node is the node that VMI runs on.
	Node string
	// Migration is the UID of the live migration that brought the VMI to Node, "" when it
	// started there (PlacedBy).
	Migration string
	// Active is the crawler's probe Job that has not finished, if any.
	Active *Active
	// Last is status.lastProbe.
	Last *isov1.ProbeResult
	// Requested is when someone asked for a probe now (Requested); zero for never.
	Requested time.Time
}

// Active is a probe Job that has not finished.
type Active struct {
	Name string
	Run  Run
	// Deleting is true once the Job is being deleted (it still holds its pod).
	Deleting bool
}

// Decision is what to do next. At most one of Start and Cancel is set.
type Decision struct {
	// Start is a run to create a Job for.
	Start *Run
	// Cancel deletes the active Job: it measures an outdated spec or VMI.
	Cancel bool
	// After is when to look again for the next scheduled run; 0 for no scheduled run.
	After time.Duration
}

// Next decides whether a probe starts, is cancelled, or when to look again. A probe
// runs after the VMI starts running, after each spec change, when asked for (a request
// newer than the last probe's start) and on spec.probe.schedule; never two at once: a
// new one waits until the active Job is gone. The error is an invalid
// spec.probe.schedule.
func Next(cvm *isov1.CrawlerVM, st State) (Decision, error) {
	sched, err := Schedule(cvm)
	if err != nil {
		return Decision{}, err
	}
	if a := st.Active; a != nil {
		if !a.Deleting && (st.VMIUID == "" || a.Run.VMIUID != st.VMIUID || a.Run.Generation != cvm.Generation || !sameNode(a.Run.Node, st.Node)) {
			return Decision{Cancel: true}, nil
		}
		return Decision{}, nil
	}
	if st.VMIUID == "" {
		return Decision{}, nil
	}
	if !Measured(cvm, st.Last, st.VMIUID, st.Node) {
		trigger := isov1.TriggerStart
		switch {
		case st.Last == nil || st.Last.VMIUID != st.VMIUID:
		case st.Last.ObservedGeneration != cvm.Generation:
			trigger = isov1.TriggerSpecChange
		default:
			trigger = isov1.TriggerMoved
		}
		return Decision{Start: &Run{Trigger: trigger, Generation: cvm.Generation, VMIUID: st.VMIUID, Node: st.Node, Migration: st.Migration}}, nil
	}
	// A failed or timed-out probe is tried again after its backoff, unless the schedule
	// or a request comes first.
	var next time.Time
	trigger := isov1.TriggerSchedule
	if sched != nil {
		next = sched.Next(st.Last.StartTime.Time)
	}
	if due, retry := RetryDue(st.Last); retry && (next.IsZero() || due.Before(next)) {
		next, trigger = due, isov1.TriggerRetry
	}
	if r := st.Requested; r.After(st.Last.StartTime.Time) && (next.IsZero() || !next.Before(r)) {
		next, trigger = r, isov1.TriggerRequested
	}
	if next.IsZero() {
		return Decision{}, nil
	}
	if !next.After(st.Now) {
		// Slots missed while the operator was away are not caught up: one run fills the
		// first of them, and the schedule continues from its start.
		return Decision{Start: &Run{Trigger: trigger, Generation: cvm.Generation, VMIUID: st.VMIUID, Node: st.Node, Migration: st.Migration, Slot: next.UTC()}}, nil
	}
	return Decision{After: next.Sub(st.Now)}, nil
}

// Retries of a failed or timed-out probe, or of one that received no traffic, wait
// RetryBackoff(n) after the n-th in a row: a minute, doubled each time, at most an hour.
// Such a probe says nothing of the SLO, so a crawler is not left unmeasured until its
// next schedule slot or spec change (a guest still booting when its first probe ran sends
// nothing: a few seconds on a real node, minutes on an emulated one); the doubling keeps
// a probe that cannot succeed (an image that cannot be pulled, no CPU for the probe pod,
// a guest without the agent) from loading the cluster, and the cap keeps trying hourly.
const (
	RetryBackoffBase = time.Minute
	RetryBackoffMax  = time.Hour
)

// RetryBackoff is the wait after the n-th failed or timed-out probe in a row (n >= 1).
func RetryBackoff(n int32) time.Duration {
	d := RetryBackoffBase
	for i := int32(1); i < n && d < RetryBackoffMax; i++ {
		d *= 2
	}
	return min(d, RetryBackoffMax)
}

// Retried says whether a probe with result r is tried again after a backoff: it failed,
// timed out, or received no traffic.
func Retried(r *isov1.ProbeResult) bool {
	return r.Verdict == isov1.VerdictFailed || r.Verdict == isov1.VerdictTimedOut ||
		(r.Verdict == isov1.VerdictInconclusive && r.Reason == isov1.ReasonNoTraffic)
}

// RetryDue is when a probe after last is due, when last is retried (Retried).
func RetryDue(last *isov1.ProbeResult) (time.Time, bool) {
	if last == nil || last.ConsecutiveFailures < 1 || last.CompletionTime == nil || !Retried(last) {
		return time.Time{}, false
	}
	return last.CompletionTime.Add(RetryBackoff(last.ConsecutiveFailures)), true
}

// Measured reports whether last measured the crawler's current spec on the VMI vmiUID on
// node (a live migration moves the same VMI to another node, where it is measured anew).
func Measured(cvm *isov1.CrawlerVM, last *isov1.ProbeResult, vmiUID, node string) bool {
	return last != nil && last.ObservedGeneration == cvm.Generation && last.VMIUID == vmiUID && sameNode(last.Node, node)
}

// sameNode says whether a probe of node a measured node b; a probe that recorded no node
// (a release before live migrations) measured wherever its VMI runs.
func sameNode(a, b string) bool { return a == "" || b == "" || a == b }

// Requested is when a probe was asked for on cvm (isov1.AnnotationProbeRequested), to
// the second: zero when it was not, or when the annotation is not an RFC 3339 time.
// Whole seconds, as a probe's start is recorded: a request within the second a probe
// started is that probe's.
func Requested(cvm *isov1.CrawlerVM) time.Time {
	v, ok := cvm.Annotations[isov1.AnnotationProbeRequested]
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Second)
}

// Schedule parses spec.probe.schedule (five cron fields or a descriptor such as @daily,
// in UTC); nil when it is empty.
func Schedule(cvm *isov1.CrawlerVM) (cron.Schedule, error) {
	if cvm.Spec.Probe == nil || cvm.Spec.Probe.Schedule == "" {
		return nil, nil
	}
	s, err := cron.ParseStandard(cvm.Spec.Probe.Schedule)
	if err != nil {
		return nil, fmt.Errorf("spec.probe.schedule %q is not a valid cron schedule (%w); use five fields, minute hour day-of-month month day-of-week, for example \"0 3 * * *\"", cvm.Spec.Probe.Schedule, err)
	}
	return s, nil
}

// PlacedBy is the UID of the live migration that brought vmi to the node it runs on, ""
// when it started there: the last migration KubeVirt reports, if it completed onto that
// node.
func PlacedBy(vmi *kubevirtv1.VirtualMachineInstance) string {
	m := vmi.Status.MigrationState
	if m == nil || !m.Completed || m.Failed || m.TargetNode != vmi.Status.NodeName {
		return ""
	}
	return string(m.MigrationUID)
}

// RunOf reads the run a probe Job was created for from its annotations.
func RunOf(job *batchv1.Job) (Run, error) {
	a := job.Annotations
	gen, err := strconv.ParseInt(a[isov1.AnnotationProbeGeneration], 10, 64)
	if err != nil {
		return Run{}, fmt.Errorf("probe Job %s: annotation %s: %w", job.Name, isov1.AnnotationProbeGeneration, err)
	}
	run := Run{Trigger: isov1.ProbeTrigger(a[isov1.AnnotationProbeTrigger]), Generation: gen, VMIUID: a[isov1.AnnotationProbeVMIUID],
		Node: a[isov1.AnnotationProbeNode], Migration: a[isov1.AnnotationProbeMigration]}
	if s, ok := a[isov1.AnnotationProbeSlot]; ok {
		if run.Slot, err = time.Parse(time.RFC3339, s); err != nil {
			return Run{}, fmt.Errorf("probe Job %s: annotation %s: %w", job.Name, isov1.AnnotationProbeSlot, err)
		}
	}
	return run, nil
}
