package rollback

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/limits"
)

func types(recs []Record) []RecordType {
	var ts []RecordType
	for _, r := range recs {
		ts = append(ts, r.Type)
	}
	return ts
}

func TestCommitJournalsIntentBeforeEffect(t *testing.T) {
	for _, d := range []Durability{EveryStep, FirstTouch} {
		t.Run(d.String(), func(t *testing.T) {
			r := newRig(t, func(c *Config) { c.Durability = d })
			// Inside every Set, the intent for that value must already be
			// journaled, and durable unless first-touch lets it ride.
			r.w.check = func(act string, v float64) {
				all := r.j.all()
				last := all[len(all)-1]
				if last.Type != RecIntent || last.Actuator != act || last.Target != v {
					t.Errorf("Set %s=%g: last record is %+v, want its INTENT", act, v, last)
				}
				durable := r.j.durableRecords()
				isDurable := len(durable) == len(all)
				if (d == EveryStep || last.Flags&FlagFirstTouch != 0) && !isDurable {
					t.Errorf("Set %s=%g before its intent was durable", act, v)
				}
			}
			s := r.begin(t)
			r.step(t, s, "c1", "base", 30)
			r.step(t, s, "c2", "base", 40)
			r.step(t, s, "c3", "elbow", 45)
			if err := r.e.Commit(s, r.owner); err != nil {
				t.Fatal(err)
			}
			recs := r.j.durableRecords()
			want := []RecordType{RecBegin, RecIntent, RecApplied, RecIntent, RecApplied, RecIntent, RecApplied, RecCommit}
			if got := types(recs); !reflect.DeepEqual(got, want) {
				t.Fatalf("journal = %v, want %v (all durable after commit)", got, want)
			}
			if in := recs[3]; in.Prior != 30 || in.Target != 40 || in.Flags&FlagFirstTouch != 0 {
				t.Errorf("second intent on base = %+v, want prior 30 target 40, not first touch", in)
			}
			if v, _ := r.e.Commanded("base"); v != 40 {
				t.Errorf("commanded base = %g, want 40", v)
			}
			// Committed: the actuators are free for a new saga.
			s2 := r.begin(t)
			r.step(t, s2, "c1", "base", 0)
		})
	}
}

func TestRefusalsMoveNothing(t *testing.T) {
	r := newRig(t, func(c *Config) {})
	s := r.begin(t)
	other := Owner{Agent: "other", Lease: "L9", Epoch: 3}
	s2, err := r.e.Begin(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Step(s2, other, Command{ID: "o1", Actuator: "gripper", Value: 1}); err != nil {
		t.Fatal(err)
	}
	r.step(t, s, "seen", "base", 5)
	past := time.Now().Add(-time.Second)
	tests := []struct {
		name  string
		saga  uint64
		owner Owner
		cmd   Command
		code  Code
	}{
		{"unknown actuator", s, r.owner, Command{ID: "a", Actuator: "tail", Value: 1}, CodeActuatorUnknown},
		{"over max", s, r.owner, Command{ID: "b", Actuator: "base", Value: 91}, Code(limits.LimitMax)},
		{"under min", s, r.owner, Command{ID: "c", Actuator: "base", Value: -91}, Code(limits.LimitMin)},
		{"NaN", s, r.owner, Command{ID: "d", Actuator: "base", Value: math.NaN()}, Code(limits.NotFinite)},
		{"+Inf", s, r.owner, Command{ID: "e", Actuator: "base", Value: math.Inf(1)}, Code(limits.NotFinite)},
		{"1e308", s, r.owner, Command{ID: "f", Actuator: "base", Value: 1e308}, Code(limits.LimitMax)},
		{"replayed id", s, r.owner, Command{ID: "seen", Actuator: "base", Value: 6}, CodeDuplicateID},
		{"deadline passed", s, r.owner, Command{ID: "g", Actuator: "base", Value: 6, Deadline: past}, CodeDeadlinePassed},
		{"unknown saga", 999, r.owner, Command{ID: "h", Actuator: "base", Value: 6}, CodeSagaUnknown},
		{"another agent's saga", s, other, Command{ID: "i", Actuator: "base", Value: 6}, CodeSagaNotOwner},
		{"old epoch", s, Owner{Agent: "planner", Lease: "L1", Epoch: 0}, Command{ID: "j", Actuator: "base", Value: 6}, CodeSagaNotOwner},
		{"held by another saga", s, r.owner, Command{ID: "k", Actuator: "gripper", Value: 0}, CodeActuatorBusy},
		{"no id", s, r.owner, Command{Actuator: "base", Value: 6}, CodeBadRequest},
	}
	before := r.w.setCalls()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(r.j.all())
			_, err := r.e.Step(tt.saga, tt.owner, tt.cmd)
			if got := CodeOf(err); got != tt.code {
				t.Fatalf("code = %q (%v), want %q", got, err, tt.code)
			}
			if !strings.Contains(err.Error(), string(tt.code)) {
				t.Errorf("error %q does not name its code", err)
			}
			recs := r.j.all()
			if len(recs) != n+1 || recs[n].Type != RecRefused || recs[n].Code != string(tt.code) {
				t.Errorf("refusal not journaled: %+v", recs[n:])
			}
		})
	}
	if after := r.w.setCalls(); !reflect.DeepEqual(before, after) {
		t.Errorf("refusals moved something: %v", after[len(before):])
	}
	if v, _ := r.e.Commanded("base"); v != 5 {
		t.Errorf("commanded base = %g after refusals, want 5", v)
	}
}

