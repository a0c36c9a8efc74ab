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

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	isov1 "isochron.io/isochron/api/v1alpha1"
	"isochron.io/isochron/internal/slo"
	"isochron.io/isochron/internal/version"
	"isochron.io/isochron/probes/crawl"
	"isochron.io/isochron/probes/credential"
	"isochron.io/isochron/probes/gateway"
	"isochron.io/isochron/probes/report"
	"isochron.io/isochron/probes/rtt"
)

// These loopback tests run each subcommand for about 300 ms and check counts
// only: latency figures depend on the machine and are never asserted.

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T, network string) string {
	t.Helper()
	var addr string
	switch network {
	case "tcp":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
		ln.Close()
	default:
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = c.LocalAddr().String()
		c.Close()
	}
	return addr
}

// lockedBuffer is a bytes.Buffer safe to write from a subcommand's goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lastJSON decodes the last line of out into v.
func lastJSON(t *testing.T, out string, v any) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), v); err != nil {
		t.Fatalf("last line of stdout is not the JSON result: %v\n%s", err, out)
	}
}

// background runs a subcommand until the returned stop is called; stop
// returns its exit code.
func background(args []string, stdout, stderr *lockedBuffer) (stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() { code <- run(ctx, args, stdout, stderr) }()
	return func() int { cancel(); return <-code }
}

func TestGatewayAndCrawlOnLoopback(t *testing.T) {
	addr := freeAddr(t, "tcp")
	var gwOut, gwErr lockedBuffer
	stop := background([]string{"gateway", "--listen", addr, "--delay", "1ms", "--period", "100ms", "--json"}, &gwOut, &gwErr)
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})

	// 200 rps over a 100 ms period: 20 points, 3 requests each in 300 ms.
	var crawlOut, crawlErr lockedBuffer
	code := run(context.Background(), []string{"crawl", "--target", "http://" + addr + "/", "--rps", "200",
		"--period", "100ms", "--duration", "300ms", "--conns", "8", "--json"}, &crawlOut, &crawlErr)
	if code != 0 {
		t.Fatalf("crawl exited %d: %s", code, crawlErr.String())
	}
	if code := stop(); code != 0 {
		t.Fatalf("gateway exited %d: %s", code, gwErr.String())
	}
	stop = nil

	var c crawl.Result
	lastJSON(t, crawlOut.String(), &c)
	if c.Points != 20 || c.Scheduled != 60 || c.Sent != 60 || c.Errors != 0 {
		t.Errorf("crawl: points %d scheduled %d sent %d errors %d, want 20, 60, 60, 0", c.Points, c.Scheduled, c.Sent, c.Errors)
	}
	if c.SendLateness.Count != 60 || c.ResponseTime.Count != 60 {
		t.Errorf("crawl: %d lateness and %d response samples, want 60 each", c.SendLateness.Count, c.ResponseTime.Count)
	}
	var g gateway.Result
	lastJSON(t, gwOut.String(), &g)
	if g.Metric != "interval-error" || g.Requests != 60 || g.Points != 20 {
		t.Errorf("gateway: metric %q requests %d points %d, want interval-error, 60, 20", g.Metric, g.Requests, g.Points)
	}
	// Every arrival after a point's first is an interval or a duplicate,
	// and each gives one interval-error sample.
	if g.Intervals+g.Duplicates != 40 || g.Count != 40 {
		t.Errorf("gateway: intervals %d + duplicates %d, %d samples; want 40 and 40", g.Intervals, g.Duplicates, g.Count)
	}
}

