package bench

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// piMeasure is one row of bench pi's table: a figure of a run.
type piMeasure struct {
	name string
	get  func(PiRun) float64
	unit string // "dur" (ns), "n", "MiB" (KiB in), "pct", "ratio"
}

var piMeasures = []piMeasure{
	{"durable step p50", func(r PiRun) float64 { return float64(r.Step.P50) }, "dur"},
	{"durable step p99", func(r PiRun) float64 { return float64(r.Step.P99) }, "dur"},
	{"halt on cmd/<agent>: reply p50", func(r PiRun) float64 { return float64(r.HaltCmd.Reply.P50) }, "dur"},
	{"  reply p99", func(r PiRun) float64 { return float64(r.HaltCmd.Reply.P99) }, "dur"},
	{"  latched (its HALT record) p50", func(r PiRun) float64 { return float64(r.HaltCmd.Latched.P50) }, "dur"},
	{"  latched p99", func(r PiRun) float64 { return float64(r.HaltCmd.Latched.P99) }, "dur"},
	{"  lost (no reply in 5 s)", func(r PiRun) float64 { return float64(r.HaltCmd.Lost) }, "n"},
	{"  flood steps served", func(r PiRun) float64 { return float64(r.HaltCmd.FloodServed) }, "n"},
	{"halt on estop/<agent>: reply p50", func(r PiRun) float64 { return float64(r.HaltEstop.Reply.P50) }, "dur"},
	{"  reply p99", func(r PiRun) float64 { return float64(r.HaltEstop.Reply.P99) }, "dur"},
	{"  latched (its HALT record) p50", func(r PiRun) float64 { return float64(r.HaltEstop.Latched.P50) }, "dur"},
	{"  latched p99", func(r PiRun) float64 { return float64(r.HaltEstop.Latched.P99) }, "dur"},
	{"  lost (no reply in 5 s)", func(r PiRun) float64 { return float64(r.HaltEstop.Lost) }, "n"},
	{"  flood steps served", func(r PiRun) float64 { return float64(r.HaltEstop.FloodServed) }, "n"},
	{"bystander's lease expired", func(r PiRun) float64 { return float64(r.Other.Expired) }, "n"},
	{"  its heartbeat's slowest reply", func(r PiRun) float64 { return float64(r.Other.MaxRTT) }, "dur"},
	{"lease expiry, quiet: unwound past TTL p50", func(r PiRun) float64 { return float64(r.ExpiryQuiet.Late.P50) }, "dur"},
	{"  max", func(r PiRun) float64 { return float64(r.ExpiryQuiet.Late.Max) }, "dur"},
	{"lease expiry, flood: unwound past TTL p50", func(r PiRun) float64 { return float64(r.ExpiryFlood.Late.P50) }, "dur"},
	{"  max", func(r PiRun) float64 { return float64(r.ExpiryFlood.Late.Max) }, "dur"},
	{"  unwind began (ABORT) past TTL, max", func(r PiRun) float64 { return float64(r.ExpiryFlood.Abort.Max) }, "dur"},
	{"  the expiring agent's round trips p50", func(r PiRun) float64 { return float64(r.ExpiryFlood.RTT.P50) }, "dur"},
	{"  max", func(r PiRun) float64 { return float64(r.ExpiryFlood.RTT.Max) }, "dur"},
	{"  its lease lapsed before its heartbeat", func(r PiRun) float64 { return float64(r.ExpiryFlood.Lapsed) }, "n"},
	{"start on a new journal (exec to READY=1)", func(r PiRun) float64 { return float64(r.StartNs) }, "dur"},
	{"restart, big journal, no checkpoint", func(r PiRun) float64 { return float64(r.RestartCold) }, "dur"},
	{"restart, big journal, after a clean stop", func(r PiRun) float64 { return float64(r.RestartWarm) }, "dur"},
	{"RSS idle, MiB", func(r PiRun) float64 { return float64(r.IdleRSS.KiB) }, "MiB"},
	{"RSS peak (VmHWM), MiB", func(r PiRun) float64 { return float64(r.PeakKiB) }, "MiB"},
	{"daemon CPU time / wall", func(r PiRun) float64 { return 100 * float64(r.CPUTimeNs) / math.Max(1, float64(r.WallNs)) }, "pct"},
	{"periods throttled", func(r PiRun) float64 {
		return 100 * float64(r.Throttle.Throttled) / math.Max(1, float64(r.Throttle.Periods))
	}, "pct"},
	{"journal fsync, mean as timed by the daemon", func(r PiRun) float64 { return float64(r.JournalFsyncMeanNs) }, "dur"},
}

