package rollback

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// The halt lane. A halt from any source — an agent, HTTP, the CLI, a supply,
// an e-stop, a failed compensation, a failed journal — is not a message in
// any queue. Latch sets the latch at once (an atomic generation counter, so
// the gate refuses every later command from that instant) and records the
// reason under haltLane.mu, a lock that is never held across I/O. The work
// a halt implies — journaling HALT, ending open sagas unresolved, waiting
// for effects in flight, the safe policies — is done by one goroutine of
// the engine's, started on demand, so no caller of Latch ever waits on the
// disk, a driver or the engine's own lock.
//
// Every halt is journaled, a second one while halted included. Reasons
// beyond maxPendingHalts waiting at once (a flood of halts) are journaled
// as a count in one HALT record, so a flood cannot grow memory; the latch
// itself never depends on that bound.
const maxPendingHalts = 64

type haltLane struct {
	mu      sync.Mutex // never held across I/O
	reasons []string   // latched halts not yet journaled, oldest first
	more    uint64     // halts beyond maxPendingHalts, journaled as a count
	running bool       // a goroutine is applying halts
	done    uint64     // the highest generation whose halt has been applied
	applied chan struct{}
	why     string // the reason of the first halt since the last reset
	// closed: Engine.Close was called. No halt goroutine starts after
	// it (a halt still latches: the gate refuses everything anyway).
	closed bool
}

// Latch latches the halt and returns at once with its generation: the gate
// refuses every command from now on, and the engine's halt goroutine
// journals the halt and applies it (see Halt). It never blocks on I/O or on
// the engine's lock. OnHalt, if set, receives the reports of the sagas the
// halt ended.
//
// The halt goroutine is the engine's: Close waits for it. After Close a
// Latch still latches (and returns at once), but nothing is journaled or
// moved: the engine's owner has stopped it, the actuators parked.
func (e *Engine) Latch(reason string) uint64 {
	gen, start := e.latch(reason, true)
	if start {
		go func() {
			defer e.bg.Done() // Add was made by latch, under lane.mu
			e.applyHalts(true)
		}()
	}
	return gen
}

// latch latches a halt and reports whether the caller must apply it (no
// one else is applying halts, and the engine is not closed). With async,
// the caller will start the halt goroutine: bg.Add is made here, under
// lane.mu, where Close cannot be waiting yet.
func (e *Engine) latch(reason string, async bool) (gen uint64, start bool) {
	l := &e.lane
	l.mu.Lock()
	defer l.mu.Unlock()
	gen = e.latchGen.Add(1) // under l.mu: reasons are queued in generation order
	// The status shows the first halt since the reset — or a fuller
	// account of it from the same source (HTTP latches before reading the
	// body's reason, then halts again with it).
	if gen == e.clearedGen.Load()+1 || l.why == "" || strings.HasPrefix(reason, l.why+": ") {
		l.why = reason
	}
	if len(l.reasons) < maxPendingHalts {
		l.reasons = append(l.reasons, reason)
	} else {
		l.more++
	}
	if l.running || l.closed {
		return gen, false
	}
	l.running = true
	if async {
		e.bg.Add(1)
	}
	return gen, true
}

// Halt latches the halt and returns once it has been applied: HALT is
// journaled, open sagas that are not mid-step or mid-unwind end with their
// steps unresolved, effects in flight are waited for, and every actuator
// has gone to its safe policy. It returns the reports of the sagas it
// ended and the safe-policy errors — or, when the engine's halt goroutine
// was already applying halts and took this one too, nil (its reports go to
// OnHalt). The halt is applied on the calling goroutine when nobody else is
// applying one, so a single-threaded caller (recovery, the model checker)
// sees a deterministic order. After Close it latches only, and returns
// ErrClosed.
func (e *Engine) Halt(reason string) ([]*Report, error) {
	gen, start := e.latch(reason, false)
	if start {
		return e.applyHalts(false)
	}
	if !e.waitApplied(gen) {
		return nil, ErrClosed
	}
	return nil, nil
}

