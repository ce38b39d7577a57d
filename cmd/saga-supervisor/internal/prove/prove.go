// Package prove is `saga-supervisor prove`: it breaks a user's sequence at
// every step in every failure shape, on a simulated copy of their robot,
// and checks that the world comes back to where the saga found it and that
// the engine's report says so truthfully. The scenario parser is in
// scenario.go, the failure shapes in shapes.go, the simulated robot in
// rig.go on a virtual clock (clock.go), the supervisor processes that crash
// on it in process.go and their file system in faultfs.go.
//
// Each probe runs on a fresh simulated world (kept in memory, on a virtual
// clock) with the real engine and a real journal in its own directory. A
// crash is simulated in-process: at the effect, the supervisor "process" is
// severed — from that instant nothing it writes reaches the journal and
// nothing it drives reaches the world, as after a SIGKILL — and a second
// process takes over the same journal through package recovery.
package prove

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
)

const (
	// defaultInterval is the virtual time between two steps when the
	// scenario gives none: what the slew limits (max_rate) measure against.
	defaultInterval = time.Second
	// maxInterval bounds a scenario's interval.
	maxInterval = time.Hour
	// settleTime is how far the virtual clock moves before the world is
	// compared, so that every simulated servo has finished its move.
	settleTime = 24 * time.Hour
	// callBound bounds every driver call that is not hung on purpose.
	// A simulated device answers at once; the bound is wall time and generous
	// so that a loaded machine (the race detector, a build running) never
	// turns a healthy step into an in-doubt one and a probe into noise.
	callBound = 10 * time.Second
	// segmentSize keeps each probe's journal small: a probe writes a
	// few dozen records, and a new journal writes its first segment in full.
	segmentSize = 64 << 10
	// workers probes run at once. Each has its own world, clock and
	// journal; most of a probe's time is spent waiting for fsync, so a few
	// overlap well even on one core.
	workers = 4
)

// Verdicts of a probe.
const (
	Clean           = "CLEAN"
	Dirty           = "DIRTY"
	EngineDisagrees = "ENGINE DISAGREES"
)

// Report is the whole run, as printed with --json.
type Report struct {
	Scenario     string         `json:"scenario"`
	Config       string         `json:"config"`
	Substituted  []string       `json:"substituted,omitempty"` // non-sim drivers simulated
	Irreversible []string       `json:"irreversible,omitempty"`
	Steps        []Step         `json:"steps"`
	Shapes       []Shape        `json:"shapes"`
	Probes       []*ProbeResult `json:"probes"`
	Summary      Summary        `json:"summary"`
}

// Summary counts the probes by verdict.
type Summary struct {
	Probes          int `json:"probes"`
	Clean           int `json:"clean"`
	Dirty           int `json:"dirty"`
	EngineDisagrees int `json:"engine_disagrees"`
}

// Run is `saga-supervisor prove [flags] SCENARIO.yaml`: exit 0 only if
// every probe is CLEAN, 1 if any is not, 2 for a bad scenario or flags.
func Run(args []string, w io.Writer) error {
	fs := cli.NewFlags("prove")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	walDir := fs.String("wal-dir", "", "keep each probe's journal under this directory (new or empty), for verify, graph and certify")
	permanent := fs.Bool("permanent-compensation-failures", false, "also probe compensations that never succeed (expected DIRTY)")
	timeout := fs.Duration("driver-timeout", 20*time.Millisecond, "how long a hung driver call waits before it times out")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: saga-supervisor prove [flags] SCENARIO.yaml")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return cli.Exit(2, "%v", err)
	}
	if fs.NArg() == 0 {
		return cli.Exit(2, "usage: saga-supervisor prove [flags] SCENARIO.yaml")
	}
	file := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil { // flags may follow the file
		return cli.Exit(2, "%v", err)
	}
	if fs.NArg() > 0 {
		return cli.Exit(2, "one scenario at a time (extra arguments: %v)", fs.Args())
	}
	if *timeout <= 0 || *timeout > callBound {
		return cli.Exit(2, "--driver-timeout must be in (0, %s]", callBound)
	}
	sc, cfg, err := LoadScenario(file)
	if err != nil {
		return cli.Exit(2, "%v", err)
	}
	root, cleanup, err := probeRoot(*walDir)
	if err != nil {
		return cli.Exit(2, "%v", err)
	}
	defer cleanup()

	pr := &prober{sc: sc, cfg: cfg, timeout: *timeout, root: root}
	if err := pr.dryRun(); err != nil {
		var bad *badScenario
		if errors.As(err, &bad) {
			return cli.Exit(2, "%v", err)
		}
		return err
	}
	shapes := slices.Clone(baseShapes)
	if *permanent {
		shapes = append(shapes, permanentShape)
	}
	rep := &Report{Scenario: file, Config: cfg.File(), Steps: sc.Steps, Shapes: shapes}
	if sc.Config == "" {
		rep.Config = "the embedded default config"
	}
	for _, name := range cfg.ActuatorNames() {
		if a := cfg.Actuators[name]; a.Driver != "sim" {
			rep.Substituted = append(rep.Substituted, fmt.Sprintf("actuator %s: driver %s simulated as a %s", name, a.Driver, a.Kind))
		}
	}
	for _, name := range cfg.SupplyNames() {
		if d := cfg.Supplies[name].Driver; d != "sim" {
			rep.Substituted = append(rep.Substituted, fmt.Sprintf("supply %s: driver %s simulated at %g V", name, d, supplyVolts(cfg.Supplies[name])))
		}
	}
	for i, st := range sc.Steps {
		if kind := cfg.Actuators[st.Actuator].Kind; !kind.Reversible() {
			rep.Irreversible = append(rep.Irreversible, fmt.Sprintf("step %d %s (%s, line %d)", i+1, st.Actuator, kind, st.Line))
		}
	}
	if rep.Probes, err = pr.probeAll(shapes); err != nil {
		return err
	}
	for _, res := range rep.Probes {
		if *walDir == "" {
			res.Journal = ""
		}
		switch res.Verdict {
		case Clean:
			rep.Summary.Clean++
		case Dirty:
			rep.Summary.Dirty++
		default:
			rep.Summary.EngineDisagrees++
		}
	}
	rep.Summary.Probes = len(rep.Probes)

	if *asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printReport(w, rep, pr)
	}
	if rep.Summary.Clean != rep.Summary.Probes {
		return &cli.ExitError{Code: 1, Err: fmt.Errorf("%d of %d probes are not CLEAN", rep.Summary.Probes-rep.Summary.Clean, rep.Summary.Probes)}
	}
	return nil
}

// probeRoot returns the directory the probes' journals go in: the user's
// (which must be new or empty: a probe must start on an empty journal), or a
// temporary one removed afterwards.
func probeRoot(keep string) (string, func(), error) {
	if keep == "" {
		dir, err := os.MkdirTemp("", "saga-prove-")
		if err != nil {
			return "", nil, err
		}
		return dir, func() { os.RemoveAll(dir) }, nil
	}
	ents, err := os.ReadDir(keep)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(keep, 0o700); err != nil {
			return "", nil, err
		}
	case err != nil:
		return "", nil, fmt.Errorf("--wal-dir: %w", err)
	case len(ents) > 0:
		return "", nil, fmt.Errorf("--wal-dir %s is not empty: give a new or empty directory", keep)
	}
	return keep, func() {}, nil
}