func TestSagaFull(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxSagaCommands = 3 })
	s := r.begin(t)
	r.step(t, s, "1", "base", 1)
	r.e.Step(s, r.owner, Command{ID: "2", Actuator: "base", Value: 500}) // refused, but counted
	r.step(t, s, "3", "base", 2)
	if _, err := r.e.Step(s, r.owner, Command{ID: "4", Actuator: "base", Value: 3}); CodeOf(err) != CodeSagaFull {
		t.Fatalf("fourth command: %v, want SAGA_FULL", err)
	}
	if err := r.e.Commit(s, r.owner); err != nil {
		t.Fatal(err)
	}
	r.step(t, r.begin(t), "4", "base", 3)
}

func TestSupplyGate(t *testing.T) {
	sup := &staticSupplies{}
	r := newRig(t, func(c *Config) { c.Supplies = sup })
	a := r.reg.Get("base")
	a.Limits.Supply = "battery"
	a.Limits.SupplyMinVolts = 6
	s := r.begin(t)
	if _, err := r.e.Step(s, r.owner, Command{ID: "1", Actuator: "base", Value: 1}); CodeOf(err) != Code(limits.SupplyUnknown) {
		t.Fatalf("no supply reading: %v, want SUPPLY_UNKNOWN", err)
	}
	sup.st = limits.SupplyState{Known: true, Volts: 5.5}
	sup.ok = true
	if _, err := r.e.Step(s, r.owner, Command{ID: "2", Actuator: "base", Value: 1}); CodeOf(err) != Code(limits.SupplyLow) {
		t.Fatalf("5.5 V under a 6 V actuator bound: %v, want SUPPLY_LOW", err)
	}
	sup.st.Volts = 7.4
	r.step(t, s, "3", "base", 1)
}

type staticSupplies struct {
	st limits.SupplyState
	ok bool
}

func (s *staticSupplies) SupplyState(string, time.Time) (limits.SupplyState, bool) { return s.st, s.ok }