// WaitHalts returns once every halt latched so far has been applied (its
// records journaled, the safe policies done) — or, after Close, at once:
// halts latched after Close are never applied. Close (which waits for the
// halt goroutine) before closing the journal: that goroutine writes to it.
func (e *Engine) WaitHalts() { e.waitApplied(e.latchGen.Load()) }

// waitApplied returns once the halt of generation gen has been applied
// (true), or once it never will be (false): the engine is closed and
// nobody is applying halts.
func (e *Engine) waitApplied(gen uint64) bool {
	l := &e.lane
	for {
		l.mu.Lock()
		if l.done >= gen {
			l.mu.Unlock()
			return true
		}
		if l.closed && !l.running {
			l.mu.Unlock()
			return false
		}
		if l.applied == nil {
			l.applied = make(chan struct{})
		}
		ch := l.applied
		l.mu.Unlock()
		<-ch
	}
}

// applyHalts applies latched halts until none is pending; the caller has
// set lane.running. With async, each pass's reports go to OnHalt;
// otherwise they are returned.
func (e *Engine) applyHalts(async bool) ([]*Report, error) {
	l := &e.lane
	var reps []*Report
	var errs []error
	for {
		l.mu.Lock()
		target := e.latchGen.Load()
		if l.done >= target && len(l.reasons) == 0 && l.more == 0 {
			l.running = false
			l.mu.Unlock()
			return reps, errors.Join(errs...)
		}
		rs, more := l.reasons, l.more
		l.reasons, l.more = nil, 0
		l.mu.Unlock()

		pr, perr := e.haltPass(rs, more)

		l.mu.Lock()
		l.done = max(l.done, target)
		if l.applied != nil {
			close(l.applied)
			l.applied = nil
		}
		l.mu.Unlock()
		if async {
			if e.cfg.OnHalt != nil {
				e.cfg.OnHalt(pr, perr)
			}
		} else {
			reps = append(reps, pr...)
			if perr != nil {
				errs = append(errs, perr)
			}
		}
	}
}

// latched reports whether a halt is latched: a halt was asked for after
// the last reset. It reads two atomics, so the gate and a step about to
// fire its effect see a halt the instant it is latched.
func (e *Engine) latched() bool { return e.latchGen.Load() > e.clearedGen.Load() }

// stopped reports whether nothing may move: halt latched, or parked by an
// orderly stop. Callers hold mu (parked is guarded by it).
func (e *Engine) stopped() bool { return e.latched() || e.parked }

// HaltGen is the generation of the latest halt (0: never halted in this
// journal's life as rebuilt). Reset clears the halts up to a generation.
func (e *Engine) HaltGen() uint64 { return e.latchGen.Load() }

// Park is the halt of an orderly stop: every actuator goes to its safe
// policy and nothing moves afterwards, but no HALT is journaled, so the
// next start is not latched halted (an orderly restart needs no operator).
// Unwind the open sagas first (AbortAll): Park ends the rest unresolved.
// Park before Close: after it Park returns ErrClosed.
func (e *Engine) Park(reason string) ([]*Report, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	if !e.parked {
		e.parked, e.parkWhy = true, reason
	}
	e.mu.Unlock()
	return e.haltPass(nil, 0)
}

// haltPass journals the given halts, ends open sagas that are not mid-step
// or mid-unwind unresolved, waits for effects in flight, and applies the
// safe policies unless this process already did since the halt latched. It
// holds haltMu throughout (passes, Park and Reset are serialised); Latch
// never takes it.
func (e *Engine) haltPass(reasons []string, more uint64) ([]*Report, error) {
	e.haltMu.Lock()
	defer e.haltMu.Unlock()
	e.mu.Lock()
	for _, why := range reasons {
		e.log.Error("halt", "reason", why)
		if e.fatal == nil {
			e.enqueue(&Record{Type: RecHalt, Message: why})
		}
	}
	if more > 0 && e.fatal == nil {
		e.enqueue(&Record{Type: RecHalt, Message: fmt.Sprintf("%d further halts while halted (not listed one by one)", more)})
	}
	var reps []*Report
	for _, s := range e.sagasNewestFirst() {
		if !s.busy && !s.unwinding {
			reps = append(reps, e.closeHaltedLocked(s))
		}
	}
	fatal := e.fatal
	// A halt that is already latched and applied by this process (a
	// second halt while halted, a flood of them) moves nothing again:
	// nothing can have moved since. If a safe policy failed, safeDone is
	// false and the policies are tried again.
	again := e.safeDone && e.latched() && len(reasons) > 0
	e.mu.Unlock()
	if fatal == nil {
		e.sync()
	}
	// No effect starts once the latch is set (a step checks it after its
	// intent is durable, just before the effect), so this wait is bounded
	// by the driver timeouts. An effect counts until its outcome is
	// recorded (see effectDone): the SAFE records and safe values below
	// come after it.
	e.inflight.Wait()
	if again {
		return reps, nil
	}
	return reps, e.goSafeAll()
}

