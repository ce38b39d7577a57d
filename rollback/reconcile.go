package rollback

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// Reconcile settings: how close a read-back must be to a value the journal
// allows (a fraction of the actuator's [min, max] range, for drivers that
// quantise), and how long a differing read-back is read again before it
// counts — an output still moving (a servo slewing after a crash) settles.
const (
	reconcileTolerance = 1e-3
	reconcileSettle    = time.Second
	reconcileEvery     = 50 * time.Millisecond
	// reconcileReadWait bounds, for all actuators together, how long a
	// read-back that fails is tried again: a board whose link is still
	// starting has sent no report yet (a serial MCU's first TELEMETRY
	// comes a period after its HELLO).
	reconcileReadWait = 3 * time.Second
)

// Mismatch is an actuator found at start elsewhere than the journal says:
// its device was moved while the journal could not record it (a halt's
// safe moves after the disk filled, a hand on the hardware, another
// program).
//
// Or one that reports its position but could not be read at start
// (Unreadable): where it is cannot be confirmed, so it counts as a
// mismatch too, and nothing is adopted for it.
type Mismatch struct {
	Actuator   string
	Journal    float64 // where the journal says it is
	Found      float64 // where it reads back
	Unreadable string  // why it could not be read back; "" when it was
}

func (m Mismatch) String() string {
	if m.Unreadable != "" {
		return fmt.Sprintf("%s cannot be read back (%s), the journal says %g", m.Actuator, m.Unreadable, m.Journal)
	}
	return fmt.Sprintf("%s reads %g, the journal says %g", m.Actuator, m.Found, m.Journal)
}

// Reconcile compares, after the rebuild and before Recover moves anything,
// where the journal says each actuator is with where it reads back (the
// actuators whose drivers implement actuators.ReadBacker and report a
// position). A step or compensation in flight at the crash allows both the
// value before and after it; an actuator the journal last detached is not
// compared (it rests wherever it came to). Each actuator found elsewhere is adopted: an
// OBSERVED record is journaled and the engine believes the world, so no
// later unwind drives it to a prior the journal never saw it leave. The
// caller then halts (an operator must look before anything moves under a
// belief the journal got wrong). An actuator that is not driven
// (ErrNoReading: detached, or never commanded) is left as the journal
// says. One whose read-back fails otherwise is read again, up to
// reconcileReadWait for all together, and then reported Unreadable: the
// caller halts for it too. (Left as the journal says, a serial board read
// before its first report after a restart would fail every read, and
// recovery would unwind open sagas from where the journal thinks the
// actuators are, while the board's watchdog has parked them elsewhere.)
func (e *Engine) Reconcile(ctx context.Context) ([]Mismatch, error) {
	var out []Mismatch
	readDeadline := time.Now().Add(reconcileReadWait)
	for _, name := range e.cfg.Actuators.Names() {
		a := e.cfg.Actuators.Get(name)
		rb, ok := a.Driver.(actuators.ReadBacker)
		if !ok {
			continue
		}
		e.mu.Lock()
		st := e.acts[name]
		want := []float64{st.commanded}
		if st.altOK {
			want = append(want, st.alt)
		}
		detached := st.detached
		e.mu.Unlock()
		if detached {
			continue // the journal detached it: it rests wherever it came to
		}
		tol := reconcileTolerance * math.Max(1, a.Limits.Max-a.Limits.Min)
		agrees := func(v float64) bool {
			for _, w := range want {
				if math.Abs(v-w) <= tol {
					return true
				}
			}
			return false
		}
		var found float64
		var readErr error
		settled := false
		deadline := time.Now().Add(reconcileSettle)
		for {
			rctx, cancel := context.WithTimeout(ctx, a.DriverTimeout())
			v, err := rb.ReadBack(rctx)
			cancel()
			if errors.Is(err, actuators.ErrNoReading) {
				settled = true // not driven: nothing to compare
				break
			}
			if err != nil {
				if readErr = err; time.Now().After(readDeadline) || ctx.Err() != nil {
					break
				}
				time.Sleep(reconcileEvery)
				continue
			}
			readErr = nil
			if found = v; agrees(v) {
				settled = true
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(reconcileEvery)
		}
		if settled && readErr == nil && len(want) == 2 && math.Abs(found-want[0]) > tol {
			// Found at the value before the move in flight, the journal's
			// second value: that move did not take. The engine believes
			// the world from here on (journaled as OBSERVED, no halt: the
			// journal allowed it), or the next saga would record the
			// target as its prior and an abort drive the actuator to a
			// place it never was.
			if _, err := e.Adopt(name, func(float64) (float64, bool) { return found, true },
				fmt.Sprintf("at start the actuator reads back %g, the value before the journal's last move in flight (to %g): that move did not take", found, want[0])); err != nil {
				return out, err
			}
			continue
		}
		if settled {
			continue
		}
		if readErr != nil {
			e.log.Warn("reconcile: cannot read back at start: where it is cannot be confirmed", "actuator", name, "err", readErr)
			out = append(out, Mismatch{Actuator: name, Journal: want[0], Unreadable: readErr.Error()})
			continue
		}
		m := Mismatch{Actuator: name, Journal: want[0], Found: found}
		adopted, err := e.Adopt(name, func(float64) (float64, bool) { return found, true },
			"at start the actuator reads back elsewhere than the journal says: "+m.String())
		if err != nil {
			return out, err
		}
		if adopted {
			out = append(out, m)
		}
	}
	return out, nil
}
