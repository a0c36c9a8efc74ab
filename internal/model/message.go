package model

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"isochron.io/isochron/internal/format"
)

// message is one line naming the dominant term, its figures and what to do.
func (s *nodeState) message(w *Workload, objective float64, pr Prediction, head headroomFigures,
	own contentionFigures, io hostIOFigures, nic nicFigures) string {
	p := s.p
	var detail, action string
	switch pr.Cause {
	case CauseVCPUHeadroom:
		if head.vcpus <= 0 || head.mean >= float64(head.vcpus) {
			detail = fmt.Sprintf("mean CPU %.2f at %s rps fills its %s: the queue never drains",
				head.mean, fmtInt(int64(w.RPS)), plural(int64(head.vcpus), "vCPU"))
		} else {
			detail = fmt.Sprintf("peak CPU %.2f over the %s window at %s rps on %s (%.0f%%)",
				head.peak, FormatError(w.Tolerance), fmtInt(int64(w.RPS)), plural(int64(head.vcpus), "vCPU"), 100*head.r)
		}
		action = fmt.Sprintf("size to %s", plural(int64(Size(w.RPS, w.Tolerance, w.Objective, p)), "vCPU"))
	case CauseCPUContention:
		f := own
		if f.c == 0 && !(w.Dedicated && s.dedicatedOver) {
			f = io.vacation
		}
		switch {
		case w.Dedicated && s.dedicatedOver:
			detail = fmt.Sprintf("exclusive CPUs (%s) exceed the node's %s", fmtCPU(s.cpus-s.poolCPUs), fmtCPU(s.cpus))
		case f.m <= 0:
			detail = fmt.Sprintf("no shared CPU left for %s runnable vCPUs and host I/O threads", fmtNum(f.n))
		default:
			who := "the host I/O path waits"
			switch {
			case own.c > 0 && io.vacation.c > 0:
				who = "the vCPU and the host I/O path each wait"
			case own.c > 0:
				who = "the vCPU waits"
			}
			detail = fmt.Sprintf("%s runnable vCPUs and host I/O threads on %s shared CPUs: %s up to %s×%s timeslice (p=%.2g)",
				fmtNum(f.n), fmtCPU(f.m), who, fmtNum(f.c), FormatError(p.SchedulerGranularity), f.P)
		}
		action = "move a VM off the node, use dedicated CPUs or a shorter scheduler timeslice"
	case CauseHostIO:
		detail = fmt.Sprintf("host I/O path %s busy at %s rps total (%s per request on %s CPU",
			fmtPct(io.effLoad), fmtInt(int64(s.totalRPS)), FormatError(p.HostIOCostPerRequest), fmtCPU(p.HostReservedCPUs))
		if io.avail < 1 {
			detail += fmt.Sprintf(", %s of it left by contention", fmtPct(io.avail))
		}
		detail += ")"
		action = "lower the node's total rps or give the host I/O path more or isolated CPUs"
	case CauseNICBandwidth:
		detail = fmt.Sprintf("RT-NICs on the node need %s of the %s the uplink guarantees", fmtBPS(s.nic.sumBandwidth), fmtBPS(s.nic.capacity))
		action = "lower spec.rtNIC.minBandwidth or move a crawler"
	case CauseNICDeadline:
		detail = fmt.Sprintf("worst-case RT-NIC delay %s against the %s deadline (%s bits of %s in its class or earlier, and best effort's frame and burst, at the uplink's shaped %s)",
			FormatError(nic.delay), FormatError(nic.deadline), fmtInt(int64(nic.backlogBits)), plural(int64(nic.flows), "flow"), fmtBPS(s.nic.linkRate))
		action = "lengthen the deadline or move a crawler with a shorter one"
		if nic.feasible {
			action = fmt.Sprintf("lower spec.rtNIC.minBandwidth of the flows in the class of the %s deadline or earlier, or move one of them", FormatError(nic.deadline))
		}
	}
	pct := "p" + strconv.FormatFloat(objective, 'f', -1, 64)
	errText := FormatError(pr.Error)
	if pr.Correction != 1 && pr.Correction > 0 {
		errText += fmt.Sprintf(" (the model's %s × %s, the node's calibration from probes)", FormatError(pr.Uncorrected), fmtNum(pr.Correction))
	}
	switch {
	case pr.Within:
		return fmt.Sprintf("%s: %s error %s within the %s tolerance (%s headroom)",
			detail, pct, errText, FormatError(w.Tolerance), FormatError(w.Tolerance-pr.Error))
	case pr.Error <= w.Tolerance:
		return fmt.Sprintf("%s: infeasible although the %s error %s is within the %s tolerance; %s",
			detail, pct, errText, FormatError(w.Tolerance), action)
	}
	return fmt.Sprintf("%s: %s error %s over the %s tolerance; %s", detail, pct, errText, FormatError(w.Tolerance), action)
}

// FormatError writes a predicted error (or any delay of the model) for a message:
// "unbounded" from Unbounded on, else format.Duration's four significant figures.
func FormatError(d time.Duration) string {
	if d >= Unbounded {
		return "unbounded"
	}
	return format.Duration(d)
}

func fmtInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func fmtPct(x float64) string {
	if math.IsInf(x, 1) {
		return "over 100%"
	}
	return strconv.FormatFloat(100*x, 'f', 0, 64) + "%"
}

// fmtCPU writes a CPU quantity of the model (in CPUs) as format.CPU does.
func fmtCPU(x float64) string { return format.CPU(int64(math.Round(x * 1000))) }

// fmtNum writes a count that may be fractional (runnable vCPUs on average).
func fmtNum(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

func fmtBPS(x float64) string {
	for _, u := range []struct {
		div  float64
		unit string
	}{{1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}} {
		if x >= u.div {
			return strconv.FormatFloat(x/u.div, 'g', 3, 64) + " " + u.unit
		}
	}
	return strconv.FormatFloat(x, 'f', 0, 64) + " bit/s"
}

func plural(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmtInt(n) + " " + unit + "s"
}
