//go:build !saga_lean

package hil

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/limits"
)

// Scenario 5. The rail sags below its minimum. A sag shorter than the
// debounce does not trip (the supervisor saw it, and nothing latched); a
// sag that lasts trips no sooner than the debounce and does what the
// config's action says; restored, the rail clears no sooner than the
// debounce. In sim mode the scenario runs with the unwind and the halt
// actions; on a rig, with the rig's.
func TestSupplySag(t *testing.T) {
	actions := []string{"unwind", "halt"}
	if rigFile != nil {
		actions = []string{"rig"}
	}
	for _, action := range actions {
		t.Run(action, func(t *testing.T) {
			opt := rigOptions{}
			if action != "rig" {
				opt.action = action
			}
			supplySag(t, opt)
		})
	}
}

func supplySag(t *testing.T, opt rigOptions) {
	r := newRig(t, opt)
	r.need(CapVolts)
	s := r.plan.Supply
	if s == nil {
		if r.sim {
			t.Fatal("configs/sim.yaml has no supply with driver: mcu")
		}
		t.Skipf("rig %s lacks capability %q on a supply: the config has no supply with driver: mcu and the rig file names none", *rigFlag, CapVolts)
	}
	ctx := context.Background()
	r.setup()
	nominal, _, _ := r.status().supply(s.Name)
	low := s.Min - 1
	if low <= 0 {
		low = s.Min / 2
	}
	t.Cleanup(func() { r.rb.Volts(context.Background(), s.Index, nominal) })
	a := r.plan.Actuators[0]
	ctl := r.newAgent(r.agentName("sag"))
	ctl.hello(60 * time.Second)
	saga := ctl.begin()
	r.stepTo(ctl, saga, a, a.Move)
	moved := r.poses(setupPose)
	moved[a.Name] = at(a.Move)
	r.waitOutputs("a saga holds "+a.Name+" moved", moved)
	t.Logf("rail %s: nominal %.3g V, sagging to %.3g V (min %v V, debounce %v, action %v)", s.Name, nominal, low, s.Min, s.Debounce, s.Action)

	r.shortSag(s, nominal, low)
	st := r.status()
	if st.Halted || len(st.OpenSagas) != 1 {
		t.Fatalf("after a sag shorter than the debounce: halted %v, open sagas %v (want the saga still open)", st.Halted, st.OpenSagas)
	}
	r.assertOutputs("after a short sag", moved)

	// A sag that lasts.
	t0 := time.Now()
	r.check(r.rb.Volts(ctx, s.Index, low))
	waitFor(t, "the rail to trip", s.Debounce+r.file.ReadBack.Settle, func() bool {
		_, tripped, _ := r.status().supply(s.Name)
		return tripped
	})
	if took := time.Since(t0); took < s.Debounce {
		t.Fatalf("the rail tripped %v after the sag began, before its debounce of %v", took, s.Debounce)
	}
	switch s.Action {
	case limits.Unwind:
		r.waitOutputs("the trip unwinds the open saga", r.poses(setupPose))
		waitFor(t, "the unwind's report on events", 10*time.Second, func() bool { _, ok := ctl.rollbackFor(saga); return ok })
		rep, _ := ctl.rollbackFor(saga)
		r.checkCleanReport("rollback event", rep, saga, []string{a.Name})
		ctl.refused("NOT_READY", map[string]any{"op": "step", "saga": saga, "actuator": a.Name, "value": a.Move})
		ctl.refused("NOT_READY", map[string]any{"op": "begin"})
		r.assertOutputs("refused steps move nothing", r.poses(setupPose))
	case limits.Halt:
		waitFor(t, "the halt", 10*time.Second, func() bool { return r.status().Halted })
		r.waitOutputs("the halt sends every output to its safe policy", r.poses(safe))
		ctl.refused("HALTED", map[string]any{"op": "step", "saga": saga, "actuator": a.Name, "value": a.Move})
		if code, body := r.post("/api/v1/reset", r.plan.Token, ""); code != http.StatusConflict {
			t.Fatalf("reset while the rail is tripped: %d %s, want 409", code, body)
		}
	case limits.Refuse:
		r.assertOutputs("refuse moves nothing", moved)
		if rep := ctl.step(saga, a.Name, a.Setup); rep.OK {
			t.Fatalf("a step on a tripped rail was accepted")
		}
	case limits.Warn:
		r.assertOutputs("warn moves nothing", moved)
	}
	if s.Action >= limits.Refuse {
		// /readyz is refreshed every 100 ms: it follows the status shortly.
		waitFor(t, "/readyz to report the tripped rail", 10*time.Second, func() bool {
			ready, why := r.readyz()
			return !ready && strings.Contains(why, s.Name)
		})
	}

	// Restored: it clears only after readings were good for the debounce.
	t1 := time.Now()
	r.check(r.rb.Volts(ctx, s.Index, nominal))
	waitFor(t, "the rail to clear", s.Debounce+r.file.ReadBack.Settle, func() bool {
		_, tripped, _ := r.status().supply(s.Name)
		return !tripped
	})
	if took := time.Since(t1); took < s.Debounce {
		t.Fatalf("the rail cleared %v after it was restored, before its debounce of %v", took, s.Debounce)
	}
	if s.Action == limits.Halt {
		if ready, _ := r.readyz(); ready {
			t.Fatal("ready after a halt trip cleared, without an operator reset")
		}
		r.resetUntilReady()
	}
	r.waitReady()
	if s.Action >= limits.Unwind {
		// The trip ended the saga for good.
		ctl.refused("SAGA_UNKNOWN", map[string]any{"op": "step", "saga": saga, "actuator": a.Name, "value": a.Move})
	} else {
		ctl.must(map[string]any{"op": "abort", "saga": saga})
	}
	// Motion again, on a new saga.
	saga2 := ctl.begin()
	r.stepTo(ctl, saga2, a, a.Move)
	ctl.must(map[string]any{"op": "abort", "saga": saga2})
}

