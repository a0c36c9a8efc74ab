package slo

import (
	"time"

	isov1 "isochron.io/isochron/api/v1alpha1"
)

// DefaultMinMoveInterval is the least time between two moves of one crawler under
// spec.placement.onRefuted Replace (manager flag --min-move-interval). Each move restarts
// the guest on another node and is judged by a new probe (spec.probe.duration, 20 min by
// default, after the VM boots): an hour lets that probe finish before a second move is
// considered, and bounds a crawler that no node serves well to one restart an hour.
const DefaultMinMoveInterval = time.Hour

// Remedy is what to do about a crawler's last probe under its onRefuted policy.
type Remedy struct {
	// Move is set when the crawler is to be re-placed now, away from its node.
	Move bool
	// Wait, when positive, is how long until it may move: it moved less than the
	// minimum interval ago.
	Wait time.Duration
}

// NextRemedy decides whether a crawler refuted on its node moves: only under Replace,
// only for a Refuted verdict of the current spec on the VMI that runs now (vmiUID) on the
// node it holds, once per refuting probe (status.lastRemediation.job) unless that move
// failed and its backoff passed (status.lastMove), never while a move runs, and never
// within minInterval of its last move. A Report crawler never moves.
func NextRemedy(cvm *isov1.CrawlerVM, vmiUID string, now time.Time, minInterval time.Duration) Remedy {
	last := cvm.Status.LastProbe
	switch {
	case cvm.Spec.OnRefuted() != isov1.RefutedReplace,
		last == nil || last.Verdict != isov1.VerdictRefuted,
		last.ObservedGeneration != cvm.Generation,
		vmiUID == "" || last.VMIUID != vmiUID,
		cvm.Status.Placement == nil || cvm.Status.Move != nil,
		last.Node != "" && last.Node != cvm.Status.Placement.Node:
		return Remedy{}
	}
	if prev := cvm.Status.LastRemediation; prev != nil {
		if prev.Job == last.Job {
			// Acted on this probe already: again only when that move failed.
			if m := cvm.Status.LastMove; prev.To != "" && m != nil && m.Result == isov1.MoveFailed && m.Reason == isov1.MoveRefuted && !m.EndTime.Before(&prev.Time) {
				if m.RetryAfter != nil && m.RetryAfter.After(now) {
					return Remedy{Wait: m.RetryAfter.Sub(now)}
				}
				return Remedy{Move: true}
			}
			return Remedy{}
		}
		if prev.To != "" {
			if wait := prev.Time.Add(minInterval).Sub(now); wait > 0 {
				return Remedy{Wait: wait}
			}
		}
	}
	return Remedy{Move: true}
}