func TestRTTOnLoopback(t *testing.T) {
	addr := freeAddr(t, "udp")
	var srvOut, srvErr lockedBuffer
	stop := background([]string{"rtt", "--serve", addr}, &srvOut, &srvErr)
	defer stop()
	waitFor(t, func() bool { return echoes(addr) })

	var out, errOut lockedBuffer
	code := run(context.Background(), []string{"rtt", "--target", addr, "--rate", "200", "--deadline", "5ms",
		"--duration", "300ms", "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("rtt exited %d: %s", code, errOut.String())
	}
	var r rtt.Result
	lastJSON(t, out.String(), &r)
	if r.Metric != "rtt" || r.Sent != 60 || r.Lost != 0 || r.Count != 60 {
		t.Errorf("rtt: metric %q sent %d lost %d answered %d, want rtt, 60, 0, 60", r.Metric, r.Sent, r.Lost, r.Count)
	}
	if r.Misses == nil || r.DeadlineUs == nil || *r.DeadlineUs != 5000 {
		t.Fatalf("rtt: misses %v deadlineUs %v, want both set, deadline 5000", r.Misses, r.DeadlineUs)
	}
	if *r.Misses > r.Sent/2 {
		t.Errorf("rtt: %d of %d probes missed the 5 ms deadline on loopback", *r.Misses, r.Sent)
	}
}

func TestUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"gateway without --listen":    {"gateway"},
		"crawl without --target":      {"crawl", "--duration", "1s"},
		"crawl without --duration":    {"crawl", "--target", "http://127.0.0.1:1/"},
		"rtt with neither":            {"rtt"},
		"rtt with --serve and target": {"rtt", "--serve", "127.0.0.1:0", "--target", "127.0.0.1:1"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errOut lockedBuffer
			if code := run(context.Background(), args, &out, &errOut); code != exitUsage {
				t.Errorf("exit %d, want %d; stderr: %s", code, exitUsage, errOut.String())
			}
		})
	}
}

func TestVersion(t *testing.T) {
	for _, flag := range []string{"--version", "-version"} {
		t.Run(flag, func(t *testing.T) {
			var out, errOut lockedBuffer
			code := run(context.Background(), []string{flag}, &out, &errOut)
			if want := "rtprobe " + version.Get().String() + "\n"; code != exitOK || out.String() != want {
				t.Errorf("rtprobe %s: exit %d, stdout %q; want exit %d, stdout %q", flag, code, out.String(), exitOK, want)
			}
		})
	}
}

// echoes reports whether a UDP echo server answers on addr.
func echoes(addr string) bool {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := c.Write([]byte("ping")); err != nil {
		return false
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	return err == nil && string(buf[:n]) == "ping"
}

// waitFor polls ready for up to 5 s.
func waitFor(t *testing.T, ready func() bool) {
	t.Helper()
	for range 100 {
		if ready() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("server did not come up within 5 s")
}

func TestSLOReportsGatewayAndRoundTrips(t *testing.T) {
	echo := freeAddr(t, "udp")
	var srvOut, srvErr lockedBuffer
	stopEcho := background([]string{"rtt", "--serve", echo}, &srvOut, &srvErr)
	defer stopEcho()
	waitFor(t, func() bool { return echoes(echo) })

	gw := freeAddr(t, "tcp")
	path := filepath.Join(t.TempDir(), "termination-log")
	var out, errOut lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(context.Background(), []string{"slo", "--listen", gw, "--period", "100ms", "--delay", "0s",
			"--objective", "99.9", "--duration", "1500ms", "--rtt-target", echo, "--rtt-rate", "200",
			"--rtt-deadline", "5ms", "--report", path, "--json"}, &out, &errOut)
	}()
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + gw + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	var crawlOut, crawlErr lockedBuffer
	if c := run(context.Background(), []string{"crawl", "--target", "http://" + gw + "/", "--rps", "200",
		"--period", "100ms", "--duration", "300ms", "--json"}, &crawlOut, &crawlErr); c != 0 {
		t.Fatalf("crawl exited %d: %s", c, crawlErr.String())
	}
	if c := <-code; c != 0 {
		t.Fatalf("slo exited %d: %s", c, errOut.String())
	}
	rep := readReport(t, path)
	if rep.Interrupted || rep.Error != "" || rep.Objective != 99.9 || !rep.End.After(rep.Start) {
		t.Errorf("report: interrupted %v error %q objective %g start %s end %s", rep.Interrupted, rep.Error, rep.Objective, rep.Start, rep.End)
	}
	if rep.Interval == nil || rep.Interval.Requests != 60 || rep.Interval.Points != 20 || rep.Interval.AtObjective == nil {
		t.Errorf("interval part %+v: want 60 requests from 20 points and an atObjective figure", rep.Interval)
	}
	// 200/s for 1.5 s.
	if rep.RTT == nil || rep.RTT.Sent != 300 || rep.RTT.Lost != 0 || rep.RTT.AtObjective == nil || rep.RTTTarget != echo {
		t.Errorf("rtt part %+v (target %q): want 300 sent, none lost, an atObjective figure, target %s", rep.RTT, rep.RTTTarget, echo)
	}
	// stdout's last line is the same report.
	var again report.Report
	lastJSON(t, out.String(), &again)
	if again.Interval == nil || again.Interval.Requests != rep.Interval.Requests {
		t.Errorf("stdout report differs from --report: %+v", again.Interval)
	}
}

func TestSLOFailuresAreReportedAndExitNonZero(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	t.Run("address in use", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "termination-log")
		var out, errOut lockedBuffer
		if c := run(context.Background(), []string{"slo", "--listen", busy.Addr().String(), "--duration", "1s", "--report", path}, &out, &errOut); c != exitError {
			t.Fatalf("exit %d, want %d", c, exitError)
		}
		b, _ := os.ReadFile(path)
		rep, err := report.Parse(string(b))
		if err != nil || !strings.Contains(rep.Error, "listening on --listen") {
			t.Errorf("report %+v (%v): want the listen error", rep, err)
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "termination-log")
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // as SIGTERM from the kubelet at the Job's deadline
		var out, errOut lockedBuffer
		if c := run(ctx, []string{"slo", "--listen", "127.0.0.1:0", "--duration", "1h", "--report", path}, &out, &errOut); c != exitError {
			t.Fatalf("exit %d, want %d", c, exitError)
		}
		b, _ := os.ReadFile(path)
		rep, err := report.Parse(string(b))
		if err != nil || !rep.Interrupted {
			t.Errorf("report %+v (%v): want interrupted", rep, err)
		}
	})
}