// TestFaultUnwindsLIFO fails the fourth step of a saga in each way a driver
// can and checks the unwind: last step first, back to the start. A driver
// error is in doubt (compensated, journaled IN_DOUBT) unless it wraps
// actuators.ErrNotApplied; only then is the step failed and not driven
// again.
func TestFaultUnwindsLIFO(t *testing.T) {
	for _, tt := range []struct {
		name    string
		fail    error
		moved   bool // the effect happened before the error
		outcome Outcome
		code    Code
	}{
		{"not applied", fmt.Errorf("servo refused the command: %w", actuators.ErrNotApplied), false, Failed, CodeStepFailed},
		{"not applied wrapped twice", fmt.Errorf("bus: %w", fmt.Errorf("device NAK: %w", actuators.ErrNotApplied)), false, Failed, CodeStepFailed},
		{"not applied wins over a cancel", fmt.Errorf("not sent: %w (%w)", actuators.ErrNotApplied, context.Canceled), false, Failed, CodeStepFailed},
		{"not applied wins over a deadline", fmt.Errorf("deadline passed before sending: %w (%w)", actuators.ErrNotApplied, context.DeadlineExceeded), false, Failed, CodeStepFailed},
		{"plain error after the effect", errors.New("boom"), true, InDoubt, CodeStepInDoubt},
		{"plain error without the effect", errors.New("servo stalled"), false, InDoubt, CodeStepInDoubt},
		{"context canceled", context.Canceled, true, InDoubt, CodeStepInDoubt},
		{"in doubt", context.DeadlineExceeded, true, InDoubt, CodeStepInDoubt},
		{"link lost", actuators.ErrLinkLost, false, InDoubt, CodeStepInDoubt},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			start := r.w.snapshot()
			s := r.begin(t)
			r.step(t, s, "1", "base", 30)
			r.step(t, s, "2", "shoulder", 40)
			r.step(t, s, "3", "elbow", 50)
			r.drivers["gripper"].fail = func(v float64, n int) error {
				if n == 1 {
					if tt.moved {
						r.w.mu.Lock()
						r.w.value["gripper"] = v // the effect happened anyway
						r.w.mu.Unlock()
					}
					return tt.fail
				}
				return nil
			}
			before := len(r.w.setCalls())
			_, err := r.e.Step(s, r.owner, Command{ID: "4", Actuator: "gripper", Value: 1})
			var ee *Error
			if !errors.As(err, &ee) || ee.Code != tt.code || ee.Report == nil {
				t.Fatalf("step 4: %v, want %s with a report", err, tt.code)
			}
			if !errors.Is(err, tt.fail) {
				t.Errorf("step 4: %v does not wrap the driver's error %v", err, tt.fail)
			}
			rep := ee.Report
			if !rep.Clean() {
				t.Errorf("report not clean:\n%s", rep)
			}
			var order []uint32
			for _, sr := range rep.Steps {
				order = append(order, sr.Step)
			}
			if !reflect.DeepEqual(order, []uint32{4, 3, 2, 1}) {
				t.Errorf("unwind order %v, want [4 3 2 1]", order)
			}
			if rep.Steps[0].Outcome != tt.outcome {
				t.Errorf("step 4 outcome %s, want %s", rep.Steps[0].Outcome, tt.outcome)
			}
			calls := r.w.setCalls()[before:]
			var want []setCall
			if tt.outcome == InDoubt {
				want = append(want, setCall{"gripper", 0}) // in doubt: compensated too
			}
			want = append(want, setCall{"elbow", 20}, setCall{"shoulder", 10}, setCall{"base", 0})
			if !reflect.DeepEqual(calls, want) {
				t.Errorf("compensations %v, want %v", calls, want)
			}
			if got := r.w.snapshot(); !reflect.DeepEqual(got, start) {
				t.Errorf("world %v, want start %v", got, start)
			}
			if v, _ := r.e.Commanded("gripper"); v != start["gripper"] {
				t.Errorf("gripper commanded %g after the unwind, want its prior %g", v, start["gripper"])
			}
			if len(r.e.OpenSagas()) != 0 {
				t.Error("saga still open after unwind")
			}
			recs := r.j.durableRecords()
			if last := recs[len(recs)-1]; last.Type != RecEnd || last.Code != "clean" {
				t.Errorf("last record %+v, want durable END clean", last)
			}
			// The journal says what the engine concluded about step 4.
			wantCode, wantFlags := "FAILED", uint8(0)
			if tt.outcome == InDoubt {
				wantCode, wantFlags = "IN_DOUBT", FlagInDoubt
			}
			var outcome *Record
			for i := range recs {
				if rec := &recs[i]; rec.Saga == s && rec.Step == 4 && (rec.Type == RecFailed || rec.Type == RecApplied) {
					if outcome != nil {
						t.Fatalf("step 4 has two outcomes: %+v and %+v", *outcome, *rec)
					}
					outcome = rec
				}
			}
			if outcome == nil || outcome.Type != RecFailed || outcome.Code != wantCode || outcome.Flags&FlagInDoubt != wantFlags {
				t.Errorf("step 4 outcome record %+v, want FAILED %s flags %#x", outcome, wantCode, wantFlags)
			}
		})
	}
}

