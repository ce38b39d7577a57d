package prove

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// WorldView is one actuator's state at the start and at the end of a probe:
// a position (read back) or, for a pulse, its kick count.
type WorldView struct {
	Actuator string  `json:"actuator"`
	Kind     string  `json:"kind"`
	Measure  string  `json:"measure"` // "position" or "kicks"
	Start    float64 `json:"start"`
	End      float64 `json:"end"`
	Error    string  `json:"error,omitempty"` // a read-back that failed: counted as moved
}

// Moved reports whether the actuator is not where it started.
func (v WorldView) Moved() bool {
	return v.Error != "" || math.Abs(v.End-v.Start) > 1e-9
}

// String says where the actuator went, e.g. "elbow 20→45" or "kicker
// 0→1 kicks".
func (v WorldView) String() string {
	s := fmt.Sprintf("%s %g→%g", v.Actuator, v.Start, v.End)
	if v.Measure == "kicks" {
		s += " kicks"
	}
	if v.Error != "" {
		s += " (" + v.Error + ")"
	}
	return s
}

// EngineView is what the engine reported for a probe.
type EngineView struct {
	Clean     bool         `json:"clean"`
	Verdict   string       `json:"verdict"` // "clean" or "partial"
	Halted    bool         `json:"halted"`
	Recovered bool         `json:"recovered"` // finished by a new process's recovery
	Steps     []EngineStep `json:"steps"`
}

// EngineStep is the engine's report of one step of a probe.
type EngineStep struct {
	Step     uint32           `json:"step"`
	Actuator string           `json:"actuator"`
	Outcome  rollback.Outcome `json:"outcome"`
	Bucket   rollback.Bucket  `json:"bucket"`
	Attempts uint32           `json:"attempts"`
	Error    string           `json:"error,omitempty"`
}

func newEngineView(reports []*rollback.Report, halted bool) EngineView {
	v := EngineView{Clean: true, Halted: halted}
	for _, r := range reports {
		v.Clean = v.Clean && r.Clean()
		v.Recovered = v.Recovered || r.Recovered
		for _, s := range r.Steps {
			v.Steps = append(v.Steps, EngineStep{Step: s.Step, Actuator: s.Actuator, Outcome: s.Outcome, Bucket: s.Bucket, Attempts: s.Attempts, Error: s.Error})
		}
	}
	v.Verdict = "clean"
	if !v.Clean {
		v.Verdict = "partial"
	}
	return v
}

// ProbeResult is one probe: step k broken in one shape.
type ProbeResult struct {
	Step     int         `json:"step"`
	Actuator string      `json:"actuator"`
	Value    float64     `json:"value"`
	Shape    string      `json:"shape"`
	Verdict  string      `json:"verdict"`
	Why      string      `json:"why"`
	Engine   EngineView  `json:"engine"`
	World    []WorldView `json:"world"`
	Journal  string      `json:"journal,omitempty"` // kept with --wal-dir
}

// classify compares the engine's word with the world. CLEAN: the engine
// says clean and the world is back at its start. DIRTY: the engine says
// partial and the world is not back — or is, but only because a step the
// engine could not undo (orphaned: a pulse) turned out not to have happened;
// the engine cannot know that, so saying partial is honest. ENGINE DISAGREES:
// anything else, and above all a clean report over a world that moved.
func classify(eng EngineView, world []WorldView) (verdict, why string) {
	var moved []string
	for _, w := range world {
		if w.Moved() {
			moved = append(moved, w.String())
		}
	}
	var notCompensated, notOrphaned []string
	for _, s := range eng.Steps {
		if s.Bucket != rollback.Compensated {
			notCompensated = append(notCompensated, fmt.Sprintf("step %d %s %s", s.Step, s.Actuator, s.Bucket))
			if s.Bucket != rollback.Orphaned {
				notOrphaned = append(notOrphaned, s.Actuator)
			}
		}
	}
	switch {
	case eng.Clean && len(moved) == 0:
		return Clean, "the engine says clean and the world is back at its start"
	case eng.Clean:
		return EngineDisagrees, fmt.Sprintf("the engine says clean but the world did not come back (%s)", strings.Join(moved, ", "))
	case len(moved) > 0:
		return Dirty, fmt.Sprintf("the engine says partial (%s) and the world did not come back (%s)", strings.Join(notCompensated, "; "), strings.Join(moved, ", "))
	case len(notOrphaned) == 0:
		return Dirty, fmt.Sprintf("the engine says partial (%s): no undo exists, so it cannot know the step had no effect", strings.Join(notCompensated, "; "))
	default:
		return EngineDisagrees, fmt.Sprintf("the engine says partial (%s) but the world is back at its start", strings.Join(notCompensated, "; "))
	}
}

// prober runs the probes of one scenario.
type prober struct {
	sc      *Scenario
	cfg     *config.Config
	timeout time.Duration // of a hung driver call
	root    string        // journals: one directory per probe
	dry     []rollback.StepResult
}

var owner = rollback.Owner{Agent: "prove", Lease: "prove", Epoch: 1}

// runOutcome is how a run of the steps ended.
type runOutcome struct {
	failedAt  int              // 1-based step that ended the run; 0 when it committed
	report    *rollback.Report // the unwind, when a step failed
	err       error            // a refusal or another error
	results   []rollback.StepResult
	committed bool
}

