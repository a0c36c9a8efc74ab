package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"isochron.io/isochron/internal/nic"
)

// runResult is one measurement, as the guest reports it to the host.
type runResult struct {
	Run string `json:"run"`
	// Seconds is how long the measurement lasted (after the warm-up).
	Seconds float64      `json:"seconds"`
	Flows   []flowResult `json:"flows"`
	// WireDrops are the frames the wire's FIFO dropped during the run.
	WireDrops uint64 `json:"wireDrops"`
	// Busy is the share of the VM's CPU time that was not idle during the run.
	Busy float64 `json:"busy"`
	// Classes are the agent's classes' counters, by flow name.
	Classes map[string]nic.ClassStats `json:"classes,omitempty"`
}

// flowResult is what the receiver saw of one flow's packets sent during the measurement.
type flowResult struct {
	Name     string `json:"name"`
	Sent     int    `json:"sent"`
	Received int    `json:"received"`
	// Late are the received packets whose delay exceeded the flow's deadline.
	Late int `json:"late"`
	// Delays, in nanoseconds: average, maximum and percentiles of the received packets.
	Avg  int64 `json:"avgNs"`
	Max  int64 `json:"maxNs"`
	P50  int64 `json:"p50Ns"`
	P99  int64 `json:"p99Ns"`
	P999 int64 `json:"p999Ns"`
	// DSCP counts the packets by the DSCP they arrived with.
	DSCP map[int]int `json:"dscp"`
}

// The payload of every packet: a magic number, the flow's index, its sequence number and
// the time it was sent (CLOCK_REALTIME, nanoseconds).
const (
	magic       = 0x15c0_1ab5
	payloadHead = 4 + 4 + 8 + 8
)

// run sends the RT flows, and best effort if withBestEffort, for cfg.warmup +
// cfg.duration and reports the packets sent after the warm-up.
func (l *lab) run(name string, cfg guestConfig, withBestEffort bool) (runResult, error) {
	say("%s: %s of traffic after a warm-up of %s", name, cfg.duration, cfg.warmup)
	drops0, err := l.wireDrops()
	if err != nil {
		return runResult{}, err
	}
	receivers, senders, err := l.sockets()
	if err != nil {
		return runResult{}, err
	}
	start := time.Now()
	from, until := start.Add(cfg.warmup), start.Add(cfg.warmup+cfg.duration)
	idle0, total0 := cpuTimes()

	recv := make([]*receiver, len(flows))
	var wg sync.WaitGroup
	for i, f := range flows {
		recv[i] = &receiver{flow: f, from: from, until: until}
		wg.Add(1)
		go func() { defer wg.Done(); recv[i].loop(receivers[i], until.Add(time.Second)) }()
	}
	sent := make([]int, len(flows))
	var swg sync.WaitGroup
	for i, f := range flows {
		if !f.rt() && !withBestEffort {
			continue
		}
		swg.Add(1)
		go func() { defer swg.Done(); sent[i] = send(senders[i], i, f, from, until) }()
	}
	swg.Wait()
	idle1, total1 := cpuTimes()
	for _, c := range senders {
		c.Close()
	}
	wg.Wait()
	for _, c := range receivers {
		c.Close()
	}
	drops1, err := l.wireDrops()
	if err != nil {
		return runResult{}, err
	}
	r := runResult{Run: name, Seconds: cfg.duration.Seconds(), WireDrops: drops1 - drops0}
	if total1 > total0 {
		r.Busy = 1 - float64(idle1-idle0)/float64(total1-total0)
	}
	for i := range flows {
		r.Flows = append(r.Flows, recv[i].result(sent[i]))
	}
	return r, nil
}

// sockets opens each flow's sender, in its namespace, and its receiver, in the far one.
func (l *lab) sockets() (receivers, senders []*net.UDPConn, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer func() {
		if setErr := netns.Set(l.root); setErr != nil && err == nil {
			err = setErr
		}
	}()
	if err := netns.Set(l.far); err != nil {
		return nil, nil, err
	}
	for _, f := range flows {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: farAddr.AsSlice(), Port: f.Port})
		if err != nil {
			return nil, nil, fmt.Errorf("receiver of %s: %w", f.Name, err)
		}
		if err := setsockopt(c, func(fd int) error {
			return errors.Join(
				// The kernel's receive time, taken when the frame comes off the wire.
				unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1),
				unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1),
				unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20))
		}); err != nil {
			return nil, nil, fmt.Errorf("receiver of %s: %w", f.Name, err)
		}
		receivers = append(receivers, c)
	}
	for _, f := range flows {
		if err := netns.Set(l.senders[f.Name]); err != nil {
			return nil, nil, err
		}
		c, err := net.DialUDP("udp4", &net.UDPAddr{IP: f.Addr.AsSlice()}, &net.UDPAddr{IP: farAddr.AsSlice(), Port: f.Port})
		if err != nil {
			return nil, nil, fmt.Errorf("sender %s: %w", f.Name, err)
		}
		if err := setsockopt(c, func(fd int) error { return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, int(f.TOS)) }); err != nil {
			return nil, nil, fmt.Errorf("sender %s: %w", f.Name, err)
		}
		senders = append(senders, c)
	}
	return receivers, senders, nil
}

