package rollback

import (
	"context"
	"errors"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// Halt latches the halt: every later command is refused, open sagas that are
// not mid-step or mid-unwind end with their steps unresolved, effects in
// flight are waited for, and then every actuator goes to its safe policy.
// It returns the reports of the sagas it ended and the safe-policy errors.
func (e *Engine) Halt(reason string) ([]*Report, error) { return e.halt(reason, true) }

// Park is the halt of an orderly stop: every actuator goes to its safe
// policy and nothing moves afterwards, but no HALT is journaled, so the
// next start is not latched halted (an orderly restart needs no operator).
// Unwind the open sagas first (AbortAll): Park ends the rest unresolved.
func (e *Engine) Park(reason string) ([]*Report, error) { return e.halt(reason, false) }

func (e *Engine) halt(reason string, latch bool) ([]*Report, error) {
	e.haltMu.Lock()
	defer e.haltMu.Unlock()
	e.mu.Lock()
	if !e.halted {
		e.halted = true
		e.haltWhy = reason
		e.safeDone = false
		if latch {
			e.log.Error("halt", "reason", reason)
			if e.fatal == nil {
				e.enqueue(&Record{Type: RecHalt, Message: reason})
			}
		}
	}
	var reps []*Report
	for _, s := range e.sagasNewestFirst() {
		if !s.busy && !s.unwinding {
			reps = append(reps, e.closeHaltedLocked(s))
		}
	}
	fatal := e.fatal
	e.mu.Unlock()
	if fatal == nil {
		e.sync()
	}
	// No effect starts once halted is set (it is checked under mu before
	// every effect), so this wait is bounded by the driver timeouts.
	e.inflight.Wait()
	return reps, e.goSafeAll()
}

// closeHaltedLocked ends a saga without moving anything: every unsettled
// step is unresolved. Callers hold mu.
func (e *Engine) closeHaltedLocked(s *saga) *Report {
	s.unwinding = true
	why := s.abortWhy
	if why == "" {
		why = "halted: " + e.haltWhy
		s.abortWhy = why
		if e.fatal == nil {
			e.enqueue(&Record{Type: RecAbort, Saga: s.id, Message: why})
		}
	}
	rep := &Report{Saga: s.id, Agent: s.owner.Agent, Reason: why, Order: e.cfg.Order}
	for _, g := range e.plan(s) {
		e.settle(s, g, Unresolved, "not attempted: halted")
		for _, sp := range g.steps {
			rep.Steps = append(rep.Steps, StepReport{Step: sp.n, Actuator: sp.actName, Prior: g.target, Target: sp.target,
				Outcome: sp.outcome, Bucket: sp.bucket, Attempts: sp.attempts, Error: sp.err})
		}
	}
	if e.fatal == nil {
		e.enqueue(&Record{Type: RecEnd, Saga: s.id, Code: rep.Verdict()})
	}
	e.closeLocked(s)
	return rep
}

// goSafeAll applies every actuator's safe policy. It does not hold mu: a
// hung driver must not block the engine beyond its own timeout.
//
// What the halt is about to do is journaled, and made durable, before any
// actuator moves — a SAFE record per actuator whose policy moves it — so a
// crash in the middle never leaves the world somewhere the journal does not
// know of. A SAFE record therefore means "sent to its safe policy, or about
// to be": replay takes its safe value as the commanded value, and Recover
// re-applies the policies of a latched halt, which makes that true. With a
// failed journal nothing is written and the actuators go safe all the same:
// a halt never waits on the disk to make the robot safe.
func (e *Engine) goSafeAll() error {
	names := e.cfg.Actuators.Names()
	e.mu.Lock()
	journaled := e.fatal == nil
	if journaled {
		for _, name := range names {
			a := e.cfg.Actuators.Get(name)
			if a.Safe.Mode != actuators.SafeHold {
				e.enqueue(&Record{Type: RecSafe, Actuator: name, Target: a.Safe.Value, Code: string(a.Safe.Mode)})
			}
		}
	}
	e.mu.Unlock()
	if journaled {
		e.sync() // a failure is fatal and sticky; the robot goes safe regardless
	}
	var errs []error
	for _, name := range names {
		a := e.cfg.Actuators.Get(name)
		if err := a.GoSafe(context.Background()); err != nil {
			errs = append(errs, err)
			continue
		}
		if a.Safe.Mode == actuators.SafeValue {
			e.mu.Lock()
			e.acts[name].commanded = a.Safe.Value
			e.mu.Unlock()
		}
	}
	e.mu.Lock()
	e.safeDone = e.halted
	e.mu.Unlock()
	return errors.Join(errs...)
}

// Adopt reconciles the engine with an actuator its device moved on its own:
// a microcontroller whose watchdog, restart or e-stop sent its outputs to
// their safe values. drifted is asked, with the engine's lock held, where
// the device holds the output given the commanded value; when it says
// moved, the device's value becomes the commanded one — journaled durably
// as OBSERVED first — so that the next step records the true prior and is
// limited from the true position. Nothing moves. An actuator with a step or
// compensation of its saga in flight is left alone (the answer in transit
// is not a move); Adopt reports whether it adopted.
func (e *Engine) Adopt(name string, drifted func(commanded float64) (float64, bool), why string) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.acts[name]
	if st == nil || e.fatal != nil {
		return false, e.fatal
	}
	if h := st.holder; h != nil && (h.busy || h.unwinding) {
		return false, nil
	}
	v, moved := drifted(st.commanded)
	if !moved || v == st.commanded {
		return false, nil
	}
	// Enqueued, then adopted under the same lock: a step that starts while
	// the record is being synced already records the true prior, and its
	// INTENT is ordered after the OBSERVED record in the journal.
	if _, err := e.enqueue(&Record{Type: RecObserved, Actuator: name, Target: v, Message: why}); err != nil {
		return false, err
	}
	e.log.Warn("actuator moved by its device", "actuator", name, "commanded", st.commanded, "found", v, "why", why)
	st.commanded = v
	st.at = e.cfg.Now()
	e.mu.Unlock()
	err := e.sync()
	e.mu.Lock()
	return err == nil, err
}

// Reset clears a halt. It is an operator action; the supervisor checks the
// ready conditions before calling it. A failed journal cannot be reset.
func (e *Engine) Reset(by string) error {
	e.haltMu.Lock()
	defer e.haltMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fatal != nil {
		return &Error{Code: CodeJournalFailed, Message: "the journal failed; restart the supervisor", err: e.fatal}
	}
	if !e.halted {
		return nil
	}
	if err := e.journal(&Record{Type: RecReset, Agent: by}); err != nil {
		return &Error{Code: CodeJournalFailed, Message: err.Error(), err: err}
	}
	e.halted = false
	e.haltWhy = ""
	return nil
}

// Halted reports whether the engine is halted, and why.
func (e *Engine) Halted() (bool, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.halted, e.haltWhy
}

// Err returns the journal failure that stopped the engine, or nil.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fatal
}

// Commanded returns the engine's knowledge of an actuator's commanded value.
func (e *Engine) Commanded(name string) (float64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.acts[name]
	if st == nil {
		return 0, false
	}
	return st.commanded, true
}

// OpenSagas returns the ids of open sagas, newest first.
func (e *Engine) OpenSagas() []uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []uint64
	for _, s := range e.sagasNewestFirst() {
		ids = append(ids, s.id)
	}
	return ids
}