// The probe Job's side and the guest's side together, as isochron runs them: `rtprobe
// slo --crawl-rps` announces a window, `rtprobe agent` in the guest finds it and crawls
// the schedule for it, and the report counts the intervals of the agent's requests.
//
// The probe pod has the crawler's key in its environment (--key-env) and the guest in a
// file (--key-file), as isochron gives them; a crawl from anywhere else, without the
// token, is foreign: counted and otherwise ignored.
func TestSLOMeasuresTheAgentsCrawl(t *testing.T) {
	key := credential.Encode(credential.Key([]byte("master"), "crawler-uid"))
	t.Setenv("TEST_PROBE_KEY", key)
	keyFile := filepath.Join(t.TempDir(), "probe-key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := freeAddr(t, "tcp")
	path := filepath.Join(t.TempDir(), "termination-log")
	var out, errOut lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(context.Background(), []string{"slo", "--listen", gw, "--period", "100ms", "--delay", "0s",
			"--objective", "90", "--duration", "2s", "--crawl-rps", "100", "--key-env", "TEST_PROBE_KEY", "--report", path, "--json"}, &out, &errOut)
	}()
	var agentOut, agentErr lockedBuffer
	stopAgent := background([]string{"agent", "--gateway", "http://" + gw, "--poll", "20ms", "--key-file", keyFile, "--json"}, &agentOut, &agentErr)
	// Another pod crawls the gateway too, without the token.
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + gw + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	var otherOut, otherErr lockedBuffer
	_ = run(context.Background(), []string{"crawl", "--target", "http://" + gw + "/", "--rps", "100",
		"--period", "100ms", "--duration", "300ms", "--json"}, &otherOut, &otherErr)
	if c := <-code; c != 0 {
		t.Fatalf("slo exited %d: %s", c, errOut.String())
	}
	if c := stopAgent(); c != 0 {
		t.Fatalf("agent exited %d: %s", c, agentErr.String())
	}
	rep := readReport(t, path)
	// 100 rps with a 100 ms period: 10 points, for up to 2 s less the agent's first poll.
	if rep.Interval == nil || rep.Interval.Points != 10 || rep.Interval.Requests < 150 || rep.Interval.Requests > 201 || rep.Interval.Intervals < 100 {
		t.Fatalf("interval part %+v: want 10 points, 150 to 200 requests and their intervals", rep.Interval)
	}
	var crawled crawl.Result
	lastJSON(t, agentOut.String(), &crawled)
	if crawled.Sent != rep.Interval.Requests || crawled.Errors != 0 {
		t.Errorf("the agent sent %d requests (%d failed), the gateway counted %d", crawled.Sent, crawled.Errors, rep.Interval.Requests)
	}
	if !strings.Contains(agentErr.String(), "agent: window of agent at 100 rps from http://"+gw) {
		t.Errorf("the agent's log does not record the window: %s", agentErr.String())
	}
	var other crawl.Result
	lastJSON(t, otherOut.String(), &other)
	if rep.Interval.Foreign != other.Sent || other.Sent < 25 {
		t.Errorf("the report counts %d foreign requests; the other crawl sent %d (want about 30, all foreign)", rep.Interval.Foreign, other.Sent)
	}
}

