package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/journaltool"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/prove"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

const (
	cleanScenario = "../../examples/scenarios/pick.yaml"
	dirtyScenario = "../../examples/scenarios/kick.yaml"
)

// quickExit stops the race detector's one-second sleep at exit (GORACE
// atexit_sleep_ms) in the binaries a test runs: prove's tests run it a few
// times, and the sleep would be most of their time.
func quickExit(t *testing.T) {
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
}

// readScenario parses an example the way prove does, so that expectations
// are computed from the file rather than written down.
func readScenario(t *testing.T, path string) (*prove.Scenario, *config.Config) {
	t.Helper()
	sc, cfg, err := prove.LoadScenario(path)
	if err != nil {
		t.Fatal(err)
	}
	return sc, cfg
}

// proveJSON runs prove --json and decodes its report.
func proveJSON(t *testing.T, args ...string) (*prove.Report, int) {
	t.Helper()
	out, code := run(t, append([]string{"prove", "--json"}, args...)...)
	// The exit message goes to stderr after the JSON; decode the JSON only.
	var rep prove.Report
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&rep); err != nil {
		t.Fatalf("prove %v: exit %d, output is not a JSON report (%v):\n%s", args, code, err, out)
	}
	return &rep, code
}

// checkCoverage asserts that every step was broken in every shape exactly
// once, and that the summary counts the probes.
func checkCoverage(t *testing.T, rep *prove.Report, steps int, shapes []prove.Shape) {
	t.Helper()
	if want := steps * len(shapes); len(rep.Probes) != want || rep.Summary.Probes != want {
		t.Fatalf("%d probes (summary %d), want %d steps × %d shapes = %d", len(rep.Probes), rep.Summary.Probes, steps, len(shapes), want)
	}
	seen := map[string]int{}
	counts := map[string]int{}
	for _, p := range rep.Probes {
		seen[fmt.Sprintf("%d/%s", p.Step, p.Shape)]++
		counts[p.Verdict]++
	}
	for k := 1; k <= steps; k++ {
		for _, sh := range shapes {
			if n := seen[fmt.Sprintf("%d/%s", k, sh.Name)]; n != 1 {
				t.Errorf("step %d shape %s probed %d times, want once", k, sh.Name, n)
			}
		}
	}
	s := rep.Summary
	if s.Clean != counts[prove.Clean] || s.Dirty != counts[prove.Dirty] || s.EngineDisagrees != counts[prove.EngineDisagrees] {
		t.Errorf("summary %+v does not count the probes' verdicts %v", s, counts)
	}
}

// stepOf returns the engine's line for step k of a probe.
func stepOf(p *prove.ProbeResult, k int) (prove.EngineStep, bool) {
	for _, s := range p.Engine.Steps {
		if int(s.Step) == k {
			return s, true
		}
	}
	return prove.EngineStep{}, false
}

// checkShapeTookEffect asserts that each probe's engine report shows the
// fault its shape claims, so a shape that silently did nothing fails.
func checkShapeTookEffect(t *testing.T, p *prove.ProbeResult, reversible bool) {
	t.Helper()
	s, ok := stepOf(p, p.Step)
	if !ok {
		t.Errorf("step %d %s: the report has no line for the broken step: %+v", p.Step, p.Shape, p.Engine)
		return
	}
	want := rollback.InDoubt
	if p.Shape == "driver-refuses" {
		want = rollback.Failed
	}
	if s.Outcome != want {
		t.Errorf("step %d %s: outcome %q, want %q", p.Step, p.Shape, s.Outcome, want)
	}
	crash := strings.HasPrefix(p.Shape, "crash-")
	if p.Engine.Recovered != crash {
		t.Errorf("step %d %s: finished by recovery %v, want %v", p.Step, p.Shape, p.Engine.Recovered, crash)
	}
	if p.Shape == "compensation-retried" {
		retried := false
		for _, s := range p.Engine.Steps {
			retried = retried || s.Attempts == 2 && s.Bucket == rollback.Compensated
		}
		if !retried && (reversible || p.Step > 1) {
			t.Errorf("step %d %s: no compensation needed a second attempt: %+v", p.Step, p.Shape, p.Engine.Steps)
		}
	}
}

