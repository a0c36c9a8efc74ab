/*
Copyright 2026 The isochron Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package rtt

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestEncodeDecode(t *testing.T) {
	b := make([]byte, PacketSize)
	Encode(b, 12345, 987654321)
	seq, sent, ok := Decode(b)
	if !ok || seq != 12345 || sent != 987654321 {
		t.Errorf("Decode(Encode(12345, 987654321)) = %d, %d, %v", seq, sent, ok)
	}
	if _, _, ok := Decode(b[:PacketSize-1]); ok {
		t.Error("Decode accepted a short packet")
	}
	b[0] ^= 0xff
	if _, _, ok := Decode(b); ok {
		t.Error("Decode accepted a packet without the magic")
	}
}

func TestLossTimeout(t *testing.T) {
	if got := LossTimeout(5 * time.Millisecond); got != time.Second {
		t.Errorf("LossTimeout(5ms) = %s, want 1s", got)
	}
	if got := LossTimeout(200 * time.Millisecond); got != 2*time.Second {
		t.Errorf("LossTimeout(200ms) = %s, want 2s", got)
	}
}

func TestTallyCountsMissesAndLosses(t *testing.T) {
	tally := NewTally(6, 5*time.Millisecond)
	tally.Answer(0, 100)       // on time
	tally.Answer(1, 5_000)     // exactly at the deadline: on time
	tally.Answer(2, 5_001)     // late: a miss
	tally.Answer(2, 90)        // duplicate answer: ignored
	tally.Answer(3, 1_000_001) // past the loss timeout: lost
	tally.Answer(9, 100)       // not a probe we sent
	// 4 and 5 never answered: lost.
	got := tally.Result(6)
	want := Result{Sent: 6, Lost: 3, Late: 1, Duplicates: 1}
	if diff := cmp.Diff(want, got, cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "Summary" }, cmp.Ignore())); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	if got.Count != 3 || got.Max != 5001 {
		t.Errorf("summary count %d max %g, want 3 and 5001", got.Count, got.Max)
	}
	if got.Misses == nil || *got.Misses != 4 || got.DeadlineUs == nil || *got.DeadlineUs != 5000 {
		t.Errorf("misses %v deadline %v, want 4 (1 late + 3 lost) and 5000", got.Misses, got.DeadlineUs)
	}
	if tally.Stray != 1 {
		t.Errorf("stray = %d, want 1", tally.Stray)
	}
}

func TestTallyDone(t *testing.T) {
	tally := NewTally(2, time.Millisecond)
	tally.Answer(1, 10)
	if tally.Done(2) {
		t.Error("Done(2) after one answer")
	}
	tally.Answer(0, 10)
	if !tally.Done(2) {
		t.Error("not Done(2) after both answers")
	}
}