// shortSag drops the rail for a fraction of its debounce: long enough that
// the supervisor reads the low voltage, short enough that it must not
// trip. An attempt that a slow machine stretched past half the debounce
// proves nothing and is repeated.
func (r *rig) shortSag(s *PlannedSupply, nominal, low float64) {
	r.t.Helper()
	ctx := context.Background()
	for attempt := 1; ; attempt++ {
		t0 := time.Now()
		r.check(r.rb.Volts(ctx, s.Index, low))
		seen := false
		for !seen && time.Since(t0) < s.Debounce/2 {
			v, _, _ := r.status().supply(s.Name)
			seen = v < s.Min
			time.Sleep(5 * time.Millisecond)
		}
		r.check(r.rb.Volts(ctx, s.Index, nominal))
		held := time.Since(t0)
		// Watch the rail for longer than a debounce: it must never trip.
		watch := time.Now()
		for time.Since(watch) < s.Debounce+s.Debounce/2 {
			st := r.status()
			if v, tripped, _ := st.supply(s.Name); tripped || st.Halted {
				r.t.Fatalf("a sag held %v (debounce %v) tripped the rail: %.3g V, halted %v %s", held, s.Debounce, v, st.Halted, st.HaltReason)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if seen && held < s.Debounce/2 {
			r.t.Logf("short sag: the supervisor read %.3g V and did not trip (sag held %v, debounce %v)", low, held, s.Debounce)
			return
		}
		if attempt == 3 {
			r.t.Fatalf("short sag: three attempts, none both seen by the supervisor and shorter than half the debounce (last: seen %v, held %v)", seen, held)
		}
		r.t.Logf("short sag attempt %d proves nothing (seen %v, held %v): again", attempt, seen, held)
	}
}

// resetUntilReady resets with the operator token until the supervisor
// takes it. A refusal may only be 409 (not ready yet, e.g. the board's
// telemetry has not caught up).
func (r *rig) resetUntilReady() {
	r.t.Helper()
	waitFor(r.t, "an operator reset to be accepted", 10*time.Second, func() bool {
		code, body := r.post("/api/v1/reset", r.plan.Token, `{"operator":"hil"}`)
		switch code {
		case http.StatusOK:
			return true
		case http.StatusConflict:
			return false
		}
		r.t.Fatalf("reset: %d %s", code, body)
		return false
	})
}

// Scenario 6. The board's e-stop is pressed mid-saga: the supervisor
// halts, the outputs are at their safe values, the open saga ends partial
// (halt stops, it does not unwind), and reset is refused while the button
// is down. Released, a reset with the operator token (and only with it)
// makes the supervisor ready again, and motion works.
func TestEStopPressAndReset(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.need(CapEStop)
	ctx := context.Background()
	r.setup()
	a := r.plan.Actuators[0]
	ctl := r.newAgent(r.agentName("estop"))
	ctl.hello(60 * time.Second)
	saga := ctl.begin()
	r.stepTo(ctl, saga, a, a.Move)
	moved := r.poses(setupPose)
	moved[a.Name] = at(a.Move)
	r.waitOutputs("a saga holds "+a.Name+" moved", moved)

	r.check(r.rb.EStop(ctx, true))
	t.Cleanup(func() { r.rb.EStop(context.Background(), false) })
	waitFor(t, "the supervisor to halt", 10*time.Second, func() bool { return r.status().Halted })
	r.waitOutputs("every output at its safe value", r.poses(safe))
	// /readyz is refreshed when the halt has applied the safe policies,
	// a moment after the status says halted.
	waitFor(t, "/readyz to say halted", 10*time.Second, func() bool {
		ready, why := r.readyz()
		return !ready && strings.Contains(why, "halted")
	})
	ctl.refused("HALTED", map[string]any{"op": "step", "saga": saga, "actuator": a.Name, "value": a.Setup})
	ctl.refused("HALTED", map[string]any{"op": "begin"})
	// The open saga ended where the halt left it: partial, never clean.
	waitFor(t, "the halted saga's report on events", 10*time.Second, func() bool { _, ok := ctl.rollbackFor(saga); return ok })
	if rep, _ := ctl.rollbackFor(saga); rep.Verdict != "partial" || len(rep.Steps) != 1 || rep.Steps[0].Bucket != "unresolved" {
		t.Fatalf("the halted saga's report: %+v, want partial with its step unresolved", rep)
	}
	if code, body := r.post("/api/v1/reset", r.plan.Token, ""); code != http.StatusConflict {
		t.Fatalf("reset while the e-stop is pressed: %d %s, want 409", code, body)
	}

	r.check(r.rb.EStop(ctx, false))
	if code, body := r.post("/api/v1/reset", "not-the-token", ""); code != http.StatusUnauthorized {
		t.Fatalf("reset with a wrong token: %d %s, want 401", code, body)
	}
	r.resetUntilReady()
	r.waitReady()
	r.checkBelief("after the e-stop reset")
	// What that belief is for: the next saga's unwind restores it. Step
	// and abort: the output must end where the saga found it.
	before := r.state().Outputs[a.Output]
	saga2 := ctl.begin()
	r.stepTo(ctl, saga2, a, a.Setup)
	want := r.poses(safe)
	want[a.Name] = at(a.Setup)
	r.waitOutputs("motion after the reset", want)
	rep := ctl.must(map[string]any{"op": "abort", "saga": saga2, "reason": "hil: back to where the saga began"})
	// Retrace ends with the saga's first step, undone to its prior: where
	// the supervisor believed the output was when the saga began.
	if rep.Report == nil || len(rep.Report.Steps) == 0 || rep.Report.Steps[len(rep.Report.Steps)-1].Prior == nil {
		t.Fatalf("abort's report: %+v", rep.Report)
	}
	prior := *rep.Report.Steps[len(rep.Report.Steps)-1].Prior
	want[a.Name] = at(prior)
	r.waitOutputs("the unwind drives "+a.Name+" to the prior its report names", want)
	if math.Abs(prior-before.Value) > a.Tolerance {
		r.t.Errorf("after the e-stop reset an unwind drove %s to %g, its recorded prior, but the saga found it at %g", a.Name, prior, before.Value)
	}
}
