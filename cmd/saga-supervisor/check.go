package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/saga-supervisor/saga-supervisor/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/internal/modelcheck"
)

// runCheck is `check`: the bounded model check of the real engine.
func runCheck(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	maxSteps := fs.Int("max-steps", 6, "longest saga checked (1..12)")
	sagas := fs.Int("sagas", 1, "1: single sagas; 2: also two agents' sagas interleaved, one lease expiring")
	allRec := fs.Bool("all-recovery-crashes", false, "cut the power at every call of every recovery (default: one call per crash case)")
	caseID := fs.String("case", "", "replay one case by its id and print its trace")
	workers := fs.Int("workers", runtime.GOMAXPROCS(0), "cases run in parallel")
	durability := fs.String("durability", "every-step", "every-step, or both: also every case in first-touch durability")
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
	fmt.Fprintf(stdout, "model check: the real engine, journal and recovery on simulated actuators and a crash-simulating file system\n")
	fmt.Fprintf(stdout, "bound: sagas of 1..%d steps", *maxSteps)
	if *sagas == 2 {
		fmt.Fprintf(stdout, ", and two interleaved sagas of %d steps in all", *maxSteps)
	}
	fmt.Fprintf(stdout, "; durability %s; %d workers\n\ninvariants:\n", *durability, *workers)
	for i, inv := range modelcheck.Invariants {
		fmt.Fprintf(stdout, "  %2d. %s\n", i+1, inv)
	}
	res := modelcheck.Check(modelcheck.Config{MaxSteps: *maxSteps, Sagas: *sagas, AllRecoveryCrashes: *allRec, Workers: *workers,
		FirstTouch: *durability == "both"})
	fmt.Fprintf(stdout, "\ncases run:        %d in %.1fs\n", res.Cases, res.Took.Seconds())
	fmt.Fprintf(stdout, "  crash-free:     %d single-saga, %d two-saga\n", res.Base, res.TwoSaga)
	fmt.Fprintf(stdout, "  power cut:      %d (%d struck mid-run, the rest at the end), plus %d cut points equivalent to one run\n",
		res.Crash, res.CrashesStruck, res.CrashEquivalent)
	fmt.Fprintf(stdout, "  cut in recovery: %d (%d struck)\n", res.RecoveryCrash, res.RecoveryCrashesStruck)
	fmt.Fprintf(stdout, "  recoveries that started from a checkpoint: %d\n", res.FromCheckpoint)
	fmt.Fprintf(stdout, "violations:       %d cases\n", len(res.Failed))
	if len(res.Failed) > 0 {
		o := res.Failed[0]
		fmt.Fprintf(stdout, "\nfirst counterexample:\n%s\nreplay: saga-supervisor check --case %s\n\n", o, o.Case)
		return cli.Exit(1, "check: %d of %d cases violate an invariant", len(res.Failed), res.Cases)
	}
	return nil
}