func TestCompensationFailureFallsBackAndHalts(t *testing.T) {
	r := newRig(t, nil)
	s := r.begin(t)
	r.step(t, s, "1", "base", 30)
	r.step(t, s, "2", "shoulder", 40)
	r.step(t, s, "3", "elbow", 50)
	attempts := 0
	r.drivers["elbow"].fail = func(v float64, n int) error {
		if v == 20 { // the compensation back to its prior
			attempts++
			return errors.New("elbow jammed")
		}
		return nil
	}
	rep, err := r.e.Abort(s, r.owner, "operator abort")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Clean() || rep.Verdict() != "partial" {
		t.Fatalf("report says %s, want partial:\n%s", rep.Verdict(), rep)
	}
	if attempts != 3 {
		t.Errorf("compensation attempts = %d, want 1 + 2 retries", attempts)
	}
	got := map[uint32]Bucket{}
	for _, sr := range rep.Steps {
		got[sr.Step] = sr.Bucket
	}
	want := map[uint32]Bucket{3: FallbackSafe, 2: Unresolved, 1: Unresolved}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("buckets %v, want %v", got, want)
	}
	if !strings.Contains(rep.String(), "step 3") || !strings.Contains(rep.String(), "partial") {
		t.Errorf("report text does not name the step:\n%s", rep)
	}
	if h, _ := r.e.Halted(); !h {
		t.Fatal("not halted after a failed compensation")
	}
	w := r.w.snapshot()
	if w["elbow"] != 0 || w["shoulder"] != 0 {
		t.Errorf("safe values not applied on halt: %v", w)
	}
	if r.drivers["gripper"].halts != 1 {
		t.Errorf("gripper (detach policy) halted %d times, want 1", r.drivers["gripper"].halts)
	}
	if _, err := r.e.Begin(r.owner); CodeOf(err) != CodeHalted {
		t.Errorf("Begin while halted: %v, want HALTED", err)
	}
	if err := r.e.Reset("operator", r.e.HaltGen()); err != nil {
		t.Fatal(err)
	}
	r.begin(t)
}

func TestContinueOnCompensationFailure(t *testing.T) {
	r := newRig(t, func(c *Config) { c.OnCompensationFailure = ContinueOnFailure })
	r.reg.Get("elbow").Safe = actuators.SafePolicy{Mode: actuators.SafeHold}
	s := r.begin(t)
	r.step(t, s, "1", "base", 30)
	r.step(t, s, "2", "elbow", 50)
	r.step(t, s, "3", "kicker", 1)
	r.drivers["elbow"].fail = func(v float64, n int) error {
		if n > 1 {
			return errors.New("elbow jammed")
		}
		return nil
	}
	rep, _ := r.e.Abort(s, r.owner, "")
	want := []Bucket{Orphaned, CompensationFailed, Compensated}
	var got []Bucket
	for _, sr := range rep.Steps {
		got = append(got, sr.Bucket)
	}
	if !reflect.DeepEqual(got, want) || rep.Clean() {
		t.Errorf("buckets %v clean=%v, want %v and partial", got, rep.Clean(), want)
	}
	if h, _ := r.e.Halted(); h {
		t.Error("halted with on_compensation_failure: continue")
	}
}