// A probe Job told of a key it cannot read fails and says so in its report, rather than
// count nobody's requests.
func TestSLOWithoutItsKeyFails(t *testing.T) {
	t.Setenv("TEST_PROBE_KEY", "")
	path := filepath.Join(t.TempDir(), "termination-log")
	var out, errOut lockedBuffer
	if c := run(context.Background(), []string{"slo", "--listen", "127.0.0.1:0", "--duration", "1s", "--key-env", "TEST_PROBE_KEY", "--report", path}, &out, &errOut); c != exitError {
		t.Fatalf("exit %d, want %d", c, exitError)
	}
	rep := readReport(t, path)
	if !strings.Contains(rep.Error, "--key-env TEST_PROBE_KEY holds a key of 0 bytes") {
		t.Errorf("report error %q: want it to name --key-env and what is wrong", rep.Error)
	}
}

// readReport reads and parses the report rtprobe slo wrote to path.
func readReport(t *testing.T, path string) report.Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := report.Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Another pod's requests, without the crawler's token, do not refute the crawler: beside
// the agent's crawl (10 points, each once a second), it requests each point twice a
// second, 0.4 s apart, all window long, which a gateway that counted it would measure as
// interval errors of 0.4 and 0.6 s, over the 300 ms tolerance (wide, so that the agent's
// own timing on a loaded test machine stays within it). The keyed gateway counts them as
// foreign, and the operator's judgement of the report (slo.Judge) is the agent's alone.
// (internal/slo's TestForeignRequestsDoNotMoveTheVerdict shows the same on a gateway
// with a stepped clock.)
func TestForeignRequestsDoNotRefute(t *testing.T) {
	key := credential.Encode(credential.Key([]byte("master"), "crawler-uid"))
	t.Setenv("TEST_PROBE_KEY", key)
	keyFile := filepath.Join(t.TempDir(), "probe-key")
	if err := os.WriteFile(keyFile, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	const period = time.Second
	gw := freeAddr(t, "tcp")
	path := filepath.Join(t.TempDir(), "termination-log")
	var out, errOut lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(context.Background(), []string{"slo", "--listen", gw, "--period", period.String(), "--delay", "0s",
			"--objective", "90", "--tolerance", "300ms", "--duration", "5s", "--crawl-rps", "10", "--key-env", "TEST_PROBE_KEY",
			"--report", path, "--json"}, &out, &errOut)
	}()
	var agentOut, agentErr lockedBuffer
	stopAgent := background([]string{"agent", "--gateway", "http://" + gw, "--poll", "20ms", "--key-file", keyFile}, &agentOut, &agentErr)
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + gw + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	// The attacker: the agent's point IDs, each twice a period, 0.4 s apart.
	attack, stopAttack := context.WithTimeout(context.Background(), 4500*time.Millisecond)
	defer stopAttack()
	client := &http.Client{Timeout: time.Second}
	get := func(point int) {
		if resp, err := client.Get(fmt.Sprintf("http://%s/?point=%d", gw, point)); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	for attack.Err() == nil {
		for p := range 10 {
			go func() { get(p); time.Sleep(400 * time.Millisecond); get(p) }()
		}
		select {
		case <-attack.Done():
		case <-tick.C:
		}
	}
	if c := <-code; c != 0 {
		t.Fatalf("slo exited %d: %s", c, errOut.String())
	}
	stopAgent()
	rep := readReport(t, path)
	if rep.Interval == nil {
		t.Fatal("the report has no interval part")
	}
	cvm := &isov1.CrawlerVM{Spec: isov1.CrawlerVMSpec{RPS: 10, ErrorBudget: isov1.ErrorBudget{Tolerance: metav1.Duration{Duration: 300 * time.Millisecond}, Objective: "90"}}}
	verdict, reason, msg, _, _ := slo.Judge(cvm, rep)
	if verdict == isov1.VerdictRefuted {
		t.Errorf("another pod's requests refuted the crawler: %s %s: %s (%d foreign)", verdict, reason, msg, rep.Interval.Foreign)
	}
	if rep.Interval.Foreign < 40 || rep.Interval.Count < 10 {
		t.Errorf("%d intervals, %d foreign requests: want the agent's intervals, and the attacker's requests counted as foreign", rep.Interval.Count, rep.Interval.Foreign)
	}
}