// closeHaltedLocked ends a saga without moving anything: every unsettled
// step is unresolved. Callers hold mu.
func (e *Engine) closeHaltedLocked(s *saga) *Report {
	s.unwinding = true
	why := s.abortWhy
	if why == "" {
		why = "halted: " + e.haltReason()
		s.abortWhy = why
		if e.fatal == nil {
			e.enqueue(&Record{Type: RecAbort, Saga: s.id, Message: why})
		}
	}
	rep := &Report{Saga: s.id, Agent: s.owner.Agent, Reason: why, Order: e.cfg.Order}
	for _, g := range e.plan(s) {
		e.settle(s, g, Unresolved, "not attempted: halted")
		rep.addGroup(g)
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
// to be": the rebuild takes its safe value as the commanded value, and
// Recover re-applies the policies of a latched halt, which makes that true.
// With a failed journal nothing is written and the actuators go safe all
// the same: a halt never waits on the disk to make the robot safe.
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
			e.setCommanded(e.acts[name], a.Safe.Value)
			e.mu.Unlock()
		}
	}
	e.mu.Lock()
	// Done only if every policy took: a later halt (an operator pressing
	// again because something did not go safe) or Recover tries again.
	e.safeDone = e.stopped() && len(errs) == 0
	e.mu.Unlock()
	return errors.Join(errs...)
}

// SafeApplied reports whether every actuator's safe policy has taken since
// the halt latched (false while one failed: the SAFE records then name
// values the world may not hold).
func (e *Engine) SafeApplied() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.safeDone
}

// RetrySafe applies the safe policies again for a latched halt whose
// policies did not all take, as a second halt would, and returns what still
// failed. An operator's reset asks for it before it resets: the journal's
// SAFE records must be true of the world before the halt is cleared. It is
// serialised with halt passes, and takes no lock the latch takes.
func (e *Engine) RetrySafe() error {
	e.haltMu.Lock()
	defer e.haltMu.Unlock()
	e.mu.Lock()
	closed, done, latched := e.closed, e.safeDone, e.latched()
	e.mu.Unlock()
	if closed {
		return errClosed()
	}
	if done || !latched {
		return nil
	}
	return e.goSafeAll()
}

// Drifting reports what Adopt would adopt for name now, without adopting
// it: the device's value when it reports the actuator elsewhere than
// commanded and no step or unwind of its saga is in flight (a step's own
// effect is no drift).
func (e *Engine) Drifting(name string, drifted func(commanded float64) (float64, bool)) (float64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.acts[name]
	if e.closed || st == nil || e.fatal != nil {
		return 0, false
	}
	if h := st.holder; h != nil && (h.busy || h.unwinding) {
		return 0, false
	}
	v, moved := drifted(st.commanded)
	return v, moved && v != st.commanded
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
	if e.closed {
		return false, ErrClosed
	}
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
	e.setCommanded(st, v)
	st.altOK = false // observed: no second value any more (as the rebuild of OBSERVED)
	st.at = e.cfg.Now()
	e.mu.Unlock()
	err := e.sync()
	e.mu.Lock()
	return err == nil, err
}