func TestDirectOrder(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Order = Direct })
	s := r.begin(t)
	r.step(t, s, "1", "base", 30)
	r.step(t, s, "2", "elbow", 40)
	r.step(t, s, "3", "base", 60)
	r.step(t, s, "4", "elbow", 70)
	n := len(r.w.setCalls())
	rep, _ := r.e.Abort(s, r.owner, "")
	calls := r.w.setCalls()[n:]
	want := []setCall{{"elbow", 20}, {"base", 0}}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("direct compensations %v, want %v", calls, want)
	}
	if !rep.Clean() || len(rep.Steps) != 4 {
		t.Errorf("report:\n%s", rep)
	}
}

func TestJournalFailureIsFailStop(t *testing.T) {
	r := newRig(t, nil)
	s := r.begin(t)
	r.step(t, s, "1", "base", 30)
	r.j.failAt = len(r.j.all()) + 1 // the next intent
	n := len(r.w.setCalls())
	_, err := r.e.Step(s, r.owner, Command{ID: "2", Actuator: "elbow", Value: 45})
	if CodeOf(err) != CodeJournalFailed {
		t.Fatalf("step with a failing journal: %v, want JOURNAL_FAILED", err)
	}
	if calls := r.w.setCalls()[n:]; len(calls) != 0 && calls[0] == (setCall{"elbow", 45}) {
		t.Fatalf("effect happened without a durable intent: %v", calls)
	}
	if _, err := r.e.Begin(r.owner); CodeOf(err) != CodeJournalFailed {
		t.Errorf("Begin after journal failure: %v", err)
	}
	if err := r.e.Reset("op", r.e.HaltGen()); CodeOf(err) != CodeJournalFailed {
		t.Errorf("Reset after journal failure: %v", err)
	}
}

func TestAbortAgentNewestFirst(t *testing.T) {
	r := newRig(t, nil)
	s1 := r.begin(t)
	r.step(t, s1, "1", "base", 30)
	s2 := r.begin(t)
	r.step(t, s2, "1", "elbow", 30)
	reps := r.e.AbortAgent("planner", "lease expired")
	if len(reps) != 2 || reps[0].Saga != s2 || reps[1].Saga != s1 {
		t.Fatalf("reports %v, want saga %d then %d", reps, s2, s1)
	}
	if _, err := r.e.Step(s1, r.owner, Command{ID: "2", Actuator: "base", Value: 1}); CodeOf(err) != CodeSagaUnknown {
		t.Errorf("step on an unwound saga: %v", err)
	}
}

