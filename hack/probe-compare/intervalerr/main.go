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

// Command intervalerr computes the measurement-interval error from a web
// server's access log, for comparing rtprobe with Apache and httperf.
//
//	intervalerr [--period 1s] [--json] < access.log
//
// Each line is "<arrival in unix microseconds> <query string>", the query
// string holding point=ID (Apache: LogFormat "%{usec}t %q"). Lines are sorted
// by arrival first, since a server logs in completion order. The error of
// each point's intervals is computed as package probes/interval documents.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"isochron.io/isochron/probes/interval"
	"isochron.io/isochron/probes/stats"
)

type arrival struct {
	us    int64
	point string
}

type result struct {
	stats.Summary
	interval.Counts
	Skipped int64 `json:"skipped"`
}

func main() {
	period := flag.Duration("period", 1e9, "each point's request period")
	asJSON := flag.Bool("json", false, "print one JSON object instead of the human summary")
	flag.Parse()
	if *period <= 0 {
		fmt.Fprintln(os.Stderr, "intervalerr: --period must be positive")
		os.Exit(2)
	}
	res, err := compute(os.Stdin, period.Microseconds())
	if err != nil {
		fmt.Fprintf(os.Stderr, "intervalerr: %v\n", err)
		os.Exit(1)
	}
	if *asJSON {
		fmt.Println(res.jsonLine())
		return
	}
	fmt.Printf("%s\narrivals %d, points %d, intervals %d, missing %d, duplicates %d, skipped lines %d.\n",
		res.Summary.Human(), res.Arrivals, res.Points, res.Intervals, res.Missing, res.Duplicates, res.Skipped)
}

// compute reads the log and returns the interval-error summary.
func compute(r io.Reader, periodUs int64) (result, error) {
	var (
		arrivals []arrival
		skipped  int64
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		a, ok := parseLine(sc.Text())
		if !ok {
			skipped++
			continue
		}
		arrivals = append(arrivals, a)
	}
	if err := sc.Err(); err != nil {
		return result{}, fmt.Errorf("reading the log: %w", err)
	}
	slices.SortStableFunc(arrivals, func(a, b arrival) int { return cmp.Compare(a.us, b.us) })
	tr := interval.NewTracker(periodUs)
	rec := stats.NewRecorder()
	for _, a := range arrivals {
		if o := tr.Observe(a.point, a.us); o.Kind != interval.First {
			rec.Record(o.ErrorUs)
		}
	}
	return result{Summary: rec.Summary("interval-error"), Counts: tr.Counts(), Skipped: skipped}, nil
}

// parseLine parses "<unix us> [?]point=ID[&...]".
func parseLine(line string) (arrival, bool) {
	usText, query, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok {
		return arrival{}, false
	}
	us, err := strconv.ParseInt(usText, 10, 64)
	if err != nil {
		return arrival{}, false
	}
	q, err := url.ParseQuery(strings.TrimPrefix(strings.TrimSpace(query), "?"))
	if err != nil || q.Get("point") == "" {
		return arrival{}, false
	}
	return arrival{us: us, point: q.Get("point")}, true
}

func (r result) jsonLine() string {
	b, err := json.Marshal(r)
	if err != nil {
		return r.Summary.JSON()
	}
	return string(b)
}
