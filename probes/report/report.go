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

// Package report is the contract between a probe Job and the operator: the JSON
// object `rtprobe slo` writes to its pod's termination message, which the kubelet
// keeps (up to 4096 bytes) in the pod's status for the operator to read.
//
// The probe reports figures only; the operator judges them against the
// CrawlerVM's spec, so a probe image never decides whether an SLO holds.
package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"isochron.io/isochron/probes/gateway"
	"isochron.io/isochron/probes/rtt"
)

// Version is the version of the report format rtprobe writes; Parse reads it and every
// version back to MinVersion.
//
// Version 2 adds interval.foreign (requests without the probe's token, not counted) and
// interval.untracked (requests of points beyond the most the gateway measures): a version
// 1 report, from a gateway that counted every request, has neither.
const (
	Version    = 2
	MinVersion = 1
)

// MaxBytes is the most the kubelet keeps of a termination message.
const MaxBytes = 4096

// Report is what one probe run measured.
type Report struct {
	// Version is the format version, Version.
	Version int `json:"v"`
	// Start and End bound the measurement.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Objective is the percentile the atObjective figures are taken at (for example 99.999).
	Objective float64 `json:"objective"`
	// Interval is what the gateway measured of the crawler's requests; absent when the
	// probe ran no gateway.
	Interval *gateway.Result `json:"interval,omitempty"`
	// RTT is the round trips to the crawler's RT-NIC; absent when none were probed.
	RTT *rtt.Result `json:"rtt,omitempty"`
	// RTTTarget is the HOST:PORT the round trips went to.
	RTTTarget string `json:"rttTarget,omitempty"`
	// Interrupted is true when the probe stopped before its duration ended.
	Interrupted bool `json:"interrupted,omitempty"`
	// Error says what went wrong, if anything did.
	Error string `json:"error,omitempty"`
}

// Marshal returns r as one line of JSON, refusing a report the kubelet would cut.
func (r Report) Marshal() ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("report is %d bytes, more than the %d a termination message holds", len(b), MaxBytes)
	}
	return b, nil
}

// Parse reads a report from a termination message. It refuses unknown fields and
// versions it does not know, so a probe image of a later release is noticed, not misread.
func Parse(msg string) (Report, error) {
	var r Report
	if msg == "" {
		return r, errors.New("empty termination message")
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(msg)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Report{}, fmt.Errorf("termination message is not a probe report: %w", err)
	}
	if r.Version < MinVersion || r.Version > Version {
		return Report{}, fmt.Errorf("probe report version %d, this operator reads versions %d to %d: run the rtprobe image of the operator's release", r.Version, MinVersion, Version)
	}
	return r, nil
}
