package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"isochron.io/isochron/internal/model"
)

// host boots the lab's VM and prints its results. It returns the exit status: 1 when the
// VM failed, internal/nic's tests failed there, or an RT flow missed its deadline with
// the agent's schedule.
func host(args []string) int {
	fs := flag.NewFlagSet("netlab", flag.ContinueOnError)
	kernel := fs.String("kernel", "bin/netlab/vmlinuz", "Debian's kernel (hack/netlab/initramfs.sh fetches it)")
	initrd := fs.String("initrd", "bin/netlab/initrd.gz", "the initramfs with this binary as /init (hack/netlab/initramfs.sh)")
	duration := fs.Duration("duration", 60*time.Second, "traffic measured per run, after the warm-up")
	warmup := fs.Duration("warmup", 3*time.Second, "traffic sent before each measurement and not counted")
	tests := fs.Bool("tests", true, "run internal/nic's tests in the VM first")
	memory := fs.Int("memory", 512, "the VM's memory, MiB")
	cpus := fs.Int("cpus", 1, "the VM's vCPUs (each a host thread under TCG)")
	qemu := fs.String("qemu", "qemu-system-x86_64", "QEMU")
	timeout := fs.Duration("timeout", 0, "give up on the VM after this long (0: twice the runs plus 5 minutes)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for _, f := range []string{*kernel, *initrd} {
		if _, err := os.Stat(f); err != nil {
			fmt.Fprintf(os.Stderr, "netlab: %v: make netlab builds it (hack/netlab/initramfs.sh)\n", err)
			return 1
		}
	}
	if *timeout == 0 {
		*timeout = 2*2*(*duration+*warmup) + 5*time.Minute
	}
	testsFlag := "1"
	if !*tests {
		testsFlag = "0"
	}
	cmdline := fmt.Sprintf("console=ttyS0 quiet loglevel=3 panic=-1 netlab.duration=%s netlab.warmup=%s netlab.tests=%s", *duration, *warmup, testsFlag)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, *qemu, "-accel", "tcg", "-smp", fmt.Sprint(*cpus), "-m", fmt.Sprint(*memory),
		"-nodefaults", "-no-reboot", "-display", "none", "-serial", "stdio",
		"-kernel", *kernel, "-initrd", *initrd, "-append", cmdline)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "netlab: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "netlab: %s %s\n", *qemu, strings.Join(cmd.Args[1:], " "))
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "netlab: starting QEMU: %v (make netlab installs qemu-system-x86)\n", err)
		return 1
	}
	c := readConsole(out, os.Stderr)
	waitErr := cmd.Wait()
	fmt.Fprintf(os.Stderr, "netlab: the VM ran %s\n", time.Since(start).Round(time.Second))

	status := 0
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(os.Stderr, "netlab: the VM did not finish within %s\n", *timeout)
		status = 1
	case waitErr != nil:
		fmt.Fprintf(os.Stderr, "netlab: QEMU: %v\n", waitErr)
		status = 1
	case c.err != "":
		fmt.Fprintf(os.Stderr, "netlab: the VM failed: %s\n", c.err)
		status = 1
	case !c.done:
		fmt.Fprintln(os.Stderr, "netlab: the VM stopped before it was done")
		status = 1
	}
	if len(c.results) > 0 {
		if !printTable(os.Stdout, c, *cpus, *duration, *warmup) {
			status = 1
		}
	}
	return status
}

// console is what the host reads of the VM's serial console.
type console struct {
	kernel  string
	clock   string
	results []runResult
	tests   string // "passed", "FAILED" or "" (not run)
	done    bool
	err     string
}

// readConsole reads the VM's console to its end, echoing it to echo but for the results,
// which it decodes.
func readConsole(r io.Reader, echo io.Writer) console {
	var c console
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := strings.TrimRight(s.Text(), "\r")
		i := strings.Index(line, prefix)
		if i < 0 {
			fmt.Fprintf(echo, "  vm| %s\n", line)
			continue
		}
		msg := line[i+len(prefix):]
		switch {
		case strings.HasPrefix(msg, "result "):
			var res runResult
			if err := json.Unmarshal([]byte(strings.TrimPrefix(msg, "result ")), &res); err != nil {
				c.err = fmt.Sprintf("a result the host cannot read: %v", err)
				continue
			}
			c.results = append(c.results, res)
			fmt.Fprintf(echo, "  vm| %s%s: done\n", prefix, res.Run)
			continue
		case strings.HasPrefix(msg, "clock: "):
			c.clock = strings.TrimPrefix(msg, "clock: ")
		case strings.HasPrefix(msg, "up (kernel "):
			c.kernel = strings.TrimSuffix(strings.TrimPrefix(msg, "up (kernel "), ")")
		case msg == "tests passed":
			c.tests = "passed"
		case strings.HasPrefix(msg, "tests FAILED"):
			c.tests = "FAILED"
		case msg == "done":
			c.done = true
		case strings.HasPrefix(msg, "error: "):
			c.err = strings.TrimPrefix(msg, "error: ")
		}
		fmt.Fprintf(echo, "  vm| %s\n", line[i:])
	}
	return c
}

