package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"isochron.io/isochron/internal/nic"

	"isochron.io/isochron/internal/vminit"
)

// prefix starts every line the guest writes for the host to read on the serial console.
const prefix = "netlab: "

const modulesDir = "/modules"

// guestConfig is what the kernel command line sets (netlab.KEY=VALUE).
type guestConfig struct {
	duration, warmup time.Duration
	tests            bool
}

// guest is PID 1 of the lab's VM: it runs internal/nic's tests, builds the lab and runs
// the three measurements, reports on the console and powers the VM off.
func guest() {
	vminit.MountAll(say)
	vminit.UseConsole(say)
	vminit.LoadModules(modulesDir, say)
	say("up (kernel %s)", vminit.KernelRelease())
	say("clock: %s", clock())
	cfg, err := parseGuestCmdline()
	if err != nil {
		fail("kernel command line: %v", err)
	}
	failed := false
	if cfg.tests {
		failed = !runTests()
	}
	if err := measure(cfg); err != nil {
		fail("%v", err)
	}
	if failed {
		fail("internal/nic's tests failed")
	}
	say("done")
	powerOff()
}

// measure runs the floor, the baseline, then the agent's schedule, on one lab.
func measure(cfg guestConfig) error {
	l, err := buildLab()
	if err != nil {
		return fmt.Errorf("building the lab: %w", err)
	}
	say("lab: %d senders -> bridge -> uplink0 -> wire (%d bit/s, FIFO %d frames) -> receiver", len(flows), lineRate, wireQueue)

	floor, err := l.run("floor", cfg, false)
	if err != nil {
		return err
	}
	report(floor)

	base, err := l.run("baseline", cfg, true)
	if err != nil {
		return err
	}
	report(base)

	plan, err := nic.Plan(agentRate, agentFlows())
	if err != nil {
		return err
	}
	changes, err := nic.Apply(l.uplink, plan)
	if err != nil {
		return err
	}
	for _, c := range changes {
		say("apply: %s", c)
	}
	again, err := nic.Apply(l.uplink, plan)
	if err != nil {
		return err
	}
	say("apply again: %d changes", len(again))

	agent, err := l.run("agent", cfg, true)
	if err != nil {
		return err
	}
	counters, err := nic.Stats(l.uplink, plan)
	if err != nil {
		return err
	}
	agent.Classes = map[string]nic.ClassStats{"best-effort": counters.BestEffort}
	for _, f := range flows {
		if f.rt() {
			agent.Classes[f.Name] = counters.Flows[f.Key]
		}
	}
	report(agent)

	removed, err := nic.Remove(l.uplink)
	if err != nil {
		return err
	}
	for _, c := range removed {
		say("remove: %s", c)
	}
	return nil
}

func report(r runResult) {
	b, err := json.Marshal(r)
	if err != nil {
		fail("encoding the %s result: %v", r.Run, err)
	}
	say("result %s", b)
}

// runTests runs internal/nic's tests (its test binary, /nic.test) on this kernel.
func runTests() bool {
	cmd := exec.Command("/nic.test", "-test.v", "-test.count=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		say("test: %v", err)
		return false
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		say("test: %v", err)
		return false
	}
	s := bufio.NewScanner(out)
	for s.Scan() {
		say("test: %s", s.Text())
	}
	if err := cmd.Wait(); err != nil {
		say("tests FAILED: %v", err)
		return false
	}
	say("tests passed")
	return true
}

func parseGuestCmdline() (guestConfig, error) {
	cfg := guestConfig{duration: 60 * time.Second, warmup: 3 * time.Second, tests: true}
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return cfg, err
	}
	for _, field := range strings.Fields(string(b)) {
		key, value, _ := strings.Cut(field, "=")
		var err error
		switch key {
		case "netlab.duration":
			cfg.duration, err = time.ParseDuration(value)
		case "netlab.warmup":
			cfg.warmup, err = time.ParseDuration(value)
		case "netlab.tests":
			cfg.tests = value != "0"
		}
		if err != nil {
			return cfg, fmt.Errorf("%s: %w", key, err)
		}
	}
	return cfg, nil
}

func say(format string, args ...any) {
	fmt.Printf(prefix+format+"\n", args...)
}

// fail reports an error and powers off: PID 1 must not exit.
func fail(format string, args ...any) {
	say("error: "+format, args...)
	powerOff()
}

// powerOff resets the VM, which QEMU (-no-reboot) takes as its end.
func powerOff() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	select {}
}

// clock is the VM's clocksource and whether high-resolution timers are on: the qdiscs'
// timers are hrtimers.
func clock() string {
	src, _ := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	list, _ := os.ReadFile("/proc/timer_list")
	hres := "off"
	if strings.Contains(string(list), "hres_active    : 1") {
		hres = "on"
	}
	return fmt.Sprintf("clocksource %s, high-resolution timers %s", strings.TrimSpace(string(src)), hres)
}
