package rollback

import (
	"fmt"
	"math"
	"time"
)

// MaxDrainGrace bounds how long open sagas may run on once a drain begins.
// A drain itself has no end but an operator's: it only refuses new sagas.
const MaxDrainGrace = 24 * time.Hour

// Drain is a drain in force: new sagas are refused (DRAINING) while the
// open ones may finish until Deadline, when they are unwound.
type Drain struct {
	Since    time.Time     // when the DRAIN record was written (wall clock)
	Grace    time.Duration // how long open sagas had to finish
	Deadline time.Time     // Since + Grace
	Why      string        // who drained, and why ("source: reason")
	// Recovered: rebuilt from the journal by a later process. Its deadline
	// passed with the restart: recovery unwound every saga left open, so
	// no saga of this drain remains. It stays in force until ended.
	Recovered bool
	gen       uint64 // which drain this is, within this process
}

// StartDrain journals a drain and puts it in force once it is durable:
// from then on Begin refuses DRAINING. A drain in force is replaced (a new
// deadline, counted from now). The caller unwinds the open sagas at the
// deadline with UnwindDrained.
func (e *Engine) StartDrain(grace time.Duration, why string) (Drain, error) {
	if grace < 0 || grace > MaxDrainGrace {
		return Drain{}, refusal(CodeBadRequest, "drain grace %s is outside 0..%s", grace, MaxDrainGrace)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return Drain{}, errClosed()
	}
	if e.fatal != nil {
		return Drain{}, &Error{Code: CodeJournalFailed, Message: e.fatal.Error(), err: e.fatal}
	}
	r := &Record{Type: RecDrain, Target: grace.Seconds(), Message: why}
	if err := e.journal(r); err != nil {
		return Drain{}, &Error{Code: CodeJournalFailed, Message: err.Error(), err: err}
	}
	e.drainGen++
	since := e.cfg.Now()
	d := &Drain{Since: since, Grace: grace, Deadline: since.Add(grace), Why: why, gen: e.drainGen}
	e.drain = d
	return *d, nil
}

// EndDrain journals the end of the drain in force; Begin admits new sagas
// again. It refuses NOT_DRAINING when no drain is in force.
func (e *Engine) EndDrain(why string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed()
	}
	if e.drain == nil {
		return refusal(CodeNotDraining, "no drain is in force")
	}
	if e.fatal != nil {
		return &Error{Code: CodeJournalFailed, Message: e.fatal.Error(), err: e.fatal}
	}
	if err := e.journal(&Record{Type: RecUndrain, Message: why}); err != nil {
		return &Error{Code: CodeJournalFailed, Message: err.Error(), err: err}
	}
	e.drain = nil
	return nil
}

// Draining returns the drain in force, if any.
func (e *Engine) Draining() (Drain, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.drain == nil {
		return Drain{}, false
	}
	return *e.drain, true
}

// UnwindDrained unwinds every open saga, newest first, if d is still the
// drain in force: what its deadline does. A drain ended or replaced since
// unwinds nothing.
func (e *Engine) UnwindDrained(d Drain) []*Report {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.drain == nil || e.drain.gen != d.gen {
		return nil
	}
	return e.abortWhereLocked(func(Owner) bool { return true },
		fmt.Sprintf("drain deadline passed (%s after the drain began)", d.Grace))
}

// drainRefusal is Begin's refusal while a drain is in force. Callers hold mu.
func (e *Engine) drainRefusal() *Error {
	if e.drain == nil {
		return nil
	}
	return refusal(CodeDraining, "draining (%s): no new saga until an operator ends the drain", e.drain.Why)
}

// applyDrain rebuilds a DRAIN record.
func (e *Engine) applyDrain(r *Record) error {
	if math.IsNaN(r.Target) || r.Target < 0 || r.Target > MaxDrainGrace.Seconds() {
		return fmt.Errorf("drain grace %v s out of range", r.Target)
	}
	since := time.Unix(0, r.UnixNano)
	grace := time.Duration(r.Target * float64(time.Second))
	e.drainGen++
	e.drain = &Drain{Since: since, Grace: grace, Deadline: since.Add(grace), Why: r.Message, Recovered: true, gen: e.drainGen}
	return nil
}

// applyUndrain rebuilds an UNDRAIN record.
func (e *Engine) applyUndrain() error {
	if e.drain == nil {
		return fmt.Errorf("a drain ended while none was in force")
	}
	e.drain = nil
	return nil
}