// predictions are the contention model's worst-case NIC delay of each RT flow, by name,
// with the lab's link: the line rate, the agent's rate as the capacity RT-NICs share, its
// best-effort frame, the RT flows' frames as requests.
func predictions() map[string]time.Duration {
	p := model.DefaultParams()
	p.LinkRateBitsPerSecond = lineRate // the wire serialises the frame ahead and the flow's own
	p.NICCapacityBitsPerSecond = agentRate
	p.BestEffortPacketBits = beFrame * 8
	p.RequestBits = rtFrame * 8
	var ws []model.Workload
	names := map[string]string{}
	for _, f := range flows {
		if !f.rt() {
			continue
		}
		names[f.Key] = f.Name
		ws = append(ws, model.Workload{
			Key: f.Key, RPS: int32(time.Second / f.Period), Tolerance: time.Second, VCPUs: 1,
			NIC: &model.NICFlow{Deadline: f.Deadline, MinBandwidthBitsPerSecond: f.MinBandwidth, Raise: f.Raise},
		})
	}
	out := map[string]time.Duration{}
	for _, pr := range model.Predict(model.Node{CPUs: 8, Params: p}, ws) {
		out[names[pr.Key]] = pr.Terms.NIC
	}
	return out
}

// printTable prints the runs side by side and what they show. It returns false when an
// RT flow missed its deadline under the agent's schedule.
func printTable(w io.Writer, c console, cpus int, duration, warmup time.Duration) bool {
	fmt.Fprintf(w, "netlab: Debian kernel %s under QEMU TCG, %d vCPU, %s\n", c.kernel, cpus, c.clock)
	fmt.Fprintf(w, "wire %s with a FIFO of %d frames; the agent's schedule at %s; the RTvNIC study's setting at 1/%d of its 1 Gbit/s with deadlines x%d (docs/dev/netlab.md)\n",
		mbits(lineRate), wireQueue, mbits(agentRate), 1_000_000_000/lineRate, scale)
	fmt.Fprintf(w, "runs: floor (RT flows alone), baseline (saturating best effort, kernel default on the uplink), agent (the same with nic.Apply(nic.Plan(...))); %s each after a %s warm-up\n",
		duration, warmup)
	if c.tests != "" {
		fmt.Fprintf(w, "internal/nic's tests on that kernel: %s\n", c.tests)
	}
	pred := predictions()
	byName := map[string]flow{}
	for _, f := range flows {
		byName[f.Name] = f
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tflow\tdeadline\tsent\treceived\tlost\tlate\tmisses\tavg\tp50\tp99\tmax\tpredicted\tDSCP seen\t")
	type outcome struct {
		misses int
		max    time.Duration
	}
	got := map[string]outcome{}
	for _, r := range c.results {
		for _, f := range r.Flows {
			if f.Sent == 0 {
				continue
			}
			fl := byName[f.Name]
			lost := f.Sent - f.Received
			d, late, misses, pr := "-", "-", "-", "-"
			if fl.rt() {
				d, late, misses = ms(fl.Deadline), fmt.Sprint(f.Late), fmt.Sprint(f.Late+lost)
				got[r.Run+"/"+f.Name] = outcome{f.Late + lost, time.Duration(f.Max)}
				if r.Run == "agent" {
					pr = ms(pred[f.Name])
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Run, f.Name, d, f.Sent, f.Received, lost, late, misses,
				ms(time.Duration(f.Avg)), ms(time.Duration(f.P50)), ms(time.Duration(f.P99)), ms(time.Duration(f.Max)), pr, dscps(f.DSCP))
		}
	}
	_ = tw.Flush()
	for _, r := range c.results {
		fmt.Fprintf(w, "%s: the VM's CPU %.0f%% busy; the wire's FIFO dropped %d frames", r.Run, 100*r.Busy, r.WireDrops)
		if len(r.Classes) > 0 {
			names := make([]string, 0, len(r.Classes))
			for n := range r.Classes {
				names = append(names, n)
			}
			sort.Strings(names)
			fmt.Fprint(w, "; the agent's classes sent (dropped):")
			for _, n := range names {
				s := r.Classes[n]
				fmt.Fprintf(w, " %s %d (%d)", n, s.Packets, s.Drops)
			}
		}
		fmt.Fprintln(w)
	}
	ok := true
	for _, f := range flows {
		if !f.rt() {
			continue
		}
		base, agent := got["baseline/"+f.Name], got["agent/"+f.Name]
		ratio := 0.0
		if agent.max > 0 {
			ratio = float64(pred[f.Name]) / float64(agent.max)
		}
		within := agent.misses == 0 && agent.max <= f.Deadline
		ok = ok && within
		fmt.Fprintf(w, "%s (deadline %s): without the agent %d misses, max %s; with it %d misses, max %s (within the deadline: %s); predicted worst case %s = %.2f x the measured maximum (within 2x: %s)\n",
			f.Name, ms(f.Deadline), base.misses, ms(base.max), agent.misses, ms(agent.max), yes(within), ms(pred[f.Name]), ratio, yes(ratio >= 0.5 && ratio <= 2))
	}
	return ok
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func mbits(bps int64) string { return fmt.Sprintf("%g Mbit/s", float64(bps)/1e6) }

// dscps is "46:12000" for the DSCP values seen, most packets first.
func dscps(m map[int]int) string {
	type kv struct{ dscp, n int }
	var all []kv
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].dscp < all[j].dscp })
	var parts []string
	for _, x := range all {
		parts = append(parts, fmt.Sprintf("%d:%d", x.dscp, x.n))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
