// Package outage keeps a crawler's outages: when it stopped running, why, and for how
// long, and what they spend of its error budget. It is pure: no client, no clock.
//
// A BMS crawler must measure on schedule with 99.999% probability: an interval it misses
// because it is down counts like one it measures late, so outages and timing error draw
// on one budget, about 26 s a month at 99.999% (docs/availability.md).
package outage

import (
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
)

// Window is the period the budget is for: 30 days, the SLO period of the burn-rate
// alerts (config/prometheus/rules.yaml).
const Window = 30 * 24 * time.Hour

// MaxHistory is how many outages a crawler's status keeps (the API's bound).
const MaxHistory = 16

// Cause is why a crawler that stopped running did: from its Ready condition's reason and
// the move it is making, if any.
func Cause(readyReason string, m *isov1.Move) isov1.OutageCause {
	if m != nil {
		switch m.Reason {
		case isov1.MoveEvacuation:
			return isov1.OutageDrain
		case isov1.MoveNodeLost:
			return isov1.OutageNodeLoss
		case isov1.MoveSpecChange:
			return isov1.OutageSpecChange
		}
		return isov1.OutageMove
	}
	switch readyReason {
	case isov1.ReasonNodeLost:
		return isov1.OutageNodeLoss
	case isov1.ReasonVMIReplacing:
		return isov1.OutageSpecChange
	case isov1.ReasonVMStopped:
		return isov1.OutageStopped
	case isov1.ReasonNotPlaced, isov1.ReasonLauncherUnschedulable, isov1.ReasonLauncherRefused:
		return isov1.OutageUnplaceable
	}
	return isov1.OutageCrash
}

// Change is what Track did.
type Change int

const (
	// Unchanged: no outage began or ended.
	Unchanged Change = iota
	// Began: the crawler stopped running; an outage begins (the list's first).
	Began
	// Ended: the crawler runs again; the ongoing outage ended (the list's first).
	Ended
)

// Ongoing is the outage that lasts, nil for none.
func Ongoing(list []isov1.Outage) *isov1.Outage {
	if len(list) > 0 && list[0].End == nil {
		return &list[0]
	}
	return nil
}

// Track updates list, newest first, from whether the crawler ran before (wasUp: its Ready
// condition as last written) and runs now (up). A crawler that stops running begins an
// outage of cause, at start; one that runs again ends the ongoing outage at end (not
// before its start). A crawler that never ran has no outage: its first start is not one.
func Track(list []isov1.Outage, wasUp, up bool, cause isov1.OutageCause, message string, start, end time.Time) ([]isov1.Outage, Change) {
	ongoing := Ongoing(list)
	switch {
	case !up && wasUp && ongoing == nil:
		o := isov1.Outage{Cause: cause, Start: metav1.NewTime(start.UTC().Truncate(time.Second)), Message: format.Truncate(message, 1024)}
		out := append([]isov1.Outage{o}, list...)
		if len(out) > MaxHistory {
			out = out[:MaxHistory]
		}
		return out, Began
	case up && ongoing != nil:
		out := append([]isov1.Outage(nil), list...)
		o := &out[0]
		e := end.UTC().Truncate(time.Second)
		if e.Before(o.Start.Time) {
			e = o.Start.Time
		}
		o.End = &metav1.Time{Time: e}
		o.Duration = &metav1.Duration{Duration: e.Sub(o.Start.Time)}
		return out, Ended
	}
	return list, Unchanged
}

// Downtime is how long the crawler was down in the window before now: the outages of the
// list, the ongoing one up to now, clipped to the window. The list holds the last
// MaxHistory outages; a crawler with more in a window has spent its budget many times
// over.
func Downtime(list []isov1.Outage, now time.Time, window time.Duration) time.Duration {
	from := now.Add(-window)
	var total time.Duration
	for _, o := range list {
		start, end := o.Start.Time, now
		if o.End != nil {
			end = o.End.Time
		}
		if end.Before(from) {
			continue
		}
		if start.Before(from) {
			start = from
		}
		if end.After(start) {
			total += end.Sub(start)
		}
	}
	return total
}

// Budget is the downtime an objective (percent) allows in the window: 25.92 s of 30 days
// at 99.999%.
func Budget(objective float64, window time.Duration) time.Duration {
	return time.Duration(float64(window) * (100 - objective) / 100)
}

// Condition is the DowntimeWithinBudget condition for the outages of list at now.
func Condition(list []isov1.Outage, objective float64, now time.Time) (bool, string, string) {
	down, budget := Downtime(list, now, Window), Budget(objective, Window)
	n := 0
	for _, o := range list {
		if o.End == nil || !o.End.Time.Before(now.Add(-Window)) {
			n++
		}
	}
	figures := fmt.Sprintf("%d outages in the last 30 days took %s, of the %s that the %s%% objective allows", n, format.Duration(down.Round(time.Second)), format.Duration(budget.Round(time.Millisecond)), strconv.FormatFloat(objective, 'f', -1, 64))
	if down >= budget {
		return false, isov1.ReasonBudgetSpent, figures + ": outages alone spent the error budget"
	}
	return true, isov1.ReasonWithinBudget, figures
}
