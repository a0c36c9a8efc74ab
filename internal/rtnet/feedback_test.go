package rtnet

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestFeedbackNext(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	f := Feedback{MinInterval: 10 * time.Minute, CleanToLower: 2}
	miss := func(id string) Observation { return Observation{ID: id, Missed: true, Detail: id + " missed"} }
	clean := func(id string) Observation { return Observation{ID: id, Detail: id + " clean"} }
	type step struct {
		o      Observation
		at     time.Duration // after t0
		change Change
		raise  int
	}
	cases := map[string]struct {
		deadline time.Duration
		steps    []step
	}{
		"a miss raises one class, the same evidence never twice": {deadline: 10 * ms, steps: []step{
			{miss("p1"), 0, Raised, 1},
			{miss("p1"), 20 * time.Minute, Unchanged, 1},
		}},
		"never above the first class": {deadline: 10 * ms, steps: []step{ // AF41: one step to EF
			{miss("p1"), 0, Raised, 1},
			{miss("p2"), 20 * time.Minute, Unchanged, 1},
		}},
		"at most one change per interval": {deadline: time.Second, steps: []step{ // AF21: three steps
			{miss("p1"), 0, Raised, 1},
			{miss("p2"), 5 * time.Minute, Unchanged, 1},
			{miss("p3"), 10 * time.Minute, Raised, 2},
		}},
		"clean observations in a row lower it again; a miss restarts the count": {deadline: 10 * ms, steps: []step{
			{miss("p1"), 0, Raised, 1},
			{clean("p2"), 20 * time.Minute, Unchanged, 1},
			{miss("p3"), 21 * time.Minute, Unchanged, 1}, // already at the first class
			{clean("p4"), 22 * time.Minute, Unchanged, 1},
			{clean("p5"), 23 * time.Minute, Lowered, 0},
			{clean("p6"), 24 * time.Minute, Unchanged, 0},
		}},
		"an unraised flow's clean observations change nothing": {deadline: 5 * ms, steps: []step{
			{clean("p1"), 0, Unchanged, 0},
			{miss("p2"), time.Minute, Unchanged, 0}, // EF already
		}},
		"a host reading has no ID: each one counts": {deadline: time.Second, steps: []step{
			{Observation{Missed: true}, 0, Raised, 1},
			{Observation{Missed: true}, 10 * time.Minute, Raised, 2},
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var s FeedbackState
			for i, st := range tc.steps {
				var c Change
				s, c = f.Next(s, st.o, tc.deadline, t0.Add(st.at))
				if c != st.change || s.Raise != st.raise {
					t.Fatalf("step %d (%s): change %d raise %d, want change %d raise %d", i, st.o.ID, c, s.Raise, st.change, st.raise)
				}
			}
		})
	}
}

func TestFeedbackStartsOverForANewDeadline(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	s := FeedbackState{Raise: 1, Deadline: 10 * time.Millisecond, Evidence: "p1", LastChange: t0, Message: "raised"}
	got, c := DefaultFeedback.Next(s, Observation{ID: "p2", Detail: "clean"}, 50*time.Millisecond, t0.Add(time.Minute))
	want := FeedbackState{Deadline: 50 * time.Millisecond, Clean: 1, Evidence: "p2"}
	if diff := cmp.Diff(want, got); diff != "" || c != Unchanged {
		t.Errorf("change %d, state (-want +got):\n%s", c, diff)
	}
}

func TestFeedbackMessage(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	s, _ := DefaultFeedback.Next(FeedbackState{}, Observation{ID: "probe-1", Missed: true, Detail: "probe probe-1: 3 of 300 round trips over the 10ms deadline"}, 10*time.Millisecond, t0)
	if want := "raised to EF: probe probe-1: 3 of 300 round trips over the 10ms deadline"; s.Message != want {
		t.Errorf("message %q, want %q", s.Message, want)
	}
}
