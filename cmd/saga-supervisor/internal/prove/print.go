package prove

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// printReport writes the table and the summary.
func printReport(w io.Writer, rep *Report, pr *prober) {
	fmt.Fprintf(w, "prove %s on %s: %d steps in one saga, each broken in %d shapes: %d probes\n",
		rep.Scenario, rep.Config, len(rep.Steps), len(rep.Shapes), len(rep.Probes))
	for _, s := range rep.Substituted {
		fmt.Fprintf(w, "note: %s (the probes never touch real hardware)\n", s)
	}
	fmt.Fprintf(w, "virtual time between steps %s; a hung driver call times out after %s\n", pr.sc.Interval, pr.timeout)
	if pr.cfg != nil && pr.cfg.Journal.Durability == rollback.FirstTouch {
		fmt.Fprintln(w, "note: durability first-touch: only a saga's first intent on an actuator is durable before its effect, so a crash may lose later intents; recovery still restores each actuator to where the saga found it")
	}
	for i, st := range pr.sc.Steps {
		note := ""
		if d := pr.dry[i]; d.Clamped {
			note = fmt.Sprintf(" (clamped to %g)", d.Value)
		}
		fmt.Fprintf(w, "  step %d  %s → %g%s  (line %d)\n", i+1, st.Actuator, st.Value, note, st.Line)
	}
	fmt.Fprintln(w, "shapes:")
	for _, s := range rep.Shapes {
		fmt.Fprintf(w, "  %-21s %s\n", s.Name, s.About)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tSHAPE\tENGINE\tWORLD\tVERDICT")
	for _, p := range rep.Probes {
		fmt.Fprintf(tw, "%d %s → %g\t%s\t%s\t%s\t%s\n", p.Step, p.Actuator, p.Value, p.Shape, engineWord(p.Engine), worldWord(p.World), p.Verdict)
	}
	tw.Flush()
	// A DIRTY probe is the engine telling the truth about a world it could
	// not restore: one line says which. A disagreement is a bug in the
	// engine (or in this command) and gets both views in full.
	if rep.Summary.Dirty > 0 {
		fmt.Fprintln(w)
	}
	for _, p := range rep.Probes {
		if p.Verdict == Dirty {
			fmt.Fprintf(w, "DIRTY: step %d %s, %s: %s\n", p.Step, p.Actuator, p.Shape, p.Why)
		}
	}
	for _, p := range rep.Probes {
		if p.Verdict == EngineDisagrees {
			fmt.Fprintf(w, "\n%s: step %d %s → %g, %s: %s\n", p.Verdict, p.Step, p.Actuator, p.Value, p.Shape, p.Why)
			fmt.Fprint(w, cli.Indent(probeViews(p)))
		}
	}
	s := rep.Summary
	fmt.Fprintf(w, "\n%d probes: %d CLEAN, %d DIRTY, %d ENGINE DISAGREES\n", s.Probes, s.Clean, s.Dirty, s.EngineDisagrees)
	for _, irr := range rep.Irreversible {
		fmt.Fprintf(w, "irreversible: %s — no undo exists; a failure at or after it leaves the world changed\n", irr)
	}
	switch {
	case s.Clean == s.Probes:
		fmt.Fprintln(w, "PROVEN: every probe unwound clean, and the world came back every time")
	case s.EngineDisagrees > 0:
		fmt.Fprintln(w, "NOT PROVEN, and the engine's word did not match the world: report this as a bug")
	default:
		fmt.Fprintln(w, "NOT PROVEN: some failures leave the world changed (the engine says so)")
	}
}

// probeViews prints both views of a probe: the engine's report and the
// world against its start.
func probeViews(p *ProbeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "engine: %s", p.Engine.Verdict)
	if p.Engine.Recovered {
		b.WriteString(", finished by recovery")
	}
	if p.Engine.Halted {
		b.WriteString(", halted")
	}
	b.WriteString("\n")
	for _, s := range p.Engine.Steps {
		fmt.Fprintf(&b, "  step %d %-10s %-9s %s", s.Step, s.Actuator, s.Outcome, s.Bucket)
		if s.Attempts > 1 {
			fmt.Fprintf(&b, " after %d attempts", s.Attempts)
		}
		if s.Error != "" {
			fmt.Fprintf(&b, " — %s", s.Error)
		}
		b.WriteString("\n")
	}
	b.WriteString("world:\n")
	for _, v := range p.World {
		mark := "at start"
		if v.Moved() {
			mark = "MOVED"
		}
		fmt.Fprintf(&b, "  %-10s %-8s %s %g → %g  %s", v.Actuator, v.Kind, v.Measure, v.Start, v.End, mark)
		if v.Error != "" {
			fmt.Fprintf(&b, " (%s)", v.Error)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func engineWord(e EngineView) string {
	if e.Clean {
		return "clean"
	}
	var bad []string
	for b, n := range countBuckets(e) {
		bad = append(bad, fmt.Sprintf("%d %s", n, b))
	}
	slices.Sort(bad)
	return "partial (" + strings.Join(bad, ", ") + ")"
}

func countBuckets(e EngineView) map[rollback.Bucket]int {
	m := map[rollback.Bucket]int{}
	for _, s := range e.Steps {
		if s.Bucket != rollback.Compensated {
			m[s.Bucket]++
		}
	}
	return m
}

func worldWord(ws []WorldView) string {
	var moved []string
	for _, v := range ws {
		if v.Moved() {
			moved = append(moved, v.String())
		}
	}
	if len(moved) == 0 {
		return "at start"
	}
	return "moved: " + strings.Join(moved, ", ")
}
