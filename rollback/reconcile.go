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
)

// Mismatch is an actuator found at start elsewhere than the journal says:
// its device was moved while the journal could not record it (a halt's
// safe moves after the disk filled, a hand on the hardware, another
// program).
type Mismatch struct {
	Actuator string
	Journal  float64 // where the journal says it is
	Found    float64 // where it reads back
}

func (m Mismatch) String() string {
	return fmt.Sprintf("%s reads %g, the journal says %g", m.Actuator, m.Found, m.Journal)
}

// Reconcile compares, after replay and before Recover moves anything,
// where the journal says each actuator is with where it reads back (the
// actuators whose drivers implement actuators.ReadBacker and report a
// position). A step or compensation in flight at the crash allows both the
// value before and after it; an actuator the journal last detached is not
// compared (it rests wherever it came to). Each actuator found elsewhere is adopted: an
// OBSERVED record is journaled and the engine believes the world, so no
// later unwind drives it to a prior the journal never saw it leave. The
// caller then halts (an operator must look before anything moves under a
// belief the journal got wrong). An actuator that cannot be read, or is not
// driven (ErrNoReading: detached, or never commanded), is left as the
// journal says.
func (e *Engine) Reconcile(ctx context.Context) ([]Mismatch, error) {
	var out []Mismatch
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
		settled := false
		deadline := time.Now().Add(reconcileSettle)
		for {
			rctx, cancel := context.WithTimeout(ctx, a.DriverTimeout())
			v, err := rb.ReadBack(rctx)
			cancel()
			if err != nil {
				if !errors.Is(err, actuators.ErrNoReading) {
					e.log.Warn("reconcile: cannot read back; the journal's value stands", "actuator", name, "err", err)
				}
				settled = true // nothing to compare
				break
			}
			if found = v; agrees(v) {
				settled = true
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(reconcileEvery)
		}
		if settled {
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
