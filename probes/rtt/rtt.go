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

// Package rtt measures UDP round trips at a fixed rate against a deadline,
// the RTvNIC study's measurement: each probe carries a sequence number and
// its send time, the target echoes it, and the round-trip time goes into a
// histogram. A probe answered later than the deadline is a miss; one not
// answered within the loss timeout, max(1 s, 10×deadline), is lost, and a lost
// probe is also counted as a miss (it certainly missed its deadline).
package rtt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"isochron.io/isochron/probes/monoclock"
	"isochron.io/isochron/probes/stats"
)

// Metric is the summary's metric name.
const Metric = "rtt"

// PacketSize is the size of a probe: magic, sequence number, send time.
const PacketSize = 24

const magic = 0x69736f6368726f6e // "isochron"

// Encode writes probe seq, sent sentNs after the client's start, into b
// (len(b) >= PacketSize).
func Encode(b []byte, seq uint64, sentNs int64) {
	binary.BigEndian.PutUint64(b[0:], magic)
	binary.BigEndian.PutUint64(b[8:], seq)
	binary.BigEndian.PutUint64(b[16:], uint64(sentNs))
}

// Decode reads a probe; ok is false if b is not one.
func Decode(b []byte) (seq uint64, sentNs int64, ok bool) {
	if len(b) < PacketSize || binary.BigEndian.Uint64(b[0:]) != magic {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(b[8:]), int64(binary.BigEndian.Uint64(b[16:])), true
}

// LossTimeout returns how long a probe is waited for: max(1 s, 10×deadline).
func LossTimeout(deadline time.Duration) time.Duration {
	return max(time.Second, 10*deadline)
}

// Tally counts the answers to n probes. It is the pure core of the client.
type Tally struct {
	deadlineUs, lossUs int64
	seen               []bool
	rec                *stats.Recorder
	Late, Received     int64
	Duplicates, Stray  int64
}

// NewTally returns a Tally for n probes.
func NewTally(n int64, deadline time.Duration) *Tally {
	return &Tally{
		deadlineUs: deadline.Microseconds(),
		lossUs:     LossTimeout(deadline).Microseconds(),
		seen:       make([]bool, n),
		rec:        stats.NewRecorder(),
	}
}

// Answer counts the answer to probe seq after rttUs. Answers later than the
// loss timeout are left uncounted: the probe stays lost.
func (t *Tally) Answer(seq uint64, rttUs int64) {
	switch {
	case seq >= uint64(len(t.seen)):
		t.Stray++
	case t.seen[seq]:
		t.Duplicates++
	case rttUs > t.lossUs:
		// Too late: lost.
	default:
		t.seen[seq] = true
		t.Received++
		t.rec.Record(rttUs)
		if rttUs > t.deadlineUs {
			t.Late++
		}
	}
}

// Done reports whether all of the first sent probes are answered.
func (t *Tally) Done(sent int64) bool { return t.Received >= sent }

// Result is what the client measured.
type Result struct {
	stats.Summary
	Sent       int64 `json:"sent"`
	Lost       int64 `json:"lost"`
	Late       int64 `json:"late"`
	Duplicates int64 `json:"duplicates"`
	// AtObjective is the round trip at Config.Objective among the answered probes, in
	// microseconds (absent without an objective). Lost probes are in Misses, not here.
	AtObjective *float64 `json:"atObjective,omitempty"`
}

// Result returns the figures for sent probes; Misses = late + lost.
func (t *Tally) Result(sent int64) Result {
	lost := sent - t.Received
	return Result{
		Summary:    t.rec.Summary(Metric).WithDeadline(float64(t.deadlineUs), t.Late+lost),
		Sent:       sent,
		Lost:       lost,
		Late:       t.Late,
		Duplicates: t.Duplicates,
	}
}

// Human returns the result as readable text.
func (r Result) Human() string {
	return fmt.Sprintf("%s\nsent %d, lost %d, late %d, duplicates %d.",
		r.Summary.Human(), r.Sent, r.Lost, r.Late, r.Duplicates)
}

// JSON returns the result as one line of JSON.
func (r Result) JSON() string { return jsonLine(r) }

// Config configures a client run.
type Config struct {
	Target   string
	Rate     float64 // probes per second
	Deadline time.Duration
	Duration time.Duration
	// Objective, if > 0, is a percentile whose round trip the result also reports.
	Objective float64
}

// Serve echoes every datagram on conn until ctx is done.
func Serve(ctx context.Context, conn net.PacketConn) error {
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, 2048)
	for {
		n, addr, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("reading on %s: %w", conn.LocalAddr(), err)
		}
		if _, err := conn.WriteTo(buf[:n], addr); err != nil && ctx.Err() == nil {
			// A full socket buffer or an unreachable client loses this echo
			// only; the client counts it as lost.
			continue
		}
	}
}