func TestProveCleanScenario(t *testing.T) {
	quickExit(t)
	sc, _ := readScenario(t, cleanScenario)
	rep, code := proveJSON(t, cleanScenario)
	if code != 0 {
		t.Fatalf("prove on %s exited %d, want 0: %+v", cleanScenario, code, rep.Summary)
	}
	checkCoverage(t, rep, len(sc.Steps), prove.Shapes())
	for _, p := range rep.Probes {
		if p.Verdict != prove.Clean || !p.Engine.Clean {
			t.Errorf("step %d %s: %s (%s)", p.Step, p.Shape, p.Verdict, p.Why)
		}
		for _, w := range p.World {
			if w.Moved() {
				t.Errorf("step %d %s: %s moved", p.Step, p.Shape, w)
			}
		}
		checkShapeTookEffect(t, p, true)
	}
	if len(rep.Irreversible) != 0 || len(rep.Substituted) != 0 {
		t.Errorf("default config: irreversible %v, substituted %v; want none", rep.Irreversible, rep.Substituted)
	}
}

func TestProveDirtyScenario(t *testing.T) {
	quickExit(t)
	sc, cfg := readScenario(t, dirtyScenario)
	pulse := 0 // the first irreversible step
	for i, st := range sc.Steps {
		if !cfg.Actuators[st.Actuator].Kind.Reversible() {
			pulse = i + 1
			break
		}
	}
	if pulse == 0 {
		t.Fatalf("%s has no irreversible step", dirtyScenario)
	}
	out, code := run(t, "prove", dirtyScenario)
	if code != 1 {
		t.Fatalf("prove on %s exited %d, want 1:\n%s", dirtyScenario, code, out)
	}
	name := sc.Steps[pulse-1].Actuator
	if want := fmt.Sprintf("irreversible: step %d %s (%s, line %d)", pulse, name, actuators.Pulse, sc.Steps[pulse-1].Line); !strings.Contains(out, want) {
		t.Errorf("output does not name the irreversible step (%q):\n%s", want, out)
	}

	rep, code := proveJSON(t, dirtyScenario)
	if code != 1 {
		t.Fatalf("prove --json exited %d, want 1", code)
	}
	checkCoverage(t, rep, len(sc.Steps), prove.Shapes())
	for _, p := range rep.Probes {
		// Before the kick nothing irreversible happened; from the kick on
		// the world keeps it — unless the kick itself was refused.
		want := prove.Dirty
		if p.Step < pulse || p.Step == pulse && p.Shape == "driver-refuses" {
			want = prove.Clean
		}
		if p.Verdict != want {
			t.Errorf("step %d %s: %s, want %s (%s)", p.Step, p.Shape, p.Verdict, want, p.Why)
		}
		if p.Verdict == prove.Dirty {
			if _, ok := stepOf(p, pulse); !ok || !strings.Contains(p.Why, "orphaned") {
				t.Errorf("step %d %s: DIRTY without naming the orphaned kick: %s", p.Step, p.Shape, p.Why)
			}
		}
		checkShapeTookEffect(t, p, cfg.Actuators[p.Actuator].Kind.Reversible())
		// On the kick itself, the world tells whether a shape let the
		// effect happen: a kick cannot be taken back.
		if p.Step == pulse {
			applied := map[string]bool{"timeout-applied": true, "link-lost": true, "crash-after-effect": true, "compensation-retried": true}[p.Shape]
			for _, w := range p.World {
				if w.Actuator == name && w.Moved() != applied {
					t.Errorf("step %d %s: %s, want the kick applied = %v", p.Step, p.Shape, w, applied)
				}
			}
		}
	}
	s := rep.Summary
	if want := fmt.Sprintf("%d probes: %d CLEAN, %d DIRTY, %d ENGINE DISAGREES", s.Probes, s.Clean, s.Dirty, s.EngineDisagrees); !strings.Contains(out, want) {
		t.Errorf("text output lacks the summary %q:\n%s", want, out)
	}
	if s.EngineDisagrees != 0 || s.Dirty == 0 {
		t.Errorf("summary %+v: want DIRTY probes and no disagreement", s)
	}
}

