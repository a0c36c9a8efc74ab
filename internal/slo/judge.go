package slo

import (
	"fmt"
	"math"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/render"
	"isochron.io/isochron/probes/agent"
	"isochron.io/isochron/probes/gateway"
	"isochron.io/isochron/probes/report"
)

// maxMessage bounds status.lastProbe.message (the schema allows 2048).
const maxMessage = 1024

// Finished reports whether job has finished and, if it failed, the Job controller's
// reason (DeadlineExceeded, BackoffLimitExceeded...) and message.
func Finished(job *batchv1.Job) (done, failed bool, reason, message string) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, false, "", ""
		case batchv1.JobFailed:
			return true, true, c.Reason, c.Message
		}
	}
	return false, false, "", ""
}

// TerminationMessage is the termination message of the rtprobe container in the
// newest of a Job's pods that has one, or "".
func TerminationMessage(pods []corev1.Pod) string {
	var msg string
	var at time.Time
	for i := range pods {
		for _, cs := range pods[i].Status.ContainerStatuses {
			t := cs.State.Terminated
			if cs.Name != "rtprobe" || t == nil || t.Message == "" {
				continue
			}
			if msg == "" || t.FinishedAt.After(at) {
				msg, at = t.Message, t.FinishedAt.Time
			}
		}
	}
	return msg
}

// Outcome turns a finished probe Job and its pod's termination message (of the pods
// ProbePods believes; ignored says why the others were not) into the crawler's
// lastProbe. A failed or timed-out Job is reported as such, never judged from a partial
// report. Requests the gateway did not count, for want of the crawler's credential, are
// told (foreignRequests, and the message) and change nothing else.
func Outcome(cvm *isov1.CrawlerVM, job *batchv1.Job, termination string, ignored []string, now time.Time) isov1.ProbeResult {
	run, _ := RunOf(job)
	res := isov1.ProbeResult{
		Job:                job.Name,
		Trigger:            run.Trigger,
		ObservedGeneration: run.Generation,
		VMIUID:             run.VMIUID,
		Node:               run.Node,
		StartTime:          job.CreationTimestamp,
		CompletionTime:     &metav1.Time{Time: now.UTC().Truncate(time.Second)},
	}
	_, failed, reason, message := Finished(job)
	rep, perr := report.Parse(termination)
	switch {
	case failed && reason == batchv1.JobReasonDeadlineExceeded:
		res.Verdict, res.Reason = isov1.VerdictTimedOut, isov1.ReasonProbeTimedOut
		res.Message = fmt.Sprintf("probe Job %s ran past its active deadline of %ds (spec.probe.duration %s plus the grace to start) and was stopped; nothing was judged",
			job.Name, ptrValue(job.Spec.ActiveDeadlineSeconds), format.Duration(ProbeDuration(cvm)))
	case failed:
		res.Verdict, res.Reason = isov1.VerdictFailed, isov1.ReasonProbeFailed
		why := termination
		if perr == nil && rep.Error != "" {
			why = rep.Error
		} else if perr == nil && rep.Interrupted {
			why = "interrupted before its duration ended"
		}
		if why == "" {
			why = strings.TrimSpace(reason + ": " + message)
		}
		res.Message = fmt.Sprintf("probe Job %s failed: %s; nothing was judged", job.Name, oneLine(why))
	case perr != nil:
		res.Verdict, res.Reason = isov1.VerdictFailed, isov1.ReasonProbeFailed
		res.Message = fmt.Sprintf("probe Job %s completed without a readable report: %v", job.Name, perr)
		if len(ignored) > 0 {
			res.Message += fmt.Sprintf(" (not believed: %s)", strings.Join(ignored, "; "))
		}
	default:
		res.Verdict, res.Reason, res.Message, res.IntervalError, res.RTNIC = Judge(cvm, rep)
	}
	if perr == nil && rep.Interval != nil {
		if n := rep.Interval.Foreign; n > 0 {
			res.ForeignRequests = n
			if rep.Interval.Count > 0 { // else the verdict's message says it already
				res.Message += fmt.Sprintf("; %d requests without the crawler's probe credential reached the gateway and were not counted", n)
			}
		}
		if n := rep.Interval.Untracked; n > 0 {
			res.Message += fmt.Sprintf("; %d requests of points beyond the %d the schedule has room for were not measured", n, rep.Interval.Points)
		}
	}
	res.Message = format.Truncate(res.Message, maxMessage)
	if Retried(&res) {
		res.ConsecutiveFailures = 1
		if prev := cvm.Status.LastProbe; prev != nil && prev.ObservedGeneration == res.ObservedGeneration &&
			prev.VMIUID == res.VMIUID && prev.ConsecutiveFailures > 0 {
			res.ConsecutiveFailures = prev.ConsecutiveFailures + 1
		}
	}
	return res
}

