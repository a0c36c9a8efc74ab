package rtnet

import (
	"fmt"
	"time"
)

// Feedback is the RTvNIC study's feedback, in classes: a flow that misses its deadline
// is raised one class (the study shortened its internal deadline and raised its DSCP
// class); after enough observations within the deadline a raised flow is lowered one
// class again. Bounded: never above the first class, at most one change per
// MinInterval, and each observation counts once.
type Feedback struct {
	// MinInterval is the least time between two changes of one flow's class.
	MinInterval time.Duration
	// CleanToLower is how many observations in a row within the deadline lower a raised
	// flow one class.
	CleanToLower int
}

// DefaultFeedback changes a flow's class at most every 10 minutes and lowers it after 3
// clean observations (three probes, or three clean readings of the host's counters).
var DefaultFeedback = Feedback{MinInterval: 10 * time.Minute, CleanToLower: 3}

// FeedbackState is a flow's feedback so far.
type FeedbackState struct {
	// Raise is how many classes above its deadline's class the flow is.
	Raise int
	// Deadline is the deadline Raise applies to; another deadline starts from 0.
	Deadline time.Duration
	// Clean counts observations within the deadline since the last change.
	Clean int
	// Evidence is the ID of the last observation with an ID counted.
	Evidence string
	// LastChange is when Raise last changed (zero: never).
	LastChange time.Time
	// Message explains the last change.
	Message string
}

// Observation is one look at a flow against its deadline.
type Observation struct {
	// ID names an observation that can be seen again (a probe Job's result): an ID
	// already counted changes nothing. A reading of the host's counters, a new one each
	// time, has none.
	ID string
	// Missed says the flow missed its deadline: probe round trips over it, or packets
	// of its class dropped on the host.
	Missed bool
	// Detail is what was seen, for the message.
	Detail string
}

// Change is what Next did to the flow's class.
type Change int

// The changes Next makes.
const (
	Unchanged Change = iota
	Raised
	Lowered
)

// Next is the flow's state after observation o at now, for a flow with deadline d, and
// the change it makes.
func (f Feedback) Next(s FeedbackState, o Observation, d time.Duration, now time.Time) (FeedbackState, Change) {
	if s.Deadline != d {
		s = FeedbackState{Deadline: d}
	}
	if o.ID != "" {
		if o.ID == s.Evidence {
			return s, Unchanged
		}
		s.Evidence = o.ID
	}
	base := ForDeadline(d, 0).Rank
	settled := s.LastChange.IsZero() || now.Sub(s.LastChange) >= f.MinInterval
	switch {
	case o.Missed:
		s.Clean = 0
		if s.Raise < base && settled {
			s.Raise++
			s.LastChange, s.Message = now, fmt.Sprintf("raised to %s: %s", ForDeadline(d, s.Raise).DSCP.Name, o.Detail)
			return s, Raised
		}
	default:
		s.Clean++
		if s.Raise > 0 && s.Clean >= f.CleanToLower && settled {
			s.Raise--
			s.Clean = 0
			s.LastChange = now
			s.Message = fmt.Sprintf("lowered to %s after %d observations within the %v deadline (last: %s)", ForDeadline(d, s.Raise).DSCP.Name, f.CleanToLower, d, o.Detail)
			return s, Lowered
		}
	}
	return s, Unchanged
}