func fmtPi(v float64, unit string) string {
	switch unit {
	case "dur":
		if v == 0 {
			return "-"
		}
		return fmtDur(time.Duration(v))
	case "MiB":
		return fmt.Sprintf("%.1f", v/1024)
	case "pct":
		return fmt.Sprintf("%.0f%%", v)
	case "ratio":
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// fmtRange is lo–hi, or one value when they are the same as printed.
func fmtRange(vs []float64, unit string) string {
	if len(vs) == 0 {
		return "-"
	}
	lo, hi := vs[0], vs[0]
	for _, v := range vs {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	a, b := fmtPi(lo, unit), fmtPi(hi, unit)
	if a == b {
		return a
	}
	return a + "–" + b
}

// piColumn is one condition and one daemon.
type piColumn struct {
	cpu    float64
	daemon string
}

// runsOf are the column's runs, by round.
func (res *PiResult) runsOf(c piColumn) map[int]PiRun {
	out := map[int]PiRun{}
	for _, r := range res.Runs {
		if r.CPU == c.cpu && r.Daemon == c.daemon {
			out[r.Round] = r
		}
	}
	return out
}

// printPi prints the table: a figure per row, the range over rounds per
// column, then the ratios of each quota to the whole machine (and, with
// two daemons, of the second to the first), taken round by round.
func printPi(w io.Writer, res *PiResult) {
	fmt.Fprintf(w, "bench pi: `run` as a process of its own (its embedded broker in it), on a CPU quota and a slow disk\n")
	if len(res.CPUs) > 1 {
		fmt.Fprintf(w, "quota: %s, CFS period %v, weight %d; agents: paho clients in this process, outside the quota\n",
			res.Cgroup, time.Duration(res.PeriodNs), res.Weight)
	} else {
		fmt.Fprintf(w, "quota: %s; agents: paho clients in this process\n", res.Cgroup)
	}
	fsync := "none added"
	if res.FsyncDelay != "0s" {
		fsync = res.FsyncDelay + " added to each (uniform), by the bench answering a seccomp filter's notification; the daemon's binary is unmodified"
	}
	fmt.Fprintf(w, "fsync and fdatasync of the daemon: %s\n", fsync)
	where := res.Dir
	if res.Disk != "" {
		where += " (" + res.Disk + ")"
	}
	fmt.Fprintf(w, "journals in %s, removed afterwards\n", where)
	if res.Warning != "" {
		fmt.Fprintf(w, "WARNING: %s\n", res.Warning)
	}
	fmt.Fprintf(w, "per run: %d durable steps one at a time; %d halts on each topic (alternating), each while agent %s pipelines %d steps\n",
		res.Steps, res.Halts, piFlood, res.FloodSteps)
	fmt.Fprintf(w, "(%d awaiting PUBACK at most) and published when %d are out, then reset over HTTP; meanwhile agent %s heartbeats a\n",
		piFloodWindow, res.FloodSteps/2, piOther)
	fmt.Fprintf(w, "%v lease every %v; %d lease expiries (TTL %v) quiet and %d while %s floods as fast as its client goes",
		piOtherTTL, piOtherTTL/4, res.Expiries, piExpiryTTL, res.Expiries, piFlood)
	if res.Records > 0 {
		fmt.Fprintf(w, "; restarts at %d records", res.Records)
	}
	fmt.Fprintf(w, "\nlatched: the halt's HALT record time (the supervisor's clock) less its publish; unwound: the expiry's first COMP_DONE\n")
	fmt.Fprintf(w, "record less the last heartbeat's publish + TTL. %d rounds, conditions in rotating order; each cell is the range over rounds\n", res.Rounds)
	var loads, press []float64
	for _, r := range res.Runs {
		loads, press = append(loads, r.Load[:]...), append(press, r.Pressure[:]...)
	}
	fmt.Fprintf(w, "machine during the runs: load average (1 min) %s, CPU pressure (some, avg10) %s%%\n\n",
		fmtRange(loads, "ratio"), fmtRange(press, "n"))

	var cols []piColumn
	for _, c := range res.CPUs {
		for _, d := range res.Daemons {
			cols = append(cols, piColumn{c, d})
		}
	}
	name := func(c piColumn) string {
		s := cpuName(c.cpu)
		if len(res.Daemons) > 1 {
			s += " " + daemonLabel(res.Daemons, c.daemon)
		}
		return s
	}
	type ratio struct {
		head     string
		num, den piColumn
	}
	var ratios []ratio
	for _, d := range res.Daemons {
		for _, c := range res.CPUs[1:] {
			h := fmt.Sprintf("%g/whole", c)
			if len(res.Daemons) > 1 {
				h += " " + daemonLabel(res.Daemons, d)
			}
			ratios = append(ratios, ratio{h, piColumn{c, d}, piColumn{0, d}})
		}
	}
	if len(res.Daemons) == 2 {
		a, b := res.Daemons[0], res.Daemons[1]
		for _, c := range res.CPUs {
			ratios = append(ratios, ratio{fmt.Sprintf("%s/%s %s", daemonLabel(res.Daemons, b), daemonLabel(res.Daemons, a), cpuName(c)),
				piColumn{c, b}, piColumn{c, a}})
		}
	}

	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	head := ""
	for _, c := range cols {
		head += "\t" + name(c)
	}
	for _, r := range ratios {
		head += "\t" + r.head
	}
	fmt.Fprintln(tw, head)
	for _, m := range piMeasures {
		row := m.name
		for _, c := range cols {
			var vs []float64
			for _, r := range res.runsOf(c) {
				vs = append(vs, m.get(r))
			}
			if m.unit == "dur" && allZero(vs) {
				row += "\t-"
				continue
			}
			row += "\t" + fmtRange(vs, m.unit)
		}
		for _, rt := range ratios {
			num, den := res.runsOf(rt.num), res.runsOf(rt.den)
			var vs []float64
			for round, n := range num {
				if d, ok := den[round]; ok && m.get(d) != 0 && (m.unit == "dur" || m.unit == "MiB") {
					vs = append(vs, m.get(n)/m.get(d))
				}
			}
			row += "\t" + fmtRange(vs, "ratio")
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	writeTrimmed(w, table.String())

	// The goals of issue 25, at 0.25 of a core, per daemon.
	for _, d := range res.Daemons {
		runs := res.runsOf(piColumn{piGoalCPU, d})
		if len(runs) == 0 {
			continue
		}
		var haltP99, expLate time.Duration
		lost, expired := 0, 0
		for _, r := range runs {
			for _, h := range []PiHalts{r.HaltCmd, r.HaltEstop} {
				haltP99 = max(haltP99, time.Duration(h.Reply.P99), time.Duration(h.Latched.P99))
				lost += h.Lost + h.Unrecorded
			}
			expired += r.Other.Expired
			expLate = max(expLate, time.Duration(r.ExpiryFlood.Late.Max), time.Duration(r.ExpiryQuiet.Late.Max))
		}
		label := ""
		if len(res.Daemons) > 1 {
			label = " " + daemonLabel(res.Daemons, d)
		}
		fmt.Fprintf(w, "\ngoals at %g CPU%s: halt p99 ≤ %v on both topics, reply and latch (worst run %s): %s; none lost (%d): %s;\n",
			piGoalCPU, label, goalPiHaltP99, fmtDur(haltP99), fmtMet(haltP99 <= goalPiHaltP99), lost, fmtMet(lost == 0))
		fmt.Fprintf(w, "  the bystander's lease never expired (%d): %s; lease expiry ≤ TTL + %v (worst %s): %s\n",
			expired, fmtMet(expired == 0), goalPiExpiryLate, fmtDur(expLate), fmtMet(expLate <= goalPiExpiryLate))
	}
	if len(res.Daemons) > 1 {
		fmt.Fprintln(w)
		for i, d := range res.Daemons {
			fmt.Fprintf(w, "%s: %s\n", daemonLabel(res.Daemons, d), res.Daemons[i])
		}
	}
	fmt.Fprintf(w, "\nTook %s.\n", time.Duration(res.TookNs).Round(100*time.Millisecond))
}

func allZero(vs []float64) bool {
	for _, v := range vs {
		if v != 0 {
			return false
		}
	}
	return true
}

// daemonLabel names a daemon in the table: its file name, or its place in
// the list when two share one.
func daemonLabel(all []string, d string) string {
	base := filepath.Base(d)
	for _, o := range all {
		if o != d && filepath.Base(o) == base {
			for i, x := range all {
				if x == d {
					return fmt.Sprintf("#%d", i+1)
				}
			}
		}
	}
	return base
}
