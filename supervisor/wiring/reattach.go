package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/internal/retrylog"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// ReattachEvery is how often a part that could not be opened at start (a
// PWM or GPIO chip, an I2C bus or device) is tried again.
const ReattachEvery = 500 * time.Millisecond

// errDetached is why an actuator whose part is not open refuses: nothing
// was sent, and it has no position to report.
var errDetached = errors.New("not attached: its part could not be opened")

// reattach stands in for a driver (or a supply's reader) whose part could
// not be opened: it refuses every command (nothing is sent), is a safety
// input that keeps the supervisor not ready and names the part and the
// error, and tries the open again every ReattachEvery until it succeeds;
// from then on it passes every call to what it opened.
type reattach[T any] struct {
	what string // "actuator NAME" or "supply NAME": the input's name
	open func() (T, error)
	log  *slog.Logger
	gate retrylog.Gate
	// lock serialises the open with every other open of the Env (shared
	// buses and boards).
	lock sync.Locker

	mu       sync.Mutex
	got      T
	attached bool
	err      error

	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

func newReattach[T any](e *Env, what string, err error, open func() (T, error)) *reattach[T] {
	r := &reattach[T]{what: what, open: open, log: e.Logger, lock: &e.mu, err: err,
		stop: make(chan struct{}), stopped: make(chan struct{})}
	r.logFailure(err)
	e.retries = append(e.retries, r)
	e.inputs = append(e.inputs, r)
	go r.run()
	return r
}

func (r *reattach[T]) logFailure(err error) {
	if log, n := r.gate.Failed(err, time.Now()); log {
		r.log.Warn("part not opened; retrying", "part", r.what, "err", err, "attempts", n)
	}
}

func (r *reattach[T]) run() {
	defer close(r.stopped)
	t := time.NewTicker(ReattachEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		r.lock.Lock()
		got, err := r.open()
		r.lock.Unlock()
		r.mu.Lock()
		if err == nil {
			r.got, r.attached, r.err = got, true, nil
		} else {
			r.err = err
		}
		r.mu.Unlock()
		if err != nil {
			r.logFailure(err)
			continue
		}
		_, downFor, _ := r.gate.Up(time.Now())
		r.log.Info("part opened; attached", "part", r.what, "after", downFor.Round(time.Millisecond))
		return
	}
}

// current returns what was opened, if it was.
func (r *reattach[T]) current() (T, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got, r.attached
}

// Name names the input: the actuator or supply whose part is missing.
func (r *reattach[T]) Name() string { return r.what }

// Ready is nil once the part is open; until then it says what failed.
func (r *reattach[T]) Ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.attached {
		return nil
	}
	return fmt.Errorf("%w (retried every %v): %w", errDetached, ReattachEvery, r.err)
}

// Close stops the retries and waits for an open in progress.
func (r *reattach[T]) Close() error {
	r.once.Do(func() { close(r.stop) })
	<-r.stopped
	return nil
}

// detachedDriver is an actuator's driver while its part is missing.
type detachedDriver struct{ *reattach[actuators.Driver] }

// Set drives the part once it is open; until then nothing is sent.
func (d detachedDriver) Set(ctx context.Context, v float64) error {
	if drv, ok := d.current(); ok {
		return drv.Set(ctx, v)
	}
	return fmt.Errorf("%s: %w: %w", d.what, actuators.ErrNotApplied, d.Ready())
}

// Halt halts the part once it is open. Until then it cannot reach the
// output, and says so: the output is in whatever state it was left in.
func (d detachedDriver) Halt() error {
	if drv, ok := d.current(); ok {
		return drv.Halt()
	}
	return fmt.Errorf("%s: cannot make it inert: %w", d.what, d.Ready())
}

// ReadBack reads the part back once it is open (ErrNoReading if its
// driver cannot). Until then it fails: recovery cannot confirm where the
// output is, and halts for it, as for a board whose link is down.
func (d detachedDriver) ReadBack(ctx context.Context) (float64, error) {
	drv, ok := d.current()
	if !ok {
		return 0, fmt.Errorf("%s: %w", d.what, d.Ready())
	}
	if rb, ok := drv.(actuators.ReadBacker); ok {
		return rb.ReadBack(ctx)
	}
	return 0, actuators.ErrNoReading
}

// detachedSupply is a supply's reader while its monitor is missing: every
// reading fails, so the supply is unknown and the gate refuses.
type detachedSupply struct{ *reattach[VoltSource] }

func (s detachedSupply) Volts() (float64, time.Time, error) {
	if src, ok := s.current(); ok {
		return src.Volts()
	}
	return 0, time.Time{}, fmt.Errorf("%s: %w", s.what, s.Ready())
}

// retryActuator returns a stand-in for actuator name, whose open failed
// with err, if its kind says the failure is a part that may yet appear.
func retryActuator(e *Env, k Kind, name string, a *config.Actuator, err error) (actuators.Driver, bool) {
	if k.Absent == nil || !k.Absent(err) {
		return nil, false
	}
	r := newReattach(e, "actuator "+name, err, func() (actuators.Driver, error) {
		d, err := k.OpenActuator(e, name, a)
		if err == nil && d == nil {
			err = fmt.Errorf("no %s driver for kind %s", a.Driver, a.Kind)
		}
		return d, err
	})
	return detachedDriver{r}, true
}

// retrySupply is retryActuator for a supply's reader.
func retrySupply(e *Env, k Kind, name string, s *config.Supply, err error) (VoltSource, bool) {
	if k.Absent == nil || !k.Absent(err) {
		return nil, false
	}
	r := newReattach(e, "supply "+name, err, func() (VoltSource, error) { return k.OpenSupply(e, name, s) })
	return detachedSupply{r}, true
}
