package rollback

import (
	"fmt"
	"strings"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// Apply feeds one journal record to an engine that is not yet serving, to
// rebuild what a previous process left: commanded values, open sagas with
// their steps and unwind progress, and the halt latch. Call it for every
// record in order, then Recover.
func (e *Engine) Apply(seq uint64, typ uint8, payload []byte) error {
	r, err := DecodeRecord(typ, payload)
	if err != nil {
		return fmt.Errorf("record %d: %w", seq, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	if err := e.applyLocked(&r); err != nil {
		return fmt.Errorf("record %d (%s): %w", seq, r.Type, err)
	}
	return nil
}

// applyLocked is the rebuild's one set of rules (the daemon's start and the
// journal tools' Validator both come here). Besides what the records
// mean, it refuses a record the engine never writes where it stands: what
// the engine writes (in any order of unwind, crash at any point and
// recovery after it included) always passes, so a refusal means a journal
// someone else wrote or changed. The rules depend on no configuration.
func (e *Engine) applyLocked(r *Record) error {
	switch r.Type {
	case RecBegin:
		if e.sagas[r.Saga] != nil {
			return fmt.Errorf("saga %d is already open", r.Saga)
		}
		// Only BEGIN advances the id counter: a refusal may name any id a
		// client sent.
		if r.Saga < e.nextSaga {
			return fmt.Errorf("saga %d begun after saga %d", r.Saga, e.nextSaga-1)
		}
		e.nextSaga = r.Saga + 1
		e.maxEpoch = max(e.maxEpoch, r.Epoch)
		e.sagas[r.Saga] = &saga{id: r.Saga, owner: Owner{Agent: r.Agent, Lease: r.Lease, Epoch: r.Epoch}, ids: map[string]struct{}{}}
	case RecIntent:
		s, err := e.rebuildSaga(r)
		if err != nil {
			return err
		}
		if s.aborted() {
			return fmt.Errorf("saga %d: step %d after its ABORT (the saga is being unwound)", s.id, r.Step)
		}
		if int(r.Step) != len(s.steps)+1 {
			return fmt.Errorf("saga %d: step %d follows step %d", s.id, r.Step, len(s.steps))
		}
		if n := len(s.steps); n > 0 && s.steps[n-1].outcome == "" {
			// A saga runs one step at a time; only a crash leaves a step
			// without its outcome, and recovery then unwinds the saga.
			return fmt.Errorf("saga %d: step %d begun while step %d has no outcome", s.id, r.Step, n)
		}
		st := e.acts[r.Actuator] // nil if no longer configured: reported at unwind
		sp := &step{n: r.Step, actName: r.Actuator, act: st, prior: r.Prior, target: r.Target}
		s.steps = append(s.steps, sp)
		if r.CmdID != "" {
			s.ids[r.CmdID] = struct{}{}
		}
		if st != nil {
			st.holder = s
			st.detached = false
			st.alt, st.altOK = st.commanded, true // until its outcome
			st.commanded = r.Target               // in doubt until its outcome: treated as applied
		}
	case RecApplied, RecFailed:
		sp, err := e.rebuildStep(r)
		if err != nil {
			return err
		}
		if sp.outcome != "" {
			return fmt.Errorf("saga %d step %d already has an outcome (%s)", r.Saga, sp.n, sp.outcome)
		}
		if e.sagas[r.Saga].aborted() {
			// The engine writes a step's outcome before it unwinds the
			// saga, and recovery writes none for a step it finds in flight.
			return fmt.Errorf("saga %d step %d: an outcome after its ABORT", r.Saga, sp.n)
		}
		sp.outcome = Applied
		if sp.act != nil {
			sp.act.altOK = false
		}
		if r.Type == RecFailed {
			sp.outcome = Failed
			if r.Flags&FlagInDoubt != 0 {
				sp.outcome = InDoubt
				if sp.act != nil {
					sp.act.alt, sp.act.altOK = sp.prior, true // it may or may not have moved
				}
			} else if sp.act != nil {
				sp.act.commanded = sp.prior
			}
		}
	case RecCommit:
		s, err := e.rebuildSaga(r)
		if err != nil {
			return err
		}
		if s.aborted() {
			return fmt.Errorf("saga %d committed after its ABORT", s.id)
		}
		for _, sp := range s.steps {
			// Commit waits for the step in flight, and a step that did not
			// apply unwinds its saga at once.
			switch sp.outcome {
			case Applied:
			case "":
				return fmt.Errorf("saga %d committed while step %d has no outcome", s.id, sp.n)
			default:
				return fmt.Errorf("saga %d committed with step %d %s", s.id, sp.n, sp.outcome)
			}
		}
		e.closeLocked(s)
	case RecEnd:
		s, err := e.rebuildSaga(r)
		if err != nil {
			return err
		}
		if !s.aborted() {
			return fmt.Errorf("saga %d ended, but it was never aborted (no ABORT)", s.id)
		}
		verdict := "clean"
		for _, sp := range s.steps {
			switch sp.bucket {
			case "":
				return fmt.Errorf("saga %d ended, but step %d is not settled (no COMP_DONE with a bucket)", s.id, sp.n)
			case Compensated:
			default:
				verdict = "partial"
			}
		}
		if r.Code != verdict {
			return fmt.Errorf("saga %d ended %q, but its steps' buckets make it %q", s.id, r.Code, verdict)
		}
		e.closeLocked(s)
	case RecAbort:
		s, err := e.rebuildSaga(r)
		if err != nil {
			return err
		}
		if s.aborted() {
			return fmt.Errorf("saga %d aborted twice", s.id)
		}
		s.abortWhy = r.Message
		if s.abortWhy == "" {
			// Still aborted: Recover must not journal a second ABORT.
			s.abortWhy = "aborted (no reason journaled)"
		}
	case RecCompIntent:
		s, err := e.rebuildSaga(r)
		if err != nil {
			return err
		}
		if !s.aborted() {
			return fmt.Errorf("saga %d: a compensation, but the saga was never aborted (no ABORT)", s.id)
		}
		sp, err := e.rebuildStep(r)
		if err != nil {
			return err
		}
		for _, o := range e.covered(s, sp) {
			o.attempts = max(o.attempts, r.Attempt)
			o.compTarget = r.Target
		}
		if sp.act != nil {
			sp.act.alt, sp.act.altOK = sp.act.commanded, true // until its outcome
			sp.act.commanded, sp.act.detached = r.Target, false
		}
	case RecCompDone:
		sp, err := e.rebuildStep(r)
		if err != nil {
			return err
		}
		s := e.sagas[r.Saga]
		if !s.aborted() {
			return fmt.Errorf("saga %d step %d: a compensation's outcome, but the saga was never aborted (no ABORT)", s.id, sp.n)
		}
		if r.Code == "" {
			// A failed attempt; the step is still unsettled. (In direct
			// order it may be journaled under a settled step that leads its
			// group: see covered.)
			for _, o := range e.covered(s, sp) {
				o.failures++
			}
			return nil
		}
		b := Bucket(r.Code)
		if !b.valid() {
			return fmt.Errorf("unknown bucket %q", r.Code)
		}
		if sp.bucket != "" {
			return fmt.Errorf("saga %d step %d settled twice (%s, then %s)", s.id, sp.n, sp.bucket, b)
		}
		sp.bucket = b
		sp.err = r.Message
		if sp.act == nil {
			return nil
		}
		switch {
		case b == Unresolved && r.Flags&FlagWithdrawn != 0 && sp.act.altOK && sp.act.commanded == sp.compTarget:
			// The compensation's intent was withdrawn before its effect
			// (FlagWithdrawn): the actuator is where it was before the
			// intent, as the engine that wrote it went on believing —
			// unless a record since moved it (a halt's SAFE, journaled
			// while the unwind waited on the intent's sync: the rebuild
			// then keeps the SAFE's values, as the engine did).
			sp.act.commanded, sp.act.altOK = sp.act.alt, false
		case b == Compensated && sp.outcome != Failed:
			sp.act.commanded, sp.act.altOK = sp.compTarget, false
		case b == FallbackSafe && sp.act.a.Safe.Mode == actuators.SafeValue:
			sp.act.commanded, sp.act.altOK = sp.act.a.Safe.Value, false
		case b == FallbackSafe && sp.act.a.Safe.Mode == actuators.SafeDetach:
			sp.act.detached = true
		}
	case RecHalt:
		e.lane.mu.Lock()
		gen := e.latchGen.Add(1)
		e.lane.done = gen // a rebuilt halt is applied by Recover, not by the halt goroutine
		// The reason shown is latch's: the first halt since the reset, or
		// a fuller account of it from the same source (HTTP journals its
		// halt before it reads the body's reason, then again with it).
		if e.lane.why == "" || strings.HasPrefix(r.Message, e.lane.why+": ") {
			e.lane.why = r.Message
		}
		e.lane.mu.Unlock()
	case RecReset:
		e.lane.mu.Lock()
		e.clearedGen.Store(e.latchGen.Load())
		e.lane.why = ""
		e.lane.mu.Unlock()
	case RecLease:
		e.maxEpoch = max(e.maxEpoch, r.Epoch)
	case RecObserved:
		if st := e.acts[r.Actuator]; st != nil {
			st.commanded, st.altOK, st.detached = r.Target, false, false
		}
	case RecSafe:
		st := e.acts[r.Actuator]
		switch {
		case st == nil:
		case r.Code == string(actuators.SafeValue):
			// Journaled before the move: a crash may come between.
			st.alt, st.altOK = st.commanded, true
			st.commanded, st.detached = r.Target, false
		case r.Code == string(actuators.SafeDetach):
			st.detached = true
		}
	case RecDrain:
		return e.applyDrain(r)
	case RecUndrain:
		return e.applyUndrain()
	case RecQuarantine, RecRelease:
		return e.applyQuarantine(r)
	case RecZoneHalt, RecZoneReset:
		return e.applyZoneRecord(r)
	case RecRefused, RecRecovery:
	default:
		return fmt.Errorf("unexpected record type")
	}
	return nil
}

// covered lists the unsettled steps a compensation journaled under step sp
// covers: sp alone in retrace order, every unsettled step of the saga on the
// same actuator in direct order (one move settles them all).
func (e *Engine) covered(s *saga, sp *step) []*step {
	if e.cfg.Order == Retrace {
		return []*step{sp}
	}
	var out []*step
	for _, o := range s.steps {
		if o.actName == sp.actName && o.bucket == "" {
			out = append(out, o)
		}
	}
	return out
}

// aborted reports whether the saga's ABORT has been journaled (applied in
// the rebuild, or written by this process).
func (s *saga) aborted() bool { return s.abortWhy != "" }

// rebuildSaga is the open saga r names; a record naming no open saga is
// refused.
func (e *Engine) rebuildSaga(r *Record) (*saga, error) {
	s := e.sagas[r.Saga]
	if s == nil {
		return nil, fmt.Errorf("saga %d is not open", r.Saga)
	}
	return s, nil
}

// rebuildStep is the step r names, of an open saga.
func (e *Engine) rebuildStep(r *Record) (*step, error) {
	s, err := e.rebuildSaga(r)
	if err != nil {
		return nil, err
	}
	// Compared as uint64: int(r.Step) is negative on a 32-bit ARM for a
	// step of 2^31 or more, which would pass a check made in int.
	if r.Step < 1 || uint64(r.Step) > uint64(len(s.steps)) {
		return nil, fmt.Errorf("saga %d has no step %d", s.id, r.Step)
	}
	return s.steps[r.Step-1], nil
}

// Recover finishes what the previous process left open: every open saga is
// unwound, newest first (or ended unresolved if the journal says halted).
// Steps with no outcome are in doubt and are compensated like applied ones.
func (e *Engine) Recover() ([]*Report, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	if _, err := e.enqueue(&Record{Type: RecRecovery, Message: fmt.Sprintf("%d open sagas", len(e.sagas))}); err != nil {
		return nil, err
	}
	var reps []*Report
	for _, s := range e.sagasNewestFirst() {
		for _, sp := range s.steps {
			if sp.outcome == "" {
				sp.outcome = InDoubt
			}
		}
		var rep *Report
		if e.stopped() {
			rep = e.closeHaltedLocked(s)
		} else {
			why := s.abortWhy
			if why == "" {
				why = "supervisor restarted with the saga open"
			}
			rep = e.unwindLocked(s, why, true)
		}
		rep.Recovered = true
		reps = append(reps, rep)
	}
	if e.stopped() && !e.safeDone {
		// The halt is latched: make it true of the world again. The
		// previous process may have died before (or while) moving every
		// actuator to its safe policy, and the rebuild took the SAFE
		// records' values as commanded. (A halt latched by this process
		// before Recover — an e-stop pressed at start — has just done so.)
		e.mu.Unlock()
		err := e.goSafeAll()
		e.mu.Lock()
		if err != nil {
			e.log.Error("recovery: safe policies of the latched halt", "err", err)
		}
	}
	// The zones the journal ends halted are parked again (or, a zone no
	// longer configured, halt everything).
	e.mu.Unlock()
	zerr := e.recoverZones()
	e.mu.Lock()
	if zerr != nil {
		e.log.Error("recovery: safe policies of the halted zones", "err", zerr)
	}
	if err := e.journal(&Record{Type: RecRecovery, Message: "recovery finished"}); err != nil {
		return reps, err
	}
	return reps, nil
}