// Reset clears the halts up to generation gen (HaltGen, read by the
// operator's side before it checked that the supervisor may be reset). It
// is an operator action. A halt latched after gen — one that arrived while
// the reset was being decided — stays latched: Reset then returns HALTED.
// Reset waits until the halts it clears have been applied (their records
// journaled, the safe policies done), so a reset can never overtake the
// halt it clears. A failed journal cannot be reset.
func (e *Engine) Reset(by string, gen uint64) error {
	if gen > e.latchGen.Load() {
		gen = e.latchGen.Load()
	}
	e.waitApplied(gen)
	e.haltMu.Lock()
	defer e.haltMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed()
	}
	if e.fatal != nil {
		return &Error{Code: CodeJournalFailed, Message: "the journal failed; restart the supervisor", err: e.fatal}
	}
	if gen <= e.clearedGen.Load() {
		if e.latched() {
			return refusal(CodeHalted, "halted again since the reset was asked for: %s", e.haltReason())
		}
		return nil
	}
	if err := e.journal(&Record{Type: RecReset, Agent: by}); err != nil {
		return &Error{Code: CodeJournalFailed, Message: err.Error(), err: err}
	}
	e.lane.mu.Lock()
	e.clearedGen.Store(gen)
	still := e.latched()
	if !still {
		e.lane.why = ""
	}
	e.lane.mu.Unlock()
	if still {
		return refusal(CodeHalted, "a halt arrived while the reset was made; still halted: %s", e.haltReason())
	}
	e.safeDone = false
	return nil
}

// haltReason is why the engine is halted (the first halt since the last
// reset), or why it was parked.
func (e *Engine) haltReason() string {
	e.lane.mu.Lock()
	why := e.lane.why
	e.lane.mu.Unlock()
	if why == "" && e.parked {
		return e.parkWhy
	}
	return why
}

// Halted reports whether a halt is latched, and why. It takes no lock held
// across I/O.
func (e *Engine) Halted() (bool, string) {
	if !e.latched() {
		return false, ""
	}
	e.lane.mu.Lock()
	defer e.lane.mu.Unlock()
	return true, e.lane.why
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

// setCommanded records a new commanded value and when, in the order of
// changes, it was set. Callers hold mu.
func (e *Engine) setCommanded(st *actState, v float64) {
	e.changes++
	st.commanded, st.changed = v, e.changes
}

// Changes returns, for each actuator, its commanded value and when it last
// changed in this process (a count that orders changes: 0 means not
// since start). A publisher sorting by it shows an unwind in the order it
// moved the actuators.
func (e *Engine) Changes() map[string]Change {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]Change, len(e.acts))
	for name, st := range e.acts {
		out[name] = Change{Commanded: st.commanded, Seq: st.changed}
	}
	return out
}

// Change is an actuator's commanded value and the order of its last change.
type Change struct {
	Commanded float64
	Seq       uint64
}

// OpenSagas returns the ids of open sagas, newest first. Only the ids are
// copied under the engine's lock (their number is bounded by the caps on
// agents and sagas per lease); the sort is done outside it.
func (e *Engine) OpenSagas() []uint64 {
	e.mu.Lock()
	ids := make([]uint64, 0, len(e.sagas))
	for id := range e.sagas {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	slices.SortFunc(ids, func(a, b uint64) int { return cmp.Compare(b, a) })
	return ids
}

// Close ends the engine's life: it waits for the halt goroutine — which
// first applies every halt latched before Close, journaling them — and
// then refuses all work (ErrClosed; code HALTED for the calls that return
// an *Error). It does not wait for calls in progress on other goroutines
// (a Step, an Abort): their callers own them and stop them first. Close
// before closing the journal. It is idempotent and safe to call
// concurrently. Latch never waits for Close: it takes lane.mu only, which
// is never held across I/O.
func (e *Engine) Close() error {
	l := &e.lane
	l.mu.Lock()
	l.closed = true // from now on no halt goroutine starts (see latch)
	l.mu.Unlock()
	e.zl.mu.Lock()
	e.zl.closed = true // nor a zone's (see zoneLatch)
	e.zl.mu.Unlock()
	e.bg.Wait()
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	return nil
}
