// Command saga-modelcheck is the bounded model check of the real engine,
// journal and recovery (docs/PROOF.md): every fault, in-doubt,
// compensation-failure and crash case up to a bound, on simulated
// actuators and a crash-simulating file system. Its verdict depends on the
// code alone, not on the machine it runs on, so it is a tool of the
// project's tests and CI (`make check`) rather than a command of the
// daemon's binary, whose size on a Pi it would grow by 0.2 MB.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-modelcheck/internal/modelcheck"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(cli.Status(err))
	}
}

// run is the model check with its flags.
func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("saga-modelcheck", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	maxSteps := fs.Int("max-steps", 6, "longest saga checked (1..12)")
	sagas := fs.Int("sagas", 1, "1: single sagas; 2: also two agents' sagas interleaved, one lease expiring")
	allRec := fs.Bool("all-recovery-crashes", false, "cut the power at every call of every recovery (default: one call per crash case)")
	caseID := fs.String("case", "", "replay one case by its id and print its trace")
	workers := fs.Int("workers", runtime.GOMAXPROCS(0), "cases run in parallel")
	durability := fs.String("durability", "every-step", "every-step, or both: also every case in first-touch durability")
	every := fs.Duration("progress-every", 500*time.Millisecond, "how often the progress line is redrawn on a terminal")
	haltSync := fs.Bool("halt-sync", true, "also latch a halt (and, with two sagas, a zone's halt) from inside every journal sync of each run, with and without the disk dying there, each followed by a restart")
	haltSyncSteps := fs.Int("halt-sync-steps", 0, "lay the halts at a sync only on runs of at most this many steps in all (0: every run)")
	verbose := fs.Bool("v", false, "print the invariants and the full account even when the output is not a terminal (default there: one summary line)")
	if err := fs.Parse(args); err != nil {
		return cli.Exit(2, "%v", err)
	}
	if *caseID != "" {
		c, err := modelcheck.ParseCase(*caseID)
		if err != nil {
			return cli.Exit(2, "%v", err)
		}
		o := modelcheck.Run(c)
		fmt.Fprint(stdout, o)
		if !o.OK() {
			return cli.Exit(1, "case %s violates %d invariants", c, len(o.Violations))
		}
		return nil
	}
	if *maxSteps < 1 || *maxSteps > 12 {
		return cli.Exit(2, "check: --max-steps must be 1..12")
	}
	if *sagas != 1 && *sagas != 2 {
		return cli.Exit(2, "check: --sagas must be 1 or 2")
	}
	if *durability != "every-step" && *durability != "both" {
		return cli.Exit(2, "check: --durability must be every-step or both")
	}
	cfg := modelcheck.Config{MaxSteps: *maxSteps, Sagas: *sagas, AllRecoveryCrashes: *allRec, Workers: *workers,
		FirstTouch: *durability == "both", NoHaltSync: !*haltSync, HaltSyncSteps: *haltSyncSteps}
	bound := fmt.Sprintf("sagas of 1..%d steps", *maxSteps)
	if *sagas == 2 {
		bound += fmt.Sprintf(", and two interleaved sagas of %d steps in all", *maxSteps)
	}
	bound += "; durability " + *durability
	switch {
	case !*haltSync:
		bound += "; no halts at a sync"
	case *haltSyncSteps > 0:
		bound += fmt.Sprintf("; halts at every sync of runs of up to %d steps", *haltSyncSteps)
	default:
		bound += "; halts at every sync"
	}
	// A person at a terminal gets the invariants, a progress line while
	// it runs and the full account; a log (CI, a pipe) gets one line.
	full := *verbose || cli.Interactive(os.Stdout)
	if full {
		fmt.Fprintf(stdout, "model check: the real engine, journal and recovery on simulated actuators and a crash-simulating file system\n")
		fmt.Fprintf(stdout, "bound: %s; %d workers\n\ninvariants:\n", bound, *workers)
		for i, inv := range modelcheck.Invariants {
			fmt.Fprintf(stdout, "  %2d. %s\n", i+1, inv)
		}
	}
	var bar *progressLine
	if cli.Interactive(os.Stderr) {
		bar = &progressLine{w: os.Stderr}
		cfg.Progress, cfg.ProgressEvery = bar.draw, *every
	}
	res := modelcheck.Check(cfg)
	bar.clear()
	if !full {
		fmt.Fprintf(stdout, "model check: %d cases in %.1fs (%.0f/s), %d violations; %s; %d crash-free, %d two-saga, %d power cuts (%d struck mid-run), %d cuts in recovery (%d struck), %d recoveries from a checkpoint, %d halts at a sync (%d latched)\n",
			res.Cases, res.Took.Seconds(), float64(res.Cases)/res.Took.Seconds(), len(res.Failed), bound,
			res.Base, res.TwoSaga, res.Crash, res.CrashesStruck, res.RecoveryCrash, res.RecoveryCrashesStruck, res.FromCheckpoint, res.HaltSync, res.HaltFired)
	} else {
		fmt.Fprintf(stdout, "\ncases run:        %d in %.1fs (%.0f/s)\n", res.Cases, res.Took.Seconds(), float64(res.Cases)/res.Took.Seconds())
		fmt.Fprintf(stdout, "  crash-free:     %d single-saga, %d two-saga, %d zone\n", res.Base, res.TwoSaga, res.Zone)
		fmt.Fprintf(stdout, "  power cut:      %d (%d struck mid-run, the rest at the end), plus %d cut points equivalent to one run\n",
			res.Crash, res.CrashesStruck, res.CrashEquivalent)
		fmt.Fprintf(stdout, "  cut in recovery: %d (%d struck)\n", res.RecoveryCrash, res.RecoveryCrashesStruck)
		fmt.Fprintf(stdout, "  recoveries that started from a checkpoint: %d\n", res.FromCheckpoint)
		fmt.Fprintf(stdout, "  halt at a sync:  %d (%d latched, the rest found the engine halted already), each restarted; laid on %d runs of two committing sagas besides\n",
			res.HaltSync, res.HaltFired, res.HaltBase)
		fmt.Fprintf(stdout, "violations:       %d cases\n", len(res.Failed))
	}
	if len(res.Failed) > 0 {
		o := res.Failed[0]
		fmt.Fprintf(stdout, "\nfirst counterexample:\n%s\nreplay: go run ./cmd/saga-modelcheck --case %s\n\n", o, o.Case)
		return cli.Exit(1, "check: %d of %d cases violate an invariant", len(res.Failed), res.Cases)
	}
	return nil
}

// progressLine redraws one line on a terminal: cases run, the rate, the
// share of crash-free cases done and the time left.
type progressLine struct {
	w    io.Writer
	drew bool
}

func (p *progressLine) draw(pr modelcheck.Progress) {
	line := fmt.Sprintf("model check: %d cases, %.0f/s, %d of %d runs (%d%%)", pr.Cases, pr.Rate(),
		pr.BaseDone, pr.BaseTotal, 100*pr.BaseDone/max(pr.BaseTotal, 1))
	if left, ok := pr.ETA(); ok {
		line += ", ETA " + left.Round(time.Second).String()
	}
	if pr.Violations > 0 {
		line += fmt.Sprintf(", %d VIOLATIONS", pr.Violations)
	}
	fmt.Fprintf(p.w, "\r\033[K%s", line)
	p.drew = true
}

// clear wipes the line so the results start on a clean one. A nil
// progressLine (no terminal) does nothing.
func (p *progressLine) clear() {
	if p != nil && p.drew {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