// runSteps runs the scenario as one saga, arming shape sh just before
// step k (k = 0: no fault), and commits if no step fails.
func (pr *prober) runSteps(p *process, k int, sh *Shape) runOutcome {
	e := p.res.Engine
	saga, err := e.Begin(owner)
	if err != nil {
		return runOutcome{err: err}
	}
	var out runOutcome
	for i, st := range pr.sc.Steps {
		p.rig.clock.Advance(pr.sc.Interval)
		if i+1 == k {
			sh.arm(pr, p, k)
		}
		res, err := e.Step(saga, owner, rollback.Command{ID: fmt.Sprintf("step-%d", i+1), Actuator: st.Actuator, Value: st.Value})
		if err != nil {
			out.failedAt, out.err = i+1, err
			var ee *rollback.Error
			if errors.As(err, &ee) && ee.Report != nil {
				out.report = ee.Report
			}
			return out
		}
		out.results = append(out.results, res)
	}
	if err := e.Commit(saga, owner); err != nil {
		out.err = err
		return out
	}
	out.committed = true
	return out
}

// badScenario is a scenario the supervisor would refuse or could not run.
type badScenario struct{ err error }

func (b *badScenario) Error() string { return b.err.Error() }
func (b *badScenario) Unwrap() error { return b.err }

// dryRun runs the scenario once without faults. A step the gate refuses
// (limits, supply, unknown actuator), or one that fails with nothing
// injected, makes the scenario bad: probing it would prove nothing.
func (pr *prober) dryRun() error {
	r, err := newRig(pr.cfg)
	if err != nil {
		return err
	}
	defer r.Close()
	p, err := r.start(filepath.Join(pr.root, "dry-run"), pr)
	if err != nil {
		return err
	}
	defer p.res.Close()
	out := pr.runSteps(p, 0, nil)
	if out.failedAt > 0 {
		st := pr.sc.Steps[out.failedAt-1]
		where := fmt.Sprintf("%s:%d: step %d (%s → %g)", pr.sc.File, st.Line, out.failedAt, st.Actuator, st.Value)
		if code := rollback.CodeOf(out.err); out.report == nil && code != "" {
			return &badScenario{fmt.Errorf("%s: refused %s: %s", where, code, refusalMessage(out.err))}
		}
		return &badScenario{fmt.Errorf("%s: fails with no fault injected: %w", where, out.err)}
	}
	if out.err != nil {
		return fmt.Errorf("dry run: %w", out.err)
	}
	pr.dry = out.results
	return nil
}

func refusalMessage(err error) string {
	var ee *rollback.Error
	if errors.As(err, &ee) {
		return ee.Message
	}
	return err.Error()
}

// probe breaks step k in shape sh and reports what the engine and the
// world say afterwards.
func (pr *prober) probe(k int, sh *Shape) (*ProbeResult, error) {
	st := pr.sc.Steps[k-1]
	res := &ProbeResult{Step: k, Actuator: st.Actuator, Value: st.Value, Shape: sh.Name,
		Journal: filepath.Join(pr.root, fmt.Sprintf("step%02d-%s", k, sh.Name))}
	r, err := newRig(pr.cfg)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	start := r.readWorld()

	p, err := r.start(res.Journal, pr)
	if err != nil {
		return nil, err
	}
	done := make(chan runOutcome, 1)
	go func() { done <- pr.runSteps(p, k, sh) }()

	var reports []*rollback.Report
	var halted bool
	select {
	case out := <-done:
		p.res.Close()
		if out.report == nil {
			return nil, fmt.Errorf("probe step %d %s: the fault did not end the saga (committed %v, error %v)", k, sh.Name, out.committed, out.err)
		}
		if out.failedAt != k {
			return nil, fmt.Errorf("probe step %d %s: step %d failed instead: %v", k, sh.Name, out.failedAt, out.err)
		}
		reports = []*rollback.Report{out.report}
		halted, _ = p.res.Engine.Halted()
	case <-p.crashed:
		// The process is dead: close what the kernel would close for it
		// (its files; the lock goes with them), then a new process takes
		// over the journal and finishes what the dead one left open.
		p.res.Close()
		r.clearFaults()
		p2, err := r.start(res.Journal, pr)
		if err != nil {
			close(p.release)
			<-done
			return nil, fmt.Errorf("probe step %d %s: recovery: %w", k, sh.Name, err)
		}
		reports = p2.res.Reports
		halted, _ = p2.res.Engine.Halted()
		p2.res.Close()
		// Let the dead process's effect return: everything it does from
		// here fails against its severed journal and connections.
		close(p.release)
		<-done
		if len(reports) == 0 {
			return nil, fmt.Errorf("probe step %d %s: recovery found no open saga", k, sh.Name)
		}
	}
	res.Engine = newEngineView(reports, halted)
	res.World = r.compareWorld(start)
	res.Verdict, res.Why = classify(res.Engine, res.World)
	return res, nil
}

// probeAll breaks every step in every shape, a few probes at a time, and
// returns the results step by step, shape by shape.
func (pr *prober) probeAll(shapes []Shape) ([]*ProbeResult, error) {
	type job struct{ i, k, s int }
	n := len(pr.sc.Steps) * len(shapes)
	results := make([]*ProbeResult, n)
	errs := make([]error, n)
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				results[j.i], errs[j.i] = pr.probe(j.k, &shapes[j.s])
			}
		}()
	}
	for i := range n {
		jobs <- job{i: i, k: i/len(shapes) + 1, s: i % len(shapes)}
	}
	close(jobs)
	wg.Wait()
	return results, errors.Join(errs...)
}