// TestProvePermanentAndKeptJournals probes compensations that never
// succeed, keeps every journal, and reads them back: certify must agree
// with every verdict, and a crash must have left the step's outcome
// unjournaled (the dead process wrote nothing after its crash).
func TestProvePermanentAndKeptJournals(t *testing.T) {
	quickExit(t)
	sc, _ := readScenario(t, cleanScenario)
	dir := filepath.Join(t.TempDir(), "journals")
	rep, code := proveJSON(t, "--permanent-compensation-failures", "--wal-dir", dir, cleanScenario)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (the permanent failures are DIRTY)", code)
	}
	checkCoverage(t, rep, len(sc.Steps), append(prove.Shapes(), prove.PermanentShape()))
	for _, p := range rep.Probes {
		permanent := p.Shape == prove.PermanentShape().Name
		switch {
		case permanent && (p.Verdict != prove.Dirty || !p.Engine.Halted):
			t.Errorf("step %d %s: %s, halted %v; want DIRTY and halted (%s)", p.Step, p.Shape, p.Verdict, p.Engine.Halted, p.Why)
		case !permanent && p.Verdict != prove.Clean:
			t.Errorf("step %d %s: %s (%s)", p.Step, p.Shape, p.Verdict, p.Why)
		}
		if permanent {
			s, _ := stepOf(p, p.Step)
			if s.Bucket != rollback.FallbackSafe && s.Bucket != rollback.CompensationFailed {
				t.Errorf("step %d %s: broken step landed in %q, want its safe policy's bucket", p.Step, p.Shape, s.Bucket)
			}
		}
		if p.Journal == "" {
			t.Fatalf("step %d %s: no journal kept", p.Step, p.Shape)
		}
		// certify in-process: the same code as the command, without a
		// process start per journal.
		var out bytes.Buffer
		err := journaltool.Certify([]string{"--wal", p.Journal}, &out)
		if passed := err == nil; passed != (p.Verdict == prove.Clean) {
			t.Errorf("certify on the journal of a %s probe (step %d %s): %v\n%s", p.Verdict, p.Step, p.Shape, err, out.String())
		}
		if strings.HasPrefix(p.Shape, "crash-") {
			h, err := journaltool.ReadHistory(p.Journal)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range h.Saga(1).Steps {
				if int(s.Step) == p.Step && s.Outcome != "" {
					t.Errorf("step %d %s: the crashed process journaled an outcome (%s) after its crash", p.Step, p.Shape, s.Outcome)
				}
			}
		}
	}
	// A kept directory is never reused: a probe must start on an empty journal.
	if out, code := run(t, "prove", "--wal-dir", dir, cleanScenario); code != 2 || !strings.Contains(out, "not empty") {
		t.Errorf("prove into a used --wal-dir: exit %d, want 2:\n%s", code, out)
	}
}

