package rollback

import (
	"cmp"
	"slices"
)

// OpenSaga is an open saga as an engine holds it: who owns it, whether it
// has been aborted, and its steps. Sagas lists them; a tool that starts
// from a snapshot (Restore) reads there what the records before it said.
type OpenSaga struct {
	ID    uint64
	Owner Owner
	// AbortReason is the reason journaled by its ABORT, "" if it has not
	// been aborted. An aborted saga that is still open is being unwound.
	AbortReason string
	Steps       []OpenStep
}

// OpenStep is one step of an open saga.
type OpenStep struct {
	N        uint32
	Actuator string
	// Outcome is "" while the journal holds the step's INTENT but not its
	// outcome: its effect is in flight (or, after a crash, in doubt).
	Outcome Outcome
	// Bucket is where an unwind settled the step, "" if it has not.
	Bucket Bucket
	// Target is the value the step commanded (after a clamp).
	Target float64
}

// Sagas returns the engine's open sagas in id order, with their owners
// and steps. It is a copy: changing it changes nothing in the engine.
func (e *Engine) Sagas() []OpenSaga {
	e.mu.Lock()
	out := make([]OpenSaga, 0, len(e.sagas))
	for _, s := range e.sagas {
		o := OpenSaga{ID: s.id, Owner: s.owner, AbortReason: s.abortWhy, Steps: make([]OpenStep, 0, len(s.steps))}
		for _, sp := range s.steps {
			o.Steps = append(o.Steps, OpenStep{N: sp.n, Actuator: sp.actName, Outcome: sp.outcome, Bucket: sp.bucket, Target: sp.target})
		}
		out = append(out, o)
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b OpenSaga) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