// cpuTimes are the idle and total CPU time of the VM, in ticks (/proc/stat).
func cpuTimes() (idle, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, field := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseUint(field, 10, 64)
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return idle, total
}

func setsockopt(c *net.UDPConn, set func(fd int) error) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = set(int(fd)) }); err != nil {
		return err
	}
	return serr
}

// send sends f's packets until until and returns how many it sent from from on: an RT
// flow one per period, best effort paced at its rate in bursts of a few frames.
func send(c *net.UDPConn, index int, f flow, from, until time.Time) int {
	buf := make([]byte, f.Frame-headers)
	binary.LittleEndian.PutUint32(buf[0:], magic)
	binary.LittleEndian.PutUint32(buf[4:], uint32(index))
	var seq uint64
	counted := 0
	packet := func() {
		now := time.Now()
		seq++
		binary.LittleEndian.PutUint64(buf[8:], seq)
		binary.LittleEndian.PutUint64(buf[16:], uint64(now.UnixNano()))
		if _, err := c.Write(buf); err == nil && !now.Before(from) && now.Before(until) {
			counted++
		}
	}
	start := time.Now()
	if f.rt() {
		for next := start; time.Now().Before(until); next = next.Add(f.Period) {
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			} else if -d > f.Period {
				next = time.Now() // late by more than a period: no catching up in a burst
			}
			packet()
		}
		return counted
	}
	bits := float64(f.Frame * 8)
	for sentTotal := 0; time.Now().Before(until); time.Sleep(2 * time.Millisecond) {
		due := int(time.Since(start).Seconds() * float64(f.Rate) / bits)
		for n := 0; sentTotal < due && n < 16; n++ {
			packet()
			sentTotal++
		}
	}
	return counted
}

// receiver collects one flow's packets.
type receiver struct {
	flow        flow
	from, until time.Time
	delays      []time.Duration
	dscp        map[int]int
}

func (r *receiver) loop(c *net.UDPConn, stop time.Time) {
	r.dscp = map[int]int{}
	buf, oob := make([]byte, 2048), make([]byte, 256)
	_ = c.SetReadDeadline(stop)
	for {
		n, oobn, _, _, err := c.ReadMsgUDP(buf, oob)
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
				say("receiver of %s: %v", r.flow.Name, err)
			}
			return
		}
		if n < payloadHead || binary.LittleEndian.Uint32(buf) != magic {
			continue
		}
		sentAt := time.Unix(0, int64(binary.LittleEndian.Uint64(buf[16:])))
		if sentAt.Before(r.from) || !sentAt.Before(r.until) {
			continue
		}
		at, tos, ok := control(oob[:oobn])
		if !ok {
			say("receiver of %s: a packet without its receive time", r.flow.Name)
			continue
		}
		r.delays = append(r.delays, at.Sub(sentAt))
		r.dscp[int(tos>>2)]++
	}
}

// control reads the receive time and the TOS byte from a packet's control messages.
func control(oob []byte) (at time.Time, tos byte, ok bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, 0, false
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16:
			sec := int64(binary.NativeEndian.Uint64(m.Data[0:]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:]))
			at, ok = time.Unix(sec, nsec), true
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1:
			tos = m.Data[0]
		}
	}
	return at, tos, ok
}

func (r *receiver) result(sent int) flowResult {
	res := flowResult{Name: r.flow.Name, Sent: sent, Received: len(r.delays), DSCP: r.dscp}
	if len(r.delays) == 0 {
		return res
	}
	d := slices.Clone(r.delays)
	slices.Sort(d)
	var sum time.Duration
	for _, x := range d {
		sum += x
		if r.flow.rt() && x > r.flow.Deadline {
			res.Late++
		}
	}
	q := func(p float64) int64 { return int64(d[min(len(d)-1, int(p*float64(len(d))))]) }
	res.Avg, res.Max = int64(sum)/int64(len(d)), int64(d[len(d)-1])
	res.P50, res.P99, res.P999 = q(0.50), q(0.99), q(0.999)
	return res
}
