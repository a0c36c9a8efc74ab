package move

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/format"
)

// MaxMessage bounds the messages of status.move, status.lastMove and
// status.lastRemediation (the schema allows 2048).
const MaxMessage = 1024

// Ending is how a move ends: the record status.lastMove keeps, the node the crawler holds
// once it has ended, and the Moving condition (its reason and message) with the Event
// that tells it.
type Ending struct {
	Record isov1.MoveRecord
	// Stays is the node the crawler holds: the new one when the move succeeded, the one it
	// left when it failed.
	Stays string
	// Reason and Message are the Moving condition's; Event is the Event's message, a
	// Warning when the move failed.
	Reason, Message, Event string
	Warning                bool
}

// End is how move m ends with result, next being the step that ended it (NextStep) and
// last the crawler's previous move, at now: a success records how long KubeVirt's
// migration took, in the whole seconds KubeVirt reports; a failure counts the failures in
// a row and says when the move is tried again (Backoff).
func End(m *isov1.Move, result isov1.MoveResult, next Next, last *isov1.MoveRecord, now time.Time) Ending {
	now = now.UTC().Truncate(time.Second)
	e := Ending{Record: isov1.MoveRecord{Reason: m.Reason, Mode: m.Mode, From: m.From, To: m.To, Migration: m.Migration, Result: result,
		StartTime: m.StartTime, EndTime: metav1.NewTime(now)}}
	rec := &e.Record
	if result == isov1.MoveSucceeded {
		how := "restarted there"
		if m.Mode == isov1.MoveLive {
			rec.MigrationTime = &metav1.Duration{Duration: next.MigrationTime.Round(time.Second)}
			how = fmt.Sprintf("live-migrated; KubeVirt's migration took %s, in whole seconds", format.Duration(rec.MigrationTime.Duration))
		}
		rec.Message = fmt.Sprintf("moved from node %s to node %s in %s (%s)", m.From, m.To, format.Duration(now.Sub(m.StartTime.Time)), how)
		e.Stays, e.Reason, e.Message, e.Event = m.To, isov1.ReasonMoved, rec.Message, "M"+rec.Message[1:]
		return e
	}
	rec.Failures = 1
	if last != nil && last.Result == isov1.MoveFailed {
		rec.Failures = last.Failures + 1
	}
	retry := now.Add(Backoff(rec.Failures))
	rec.RetryAfter = &metav1.Time{Time: retry}
	rec.Message = format.Truncate(fmt.Sprintf("%s; the crawler runs on node %s; the move (%s) is tried again from %s (failure %d in a row)",
		next.Why, m.From, m.Reason, retry.Format(time.RFC3339), rec.Failures), MaxMessage)
	e.Stays, e.Reason, e.Message, e.Warning = m.From, isov1.ReasonMoveFailed, rec.Message, true
	e.Event = fmt.Sprintf("Move from node %s to node %s failed: %s", m.From, m.To, rec.Message)
	return e
}

// NoNode is what a crawler that must leave its node says when no other node fits it: why
// it must leave, what the model found (reason), and then what happens meanwhile.
func NoNode(why, reason, then string) string {
	msg := fmt.Sprintf("%s, and no other node can hold the crawler within every crawler's budget: %s", why, reason)
	if then != "" {
		msg += "; " + then
	}
	return msg
}
