package sim

import (
	"errors"
	"fmt"
	"sync"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// ErrInjected is wrapped by every error a Faults injects (other than
// actuators.ErrLinkLost and context errors), so tests can tell an injected
// failure from a real one.
var ErrInjected = errors.New("sim: injected fault")

// notApplied is the error of a Set that a fault failed without effect: it
// wraps ErrInjected and actuators.ErrNotApplied, the promise that the
// output did not change.
func notApplied(fault string) error {
	return fmt.Errorf("%w (%s): %w", ErrInjected, fault, actuators.ErrNotApplied)
}

// Faults is the fault injection every simulated device embeds. Faults can be
// set and cleared at any time from any goroutine, also while a Set is
// running; a Set sees the faults as they are when it starts.
//
// When several faults are set, a Set meets them in this order, and the first
// that applies decides it: a lost link, FailAlways, FailWhen, FailOnNth,
// HangNext. Faults that fail a Set leave the world unchanged, and their
// errors wrap actuators.ErrNotApplied; a lost link and a hang may apply the
// effect anyway if asked to, so their errors do not: an in-doubt step is
// exactly one whose effect the caller cannot know.
//
// Faults affect Set. ReadBack (and a supply's Volts) fails only on a lost
// link. Halt fails only on FailHalt, because Halt is the safe action that
// must work when Set does not.
type Faults struct {
	done <-chan struct{} // the World's; ends a hang when the World closes

	mu          sync.Mutex
	sets        uint64
	nth         int // Sets left until the one that fails; 0: none armed
	always      bool
	when        func(value float64) bool
	hang        bool
	hangApplied bool
	linkLost    bool
	linkApplied bool
	haltFails   bool
}

// FailOnNth makes the nth Set from now fail, without effect (its error wraps
// actuators.ErrNotApplied); n = 1 is the next Set. Every Set counts, including those failed by another fault. It
// fires once. n <= 0 disarms it.
func (f *Faults) FailOnNth(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nth = max(n, 0)
}

// FailAlways makes every Set fail, without effect (wrapping
// actuators.ErrNotApplied), until Clear.
func (f *Faults) FailAlways() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.always = true
}

// FailWhen makes every Set whose value satisfies fail, without effect
// (wrapping actuators.ErrNotApplied), until Clear; e.g. failing only the compensation that drives a servo back to its
// prior angle. nil removes the predicate. The predicate runs outside any lock
// of the device, so it may call back into it.
func (f *Faults) FailWhen(fail func(value float64) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.when = fail
}

// HangNext makes the next Set block until its context is done and then
// return the context's error, as a driver does that never answers. If
// applied, the effect happens anyway (at once, before the hang): the command
// got through but its acknowledgement did not. Either way the error is in
// doubt: it does not wrap actuators.ErrNotApplied.
func (f *Faults) HangNext(applied bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hang, f.hangApplied = true, applied
}

// LoseLink makes every Set and ReadBack return actuators.ErrLinkLost until
// RestoreLink or Clear. applied says whether each Set made meanwhile takes
// effect anyway (the command reached the device but the reply was lost) or
// not (the command was lost); the error is in doubt either way.
//
// A lost link is a state of this process's connection, not of the world: it
// is reported by Snapshot but not kept in the world file, since a restarted
// process reconnects.
func (f *Faults) LoseLink(applied bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.linkLost, f.linkApplied = true, applied
}

// RestoreLink undoes LoseLink.
func (f *Faults) RestoreLink() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.linkLost, f.linkApplied = false, false
}

// FailHalt makes every Halt fail, without effect, until Clear, to test what
// the engine does when even the safe action fails.
func (f *Faults) FailHalt() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.haltFails = true
}

// Clear removes every fault, including a lost link, leaving a healthy device.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nth, f.always, f.when = 0, false, nil
	f.hang, f.hangApplied = false, false
	f.linkLost, f.linkApplied = false, false
	f.haltFails = false
}

// Sets returns how many times Set has been called with a valid value, failed
// or not, so tests can check how often the engine tried.
func (f *Faults) Sets() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sets
}

// verdict is what the faults decide about one Set.
type verdict struct {
	err   error // returned by the Set (after the hang, if any)
	apply bool  // whether the effect happens
	hang  bool  // whether the Set blocks until its context is done
}

// onSet counts a Set of value and decides its fate, consuming the one-shot
// faults it fires.
func (f *Faults) onSet(value float64) verdict {
	f.mu.Lock()
	f.sets++
	nthFires := false
	if f.nth > 0 {
		f.nth--
		nthFires = f.nth == 0
	}
	switch {
	case f.linkLost:
		applied := f.linkApplied
		f.mu.Unlock()
		return verdict{err: actuators.ErrLinkLost, apply: applied}
	case f.always:
		f.mu.Unlock()
		return verdict{err: notApplied("FailAlways")}
	case f.when == nil:
		// The common case decides under one lock: every Set pays for it.
		v := f.tailLocked(nthFires)
		f.mu.Unlock()
		return v
	}
	// The predicate runs unlocked, so one that calls back into the Faults
	// cannot deadlock; the hang is then decided under the lock again.
	when := f.when
	f.mu.Unlock()
	if when(value) {
		return verdict{err: notApplied(fmt.Sprintf("FailWhen %g", value))}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tailLocked(nthFires)
}

// tailLocked decides a Set that the link, FailAlways and FailWhen let
// through. The caller holds f.mu.
func (f *Faults) tailLocked(nthFires bool) verdict {
	if nthFires {
		return verdict{err: notApplied("FailOnNth")}
	}
	if f.hang {
		f.hang = false
		return verdict{hang: true, apply: f.hangApplied}
	}
	return verdict{apply: true}
}

// link reports a lost link, for reads.
func (f *Faults) link() (lost bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.linkLost {
		return true, actuators.ErrLinkLost
	}
	return false, nil
}

func (f *Faults) onHalt() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.haltFails {
		return fmt.Errorf("%w (FailHalt)", ErrInjected)
	}
	return nil
}