// TestProveBadScenario runs scenarios that must be refused before any
// probe: each exits 2 and names the line marked "# <-". Every case runs
// in-process (the command's own code, without a process start); the ones
// marked binary also run through the real binary.
func TestProveBadScenario(t *testing.T) {
	quickExit(t)
	dir := t.TempDir()
	badConfig := strings.Replace(string(config.DefaultYAML), "device: arm1", "device: arm1\nspeed: 3", 1)
	if err := os.WriteFile(filepath.Join(dir, "bad-config.yaml"), []byte(badConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, yaml, want string
		binary           bool
	}{
		{"over the limit", "steps:\n  - {actuator: base, value: 45}\n  - {actuator: elbow, value: 170}  # <-\n", "refused LIMIT_MAX", true},
		{"unknown actuator", "steps:\n  - {actuator: base, value: 45}\n  - {actuator: wrist, value: 1}  # <-\n", "refused ACTUATOR_UNKNOWN", false},
		{"too fast", "config: slew.yaml\ninterval: 100ms\nsteps:\n  - {actuator: base, value: 20}\n  - {actuator: base, value: 40}  # <-\n", "refused LIMIT_SLEW", false},
		{"unknown key", "interval: 1s\nstepz:  # <-\n  - {actuator: base, value: 45}\n", `unknown key "stepz"`, true},
		{"no value", "steps:\n  - {actuator: base, value: 45}\n  - {actuator: base}  # <-\n", "step without value", false},
		{"not a number", "steps:\n  - actuator: base\n    value: far  # <-\n", "value: want a number", false},
		{"unknown step key", "steps:\n  - actuator: base\n    value: 1\n    speed: 3  # <-\n", `unknown key "speed"`, false},
		{"key twice", "steps:\n  - actuator: base\n    value: 1\n    value: 2  # <-\n", "written twice", false},
		{"second document", "steps:\n  - {actuator: base, value: 45}\n---  # <-\nsteps: []\n", "second YAML document", false},
		{"bad interval", "interval: 5  # <-\nsteps:\n  - {actuator: base, value: 45}\n", "interval", false},
		{"missing config", "config: nowhere.yaml  # <-\nsteps:\n  - {actuator: base, value: 45}\n", "nowhere.yaml", false},
		{"invalid config", "config: bad-config.yaml  # <-\nsteps:\n  - {actuator: base, value: 45}\n", "bad-config.yaml:", true},
		{"not finite", "steps:\n  - {actuator: base, value: .nan}  # <-\n", "refused NOT_FINITE", false},
	}
	slew := strings.Replace(string(config.DefaultYAML), "    max_rate: 0\n", "    max_rate: 50\n", 1)
	if slew == string(config.DefaultYAML) {
		t.Fatal("the default config no longer writes base's max_rate: 0; adjust the test")
	}
	if err := os.WriteFile(filepath.Join(dir, "slew.yaml"), []byte(slew), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, how, path string, line int, want, out string, code int) {
		t.Helper()
		if code != 2 {
			t.Fatalf("%s: exit %d, want 2:\n%s", how, code, out)
		}
		if loc := fmt.Sprintf("%s:%d:", path, line); !strings.Contains(out, loc) {
			t.Errorf("%s: the error does not name %s:\n%s", how, loc, out)
		}
		if !strings.Contains(out, want) {
			t.Errorf("%s: the error lacks %q:\n%s", how, want, out)
		}
		if strings.Contains(out, "probes") {
			t.Errorf("%s: probes ran on a bad scenario:\n%s", how, out)
		}
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("bad%d.yaml", i))
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			line := 0
			for n, l := range strings.Split(tt.yaml, "\n") {
				if strings.Contains(l, "# <-") {
					line = n + 1
				}
			}
			var stdout bytes.Buffer
			err := prove.Run([]string{path}, &stdout)
			code := 0
			var ee *cli.ExitError
			if errors.As(err, &ee) {
				code = ee.Code
			}
			check(t, "in-process", path, line, tt.want, fmt.Sprint(err)+stdout.String(), code)
			if tt.binary {
				out, code := run(t, "prove", path)
				check(t, "binary", path, line, tt.want, out, code)
			}
		})
	}
	for _, args := range [][]string{{}, {filepath.Join(dir, "none.yaml")}, {"--driver-timeout", "0s", cleanScenario}, {cleanScenario, "extra.yaml"}} {
		var ee *cli.ExitError
		if err := prove.Run(args, io.Discard); !errors.As(err, &ee) || ee.Code != 2 {
			t.Errorf("prove %v: %v, want exit 2", args, err)
		}
	}
}
