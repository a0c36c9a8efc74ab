package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
	"isochron.io/isochron/internal/outage"
)

// WriteStatus writes what kubectl isochron status says of a crawler, in words: where it
// runs and why, its size, its predicted and measured interval error, its outages of the
// last 30 days, its moves, and what to do about each condition that is not as it should
// be (Placed and Ready True, AtRisk not True). now dates the ongoing outage and the
// 30-day window.
func WriteStatus(w io.Writer, c *isov1.CrawlerVM, now time.Time) error {
	var b strings.Builder
	line := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "%-15s %s\n", label+":", fmt.Sprintf(format, args...))
	}
	st := &c.Status
	fmt.Fprintf(&b, "CrawlerVM %s/%s: %d requests/s, tolerance %s at %s%%\n", c.Namespace, c.Name,
		c.Spec.RPS, format.Duration(c.Spec.ErrorBudget.Tolerance.Duration), c.Spec.ErrorBudget.Objective)

	line("Node", "%s", nodeText(c))
	if placed := apimeta.FindStatusCondition(st.Conditions, isov1.ConditionPlaced); placed != nil && placed.Message != "" {
		line("Why there", "%s", placed.Message)
	}
	line("Size", "%s", sizeText(st.Sizing))
	line("Predicted", "%s", predictedText(st.Placement))
	line("Measured", "%s", measuredText(st.LastProbe, st.ActiveProbe))
	line("Outages", "%s", outagesText(c, now))
	if m := st.Move; m != nil {
		line("Moving", "from node %s to node %s since %s (%s): %s", m.From, m.To, stamp(m.StartTime), m.Reason, m.Message)
	}
	line("Last move", "%s", lastMoveText(st.LastMove))
	todo := ToDo(st.Conditions)
	if len(todo) == 0 {
		line("To do", "nothing: placed, ready and within its budget as predicted")
	} else {
		line("To do", "%s", todo[0])
		for _, t := range todo[1:] {
			fmt.Fprintf(&b, "%-15s %s\n", "", t)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func nodeText(c *isov1.CrawlerVM) string {
	p := c.Status.Placement
	if p == nil || p.Node == "" {
		return "none: not placed"
	}
	s := p.Node
	if v := c.Status.VMI; v != nil && v.Phase != "" {
		s += fmt.Sprintf(" (VMI %s %s)", v.Name, v.Phase)
	}
	return s
}

func sizeText(s *isov1.Sizing) string {
	if s == nil {
		return "not sized yet"
	}
	if s.HostCPUs == 0 {
		return fmt.Sprintf("%d vCPUs on shared CPUs (request %s), memory %s", s.VCPUs, s.CPURequest.String(), s.Memory.String())
	}
	return fmt.Sprintf("%d vCPUs on %d exclusive host CPUs, memory %s", s.VCPUs, s.HostCPUs, s.Memory.String())
}

func predictedText(p *isov1.PlacementStatus) string {
	if p == nil || p.PredictedError == nil {
		return "no prediction (not placed)"
	}
	s := format.Duration(p.PredictedError.Duration) + " interval error at the objective"
	if p.Headroom != nil {
		s += fmt.Sprintf(", headroom %s", format.Duration(p.Headroom.Duration))
	}
	if p.Correction != "" {
		s += fmt.Sprintf(", probes' correction x%s", p.Correction)
	}
	return s
}

func measuredText(last *isov1.ProbeResult, active *isov1.ActiveProbe) string {
	s := "never probed"
	if last != nil {
		s = fmt.Sprintf("%s by probe %s (%s, %s)", last.Verdict, last.Job, last.Trigger, stamp(last.StartTime))
		if e := last.IntervalError; e != nil {
			s = fmt.Sprintf("%s interval error at the objective (max %s, %d intervals): %s", format.Duration(e.AtObjective.Duration), format.Duration(e.Max.Duration), e.Intervals, s)
		}
		if last.Message != "" {
			s += ": " + last.Message
		}
	}
	if active != nil {
		s += fmt.Sprintf("; probe %s is running", active.Job)
	}
	return s
}

func outagesText(c *isov1.CrawlerVM, now time.Time) string {
	list := c.Status.Outages
	if len(list) == 0 {
		return "none"
	}
	from := now.Add(-outage.Window)
	n := 0
	for _, o := range list {
		if o.End == nil || o.End.After(from) {
			n++
		}
	}
	down, budget := outage.Downtime(list, now, outage.Window), outage.Budget(c.Spec.ErrorBudget.ObjectivePercent(), outage.Window)
	latest := list[0] // newest first
	var how string
	if latest.End != nil {
		how = "ended " + stamp(*latest.End)
		if latest.Duration != nil {
			how = fmt.Sprintf("lasted %s, %s", format.Duration(latest.Duration.Duration), how)
		}
	} else {
		how = fmt.Sprintf("ongoing for %s", format.Duration(now.Sub(latest.Start.Time).Round(time.Second)))
	}
	s := fmt.Sprintf("%d in the last 30 days, down %s of the %s its objective allows; latest: %s at %s, %s", n, format.Duration(down), format.Duration(budget), latest.Cause, stamp(latest.Start), how)
	if latest.Message != "" {
		s += ": " + latest.Message
	}
	return s
}

func lastMoveText(m *isov1.MoveRecord) string {
	if m == nil {
		return "never moved"
	}
	s := fmt.Sprintf("%s %s from node %s to node %s (%s), %s to %s", m.Result, m.Reason, m.From, m.To, m.Mode, stamp(m.StartTime), stamp(m.EndTime))
	if m.Message != "" {
		s += ": " + m.Message
	}
	return s
}

// ToDo is what the conditions that are not as they should be say, one line each as
// "Type=Status (Reason): message": Placed or Ready not True, AtRisk True, and Stalled
// present.
func ToDo(conds []metav1.Condition) []string {
	var out []string
	for _, want := range []struct {
		typ string
		ok  metav1.ConditionStatus
	}{{isov1.ConditionPlaced, metav1.ConditionTrue}, {isov1.ConditionReady, metav1.ConditionTrue}, {isov1.ConditionAtRisk, metav1.ConditionFalse}} {
		c := apimeta.FindStatusCondition(conds, want.typ)
		switch {
		case c == nil && want.typ == isov1.ConditionAtRisk:
			// Absent while the crawler holds no node: Placed says why.
		case c == nil:
			out = append(out, fmt.Sprintf("%s is not reported yet: the manager has not looked at the crawler (is it running? kubectl isochron version)", want.typ))
		case c.Status != want.ok:
			out = append(out, fmt.Sprintf("%s=%s (%s): %s", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	return out
}

// stamp is a time as status shows it, in UTC to the second.
func stamp(t metav1.Time) string { return t.UTC().Format(time.RFC3339) }