// Run sends probes at cfg.Rate for cfg.Duration and waits up to the loss
// timeout for the last answers.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.Deadline <= 0 {
		return Result{}, fmt.Errorf("--rate, --duration and --deadline must be positive (got %g, %s, %s)", cfg.Rate, cfg.Duration, cfg.Deadline)
	}
	if cfg.Objective < 0 || cfg.Objective > 100 {
		return Result{}, fmt.Errorf("--objective must be a percentile in (0, 100], got %g", cfg.Objective)
	}
	conn, err := net.Dial("udp", cfg.Target)
	if err != nil {
		return Result{}, fmt.Errorf("dialling --target %s: %w", cfg.Target, err)
	}
	defer conn.Close()

	step := time.Duration(float64(time.Second) / cfg.Rate)
	n := int64(cfg.Duration / step)
	tally := NewTally(n, cfg.Deadline)
	start := time.Now()

	var (
		mu    sync.Mutex      // guards tally and limit
		limit int64      = -1 // probes sent, once the sender is done
	)
	answers := make(chan struct{})
	go func() { // receiver
		defer close(answers)
		buf := make([]byte, 2048)
		for {
			k, err := conn.Read(buf)
			now := time.Since(start).Nanoseconds()
			if err != nil {
				var ne net.Error
				if (errors.As(err, &ne) && ne.Timeout()) || ctx.Err() != nil {
					return
				}
				continue // e.g. ECONNREFUSED for an earlier probe: that probe is lost
			}
			seq, sentNs, ok := Decode(buf[:k])
			if !ok {
				continue
			}
			mu.Lock()
			tally.Answer(seq, (now-sentNs)/1000)
			done := limit >= 0 && tally.Done(limit)
			mu.Unlock()
			if done {
				return
			}
		}
	}()

	var sent int64
	buf := make([]byte, PacketSize)
	startMono := monoclock.Now()
loop:
	for seq := int64(0); seq < n; seq++ {
		at := startMono + int64(time.Duration(seq)*step)
		for monoclock.Now() < at {
			if ctx.Err() != nil {
				break loop
			}
			monoclock.SleepUntil(at, 100*time.Millisecond)
		}
		Encode(buf, uint64(seq), time.Since(start).Nanoseconds())
		// A probe that could not be written is lost, not forgotten.
		_, _ = conn.Write(buf)
		sent++
	}
	mu.Lock()
	limit = sent
	done := tally.Done(sent)
	mu.Unlock()
	if done || ctx.Err() != nil {
		_ = conn.SetReadDeadline(time.Unix(1, 0)) // wake the receiver now
	} else {
		_ = conn.SetReadDeadline(time.Now().Add(LossTimeout(cfg.Deadline)))
	}
	select {
	case <-answers:
	case <-ctx.Done():
		_ = conn.SetReadDeadline(time.Unix(1, 0))
		<-answers
	}
	res := tally.Result(sent)
	if cfg.Objective > 0 {
		v := tally.rec.Quantile(cfg.Objective)
		res.AtObjective = &v
	}
	return res, nil
}

func jsonLine(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf(`{"metric":%q,"error":%q}`, Metric, err.Error())
	}
	return string(b)
}
