package prove

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/rollback"
)

const (
	cleanScenario = "../../../../examples/scenarios/pick.yaml"
	dirtyScenario = "../../../../examples/scenarios/kick.yaml"
)

// TestClassify runs the classifier on fabricated (engine, world) pairs,
// including both ways the engine can disagree with the world, and checks
// that a disagreement is printed with both views.
func TestClassify(t *testing.T) {
	report := func(buckets ...rollback.Bucket) EngineView {
		r := &rollback.Report{Saga: 1}
		for i, b := range buckets {
			r.Steps = append(r.Steps, rollback.StepReport{Step: uint32(i + 1), Actuator: fmt.Sprintf("a%d", i+1), Outcome: rollback.Applied, Bucket: b})
		}
		return newEngineView([]*rollback.Report{r}, false)
	}
	home := []WorldView{{Actuator: "a1", Kind: "servo", Measure: "position", Start: 10, End: 10}}
	moved := []WorldView{{Actuator: "a1", Kind: "servo", Measure: "position", Start: 10, End: 45}}
	unread := []WorldView{{Actuator: "a1", Kind: "servo", Measure: "position", Start: 10, End: 10, Error: "link lost"}}
	kicked := []WorldView{{Actuator: "k", Kind: "pulse", Measure: "kicks", Start: 0, End: 1}}
	C, O, F, U, S := rollback.Compensated, rollback.Orphaned, rollback.CompensationFailed, rollback.Unresolved, rollback.FallbackSafe
	tests := []struct {
		name  string
		eng   EngineView
		world []WorldView
		want  string
	}{
		{"clean and home", report(C, C), home, Clean},
		{"no steps, nothing moved", report(), home, Clean},
		{"clean but moved", report(C, C), moved, EngineDisagrees},
		{"clean but a kick happened", report(C), kicked, EngineDisagrees},
		{"clean but unreadable", report(C), unread, EngineDisagrees},
		{"partial and moved", report(S, U), moved, Dirty},
		{"orphaned kick", report(C, O), kicked, Dirty},
		{"orphaned, no kick happened", report(C, O), home, Dirty},
		{"partial but home", report(F), home, EngineDisagrees},
		{"orphaned and failed but home", report(O, F), home, EngineDisagrees},
	}
	for _, tt := range tests {
		got, why := classify(tt.eng, tt.world)
		if got != tt.want {
			t.Errorf("%s: %s (%s), want %s", tt.name, got, why, tt.want)
		}
	}

	// Printed: a disagreement shows what the engine said and what the
	// world shows, side by side, and the summary calls it a bug.
	p := &ProbeResult{Step: 1, Actuator: "a1", Value: 45, Shape: "timeout-applied", Engine: report(C), World: moved}
	p.Verdict, p.Why = classify(p.Engine, p.World)
	rep := &Report{Scenario: "s.yaml", Config: "c.yaml", Steps: []Step{{Actuator: "a1", Value: 45, Line: 3}},
		Shapes: baseShapes[:1], Probes: []*ProbeResult{p}, Summary: Summary{Probes: 1, EngineDisagrees: 1}}
	pr := &prober{sc: &Scenario{Steps: rep.Steps, Interval: defaultInterval}, dry: []rollback.StepResult{{Step: 1, Value: 45}}}
	var b bytes.Buffer
	printReport(&b, rep, pr)
	out := b.String()
	for _, want := range []string{"ENGINE DISAGREES: step 1 a1 → 45, timeout-applied", "engine: clean", "step 1 a1", "compensated",
		"world:", "a1         servo    position 10 → 45  MOVED", "1 probes: 0 CLEAN, 0 DIRTY, 1 ENGINE DISAGREES", "report this as a bug"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// FuzzParseScenario feeds the scenario parser arbitrary bytes: it must
// never panic, and what it accepts must be usable.
func FuzzParseScenario(f *testing.F) {
	for _, p := range []string{cleanScenario, dirtyScenario} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{"", "steps: []", "steps:\n  - {actuator: a, value: 1}\n  - {actuator: b}\n", "interval: 2s\nconfig: x\nsteps: [{actuator: a, value: .inf}]",
		"steps: [{actuator: a, value: 1, value: 2}]", "---\n---\n", "steps: &a [*a]", "steps:\n  - !!map {actuator: a, value: 0x10}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := parseScenario(data, "fuzz.yaml")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml:") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if len(sc.Steps) == 0 || sc.Interval <= 0 || sc.Interval > maxInterval {
			t.Fatalf("accepted a scenario it cannot run: %+v", sc)
		}
		for _, st := range sc.Steps {
			if st.Actuator == "" || st.Line < 1 {
				t.Fatalf("accepted a step without actuator or line: %+v", st)
			}
		}
	})
}

// TestHangShapesHangWhateverTheTimeout: a hang shape is a device that took
// the command and never answered, so its step is in doubt however short
// the driver timeout. The timeout counts from the device taking the command:
// counted from the call, a timeout that passed before the device looked
// at the command (1ns here; 20ms on a slow machine such as a Pi Zero or
// qemu, the default) left it unsent — a refusal, and every probe still
// CLEAN, testing less than it said.
func TestHangShapesHangWhateverTheTimeout(t *testing.T) {
	var out bytes.Buffer
	if err := Run([]string{"--json", "--driver-timeout", "1ns", cleanScenario}, &out); err != nil {
		t.Fatalf("prove: %v\n%s", err, out.String())
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	hangs := map[string]bool{"timeout-applied": true, "timeout-lost": true, "compensation-retried": true}
	n := 0
	for _, p := range rep.Probes {
		if !hangs[p.Shape] {
			continue
		}
		n++
		var got rollback.Outcome
		for _, s := range p.Engine.Steps {
			if int(s.Step) == p.Step {
				got = s.Outcome
			}
		}
		if got != rollback.InDoubt || p.Verdict != Clean {
			t.Errorf("step %d %s: outcome %q, verdict %s (%s); want in_doubt, CLEAN", p.Step, p.Shape, got, p.Verdict, p.Why)
		}
	}
	if n == 0 || n != 3*len(rep.Steps) {
		t.Fatalf("%d hang probes for %d steps, want 3 a step", n, len(rep.Steps))
	}
}