// Judge holds a probe's report against the crawler's error budget and RT-NIC deadline.
//
//   - Interval error: the gateway's interval error at the objective percentile must be
//     within the tolerance, over at least 1/(1-objective) intervals (10^5 for 99.999%),
//     or the percentile is only the maximum of too few samples.
//   - RT-NIC (with spec.rtNIC): round trips that missed the deadline or were lost may
//     be at most (100-objective)% of those sent, again over enough of them. A round trip
//     is two transfers, so this is a strict test of a one-way deadline.
//
// A refuted figure wins over an inconclusive one; Confirmed needs every part measured.
func Judge(cvm *isov1.CrawlerVM, rep report.Report) (isov1.ProbeVerdict, string, string, *isov1.MeasuredIntervalError, *isov1.MeasuredRoundTrips) {
	obj := cvm.Spec.ErrorBudget.ObjectivePercent()
	need := MinSamples(obj)
	tol := cvm.Spec.ErrorBudget.Tolerance.Duration
	pct := string(cvm.Spec.ErrorBudget.Objective)
	var refuted, inconclusive, met []string
	var refutedReason, inconclusiveReason string
	refute := func(reason, msg string) {
		if refutedReason == "" {
			refutedReason = reason
		}
		refuted = append(refuted, msg)
	}
	inconclude := func(reason, msg string) {
		if inconclusiveReason == "" {
			inconclusiveReason = reason
		}
		inconclusive = append(inconclusive, msg)
	}

	var ie *isov1.MeasuredIntervalError
	switch iv := rep.Interval; {
	case iv == nil || iv.Count == 0:
		ran := format.Duration(rep.End.Sub(rep.Start).Round(time.Second))
		switch {
		case iv != nil && iv.Foreign > 0:
			inconclude(isov1.ReasonNoTraffic, fmt.Sprintf("the probe gateway received no intervals with the crawler's probe credential in %s, and %d requests without it, which it did not count: a guest started by a release of isochron before probe credentials has no key (stop and start it: virtctl stop, virtctl start), and any other pod's requests count as nothing",
				ran, iv.Foreign))
		case Traffic(cvm) == gateway.TrafficCrawler:
			inconclude(isov1.ReasonNoTraffic, fmt.Sprintf("the probe gateway received no intervals in %s: the guest's crawler sent no copy of its requests while %s announced the window (spec.probe.traffic Crawler, docs/probes.md)",
				ran, agent.DefaultWindowFile))
		default:
			inconclude(isov1.ReasonNoTraffic, fmt.Sprintf("the probe gateway received no intervals in %s: isochron's agent in the guest did not send (is it running? systemctl status isochron-agent, or /var/log/isochron-agent.log; it needs cloud-init and the %s disk)",
				ran, render.VolumeAgent))
		}
	default:
		at := micros(value(iv.AtObjective))
		ie = &isov1.MeasuredIntervalError{
			Intervals: iv.Count, Missing: ptr.To(iv.Missing),
			P50: dur(micros(iv.P50)), P99: dur(micros(iv.P99)), P99999: dur(micros(iv.P99999)),
			AtObjective: dur(at), Max: dur(micros(iv.Max)), OverTolerance: iv.OverTolerance,
		}
		switch {
		case at > tol:
			refute(isov1.ReasonSLORefuted, fmt.Sprintf("p%s interval error %s exceeds the %s tolerance (%d intervals, %d requests missing)", pct, format.Duration(at), format.Duration(tol), iv.Count, iv.Missing))
		case iv.Count < need:
			inconclude(isov1.ReasonInsufficientSamples, fmt.Sprintf("%d intervals measured, p%s needs at least %d: make spec.probe.duration at least %s",
				iv.Count, pct, need, format.Duration(minDuration(need, iv.Count, rep.End.Sub(rep.Start)))))
		default:
			met = append(met, fmt.Sprintf("p%s interval error %s within the %s tolerance (%d intervals)", pct, format.Duration(at), format.Duration(tol), iv.Count))
		}
	}

	var rt *isov1.MeasuredRoundTrips
	if cvm.Spec.RTNIC != nil {
		deadline := cvm.Spec.RTNIC.Deadline.Duration
		switch r := rep.RTT; {
		case r == nil || r.Sent == 0:
			inconclude(isov1.ReasonRTNICNotMeasured, "RT-NIC round trips not measured: the VMI reports no IP address on its rt interface (it needs the QEMU guest agent) or the probe could not reach it")
		default:
			misses := r.Lost + r.Late
			rt = &isov1.MeasuredRoundTrips{
				Sent: r.Sent, Misses: misses, Lost: ptr.To(r.Lost), Deadline: metav1.Duration{Duration: deadline},
				P99: dur(micros(r.P99)), AtObjective: dur(micros(value(r.AtObjective))), Max: dur(micros(r.Max)),
			}
			allowed := int64(math.Floor(float64(r.Sent)*(100-obj)/100 + 1e-9))
			switch {
			case misses > allowed:
				refute(isov1.ReasonDeadlineMissed, fmt.Sprintf("%d of %d RT-NIC round trips missed the %s deadline (%d lost); p%s allows %d", misses, r.Sent, format.Duration(deadline), r.Lost, pct, allowed))
			case r.Sent < need:
				inconclude(isov1.ReasonInsufficientSamples, fmt.Sprintf("%d RT-NIC round trips, p%s needs at least %d", r.Sent, pct, need))
			default:
				met = append(met, fmt.Sprintf("%d of %d RT-NIC round trips missed the %s deadline (p%s allows %d)", misses, r.Sent, format.Duration(deadline), pct, allowed))
			}
		}
	}

	all := strings.Join(append(append(refuted, inconclusive...), met...), "; ")
	switch {
	case len(refuted) > 0:
		return isov1.VerdictRefuted, refutedReason, all, ie, rt
	case len(inconclusive) > 0:
		return isov1.VerdictInconclusive, inconclusiveReason, all, ie, rt
	}
	return isov1.VerdictConfirmed, isov1.ReasonSLOMet, all, ie, rt
}