// TestRecoverAfterCrash rebuilds a fresh engine from the journal as a crash
// at every record left it and checks that recovery restores the priors,
// never compensates a settled step twice, and closes every saga.
func TestRecoverAfterCrash(t *testing.T) {
	// A full run: 3 steps, a failing 4th, a compensation retry on step 2.
	src := newRig(t, nil)
	s := src.begin(t)
	src.step(t, s, "1", "base", 30)
	src.step(t, s, "2", "shoulder", 40)
	src.step(t, s, "3", "elbow", 50)
	src.drivers["shoulder"].fail = func(v float64, n int) error {
		if n == 2 {
			return errors.New("transient")
		}
		return nil
	}
	src.drivers["gripper"].fail = func(_ float64, n int) error {
		if n == 1 {
			return context.DeadlineExceeded
		}
		return nil
	}
	src.e.Step(s, src.owner, Command{ID: "4", Actuator: "gripper", Value: 1})
	total := len(src.j.all())
	for cut := 1; cut <= total; cut++ {
		dst := newRig(t, nil)
		// The world as the crashed process left it at that record.
		src.j.rebuildInto(t, dst.e, cut)
		for name, d := range dst.drivers {
			_ = d
			v, _ := dst.e.Commanded(name)
			dst.w.value[name] = v
		}
		reps, err := dst.e.Recover()
		if err != nil {
			t.Fatalf("cut %d: Recover: %v", cut, err)
		}
		if len(dst.e.OpenSagas()) != 0 {
			t.Fatalf("cut %d: sagas open after recovery", cut)
		}
		w := dst.w.snapshot()
		wantStart := map[string]float64{"base": 0, "shoulder": 10, "elbow": 20, "gripper": 0, "kicker": 0}
		if !reflect.DeepEqual(w, wantStart) {
			t.Errorf("cut %d: world %v after recovery, want %v", cut, w, wantStart)
		}
		for _, rep := range reps {
			if !rep.Clean() {
				t.Errorf("cut %d: recovery report partial:\n%s", cut, rep)
			}
		}
		// No settled step is compensated again.
		settled := map[uint32]bool{}
		for _, r := range src.j.all()[:cut] {
			if r.Type == RecCompDone && r.Code != "" {
				settled[r.Step] = true
			}
		}
		for _, r := range dst.j.all() {
			if r.Type == RecCompIntent && settled[r.Step] {
				t.Errorf("cut %d: step %d compensated again after recovery", cut, r.Step)
			}
		}
	}
}

func TestHaltEndsOpenSagasUnresolved(t *testing.T) {
	r := newRig(t, nil)
	s := r.begin(t)
	r.step(t, s, "1", "base", 30)
	reps, err := r.e.Halt("e-stop")
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 1 || reps[0].Clean() || reps[0].Steps[0].Bucket != Unresolved {
		t.Fatalf("halt reports %v", reps)
	}
	if _, err := r.e.Step(s, r.owner, Command{ID: "2", Actuator: "base", Value: 1}); CodeOf(err) != CodeHalted {
		t.Errorf("step after halt: %v", err)
	}
}

// TestRebuildKnowsHaltSafeValues: the values a halt drove actuators to must
// be rebuilt by a later process, or its next priors would be wrong.
func TestRebuildKnowsHaltSafeValues(t *testing.T) {
	r := newRig(t, nil)
	s := r.begin(t)
	r.step(t, s, "1", "shoulder", 40)
	r.step(t, s, "2", "base", 30)
	if _, err := r.e.Halt("e-stop"); err != nil {
		t.Fatal(err)
	}
	next := newRig(t, nil)
	r.j.rebuildInto(t, next.e, len(r.j.all()))
	for name, want := range map[string]float64{"shoulder": 0, "base": 30, "elbow": 0} {
		if got, _ := next.e.Commanded(name); got != want {
			t.Errorf("after the rebuild %s commanded = %g, want %g", name, got, want)
		}
	}
	if h, _ := next.e.Halted(); !h {
		t.Error("halt latch not rebuilt")
	}
}

// TestRebuildKeepsTheHaltReasonShown: a process started on a halted journal
// shows the reason the halted process showed — the first halt since the
// reset, or the fuller account of it from the same source (HTTP halts
// before reading the body's reason, then again with it) — not the first
// record's bare source.
func TestRebuildKeepsTheHaltReasonShown(t *testing.T) {
	r := newRig(t, nil)
	for _, why := range []string{"http 127.0.0.1", "http 127.0.0.1: person in the cell", "supply battery: SUPPLY_LOW"} {
		if _, err := r.e.Halt(why); err != nil {
			t.Fatal(err)
		}
	}
	_, live := r.e.Halted()
	if live != "http 127.0.0.1: person in the cell" {
		t.Fatalf("the live reason is %q", live)
	}
	next := newRig(t, nil)
	r.j.rebuildInto(t, next.e, len(r.j.all()))
	if h, why := next.e.Halted(); !h || why != live {
		t.Errorf("after replay: halted %v, reason %q; want the reason shown before, %q", h, why, live)
	}
}