// Condition is the SLOConfirmed condition for what is known: the last result if it
// measured the current spec on the running VMI, else whether a probe runs or waits.
func Condition(cvm *isov1.CrawlerVM, st State) (metav1.ConditionStatus, string, string) {
	if last := st.Last; st.VMIUID != "" && Measured(cvm, last, st.VMIUID, st.Node) {
		status := metav1.ConditionFalse
		if last.Verdict == isov1.VerdictConfirmed {
			status = metav1.ConditionTrue
		}
		msg := last.Message
		if due, retry := RetryDue(last); retry {
			msg = fmt.Sprintf("%s; the probe is tried again at %s (failure %d in a row, backoff %s)",
				msg, due.UTC().Format(time.RFC3339), last.ConsecutiveFailures, format.Duration(RetryBackoff(last.ConsecutiveFailures)))
		}
		return status, last.Reason, msg
	}
	running := st.Active != nil && !st.Active.Deleting && st.VMIUID != "" && st.Active.Run.VMIUID == st.VMIUID && st.Active.Run.Generation == cvm.Generation
	if last := st.Last; last != nil && last.Verdict == isov1.VerdictRefuted && last.ObservedGeneration == cvm.Generation {
		// A refutation of the current spec stays visible until a probe judges the crawler
		// where it runs now (it moved, or its VMI restarted).
		where := ""
		if last.Node != "" {
			where = " on node " + last.Node
		}
		next := "a probe will judge it where it runs now"
		switch {
		case running:
			next = fmt.Sprintf("probe Job %s measures it now", st.Active.Name)
		case st.Node != "":
			next = "a probe will judge it on node " + st.Node
		}
		return metav1.ConditionFalse, last.Reason, fmt.Sprintf("probe Job %s refuted the SLO%s: %s; %s", last.Job, where, last.Message, next)
	}
	switch {
	case running:
		return metav1.ConditionUnknown, isov1.ReasonProbeRunning, fmt.Sprintf("probe Job %s measures for %s", st.Active.Name, format.Duration(ProbeDuration(cvm)))
	case st.VMIUID == "":
		return metav1.ConditionUnknown, isov1.ReasonProbePending, "waiting for the VMI to run the current spec before probing"
	default:
		return metav1.ConditionUnknown, isov1.ReasonProbePending, "a probe of the current spec will start"
	}
}

// MinSamples is the fewest samples whose objective percentile is not simply their
// maximum: ceil(100 / (100 - objective)), 100000 for 99.999.
func MinSamples(objective float64) int64 {
	return int64(math.Ceil(100/(100-objective) - 1e-9))
}

// minDuration is the probe duration that would give need samples at the rate seen.
func minDuration(need, got int64, ran time.Duration) time.Duration {
	if got <= 0 || ran <= 0 {
		return 0
	}
	return (time.Duration(float64(ran) * float64(need) / float64(got))).Round(time.Minute) + time.Minute
}

func micros(us float64) time.Duration { return time.Duration(us) * time.Microsecond }
func dur(d time.Duration) metav1.Duration {
	return metav1.Duration{Duration: d}
}

func value(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

func ptrValue(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		// A log tail: its last line says most.
		s = s[i+1:]
	}
	return s
}

// BudgetRemaining is the share of the error budget that intervals measured with over of
// them past the tolerance leave at objective (a percentage):
//
//	1 - (over / intervals) / (1 - objective/100)
//
// 1 when none was over, 0 when the budget is exactly spent, negative when overspent.
// False when nothing can be said: no intervals, or no budget (objective 100 or more).
func BudgetRemaining(over, intervals int64, objective float64) (float64, bool) {
	budget := 1 - objective/100
	if intervals <= 0 || budget <= 0 {
		return 0, false
	}
	return 1 - float64(over)/float64(intervals)/budget, true
}
