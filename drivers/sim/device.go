package sim

import (
	"context"
	"fmt"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// The drivers the rollback engine sees.
var (
	_ actuators.Driver     = (*Servo)(nil)
	_ actuators.ReadBacker = (*Servo)(nil)
	_ actuators.Driver     = (*Digital)(nil)
	_ actuators.ReadBacker = (*Digital)(nil)
	_ actuators.Driver     = (*Setpoint)(nil)
	_ actuators.ReadBacker = (*Setpoint)(nil)
	_ actuators.Driver     = (*Pulse)(nil)
)

// device is what every simulated device shares: its faults, its record in
// the world and the error it was made with, if any.
type device struct {
	// faults is the Faults the public device type embeds; the public types
	// embed it themselves, rather than through device, so that its methods
	// show in their documentation.
	faults *Faults
	name   string
	kind   kind
	rec    *record // nil when err is set
	// err is a mistake made when the device was made (a bad name or value,
	// a kind clash with the world file, a closed world). The constructors
	// return no error, so it is returned by every operation instead.
	err error
}

// Name returns the device's name.
func (d *device) Name() string { return d.name }

// Err returns the error the device was made with, or nil. Every Set,
// ReadBack and Halt of such a device returns it; a Set's error also wraps
// actuators.ErrNotApplied, since such a device never moves.
func (d *device) Err() error { return d.err }

// State returns the device's state as the world sees it, as in
// World.Snapshot. It is the zero DeviceState for a device made with an error.
func (d *device) State() DeviceState {
	if d.rec == nil {
		return DeviceState{}
	}
	return d.rec.snapshot()
}

func (d *device) fail(op string, value float64, err error) error {
	return fmt.Errorf("sim: %s %s: %s %g: %w", d.kind, d.name, op, value, err)
}

// set runs one Set of value through the faults and, if they let its effect
// happen, applies change to the world. Its errors wrap
// actuators.ErrNotApplied when the world was not touched: a device made with
// an error, a value refused, a command never sent, a fault that fails
// without effect. A hang, a lost link and a world that cannot be written
// are in doubt.
func (d *device) set(ctx context.Context, value float64, change func(st *state, now int64)) error {
	if d.err != nil {
		return fmt.Errorf("%w (%w)", d.err, actuators.ErrNotApplied)
	}
	if !finite(value) {
		return d.fail("set", value, fmt.Errorf("value is not finite: %w", actuators.ErrNotApplied))
	}
	// A command whose deadline has already passed is never sent, as a real
	// driver would not start a bus transaction it has no time for.
	if err := ctx.Err(); err != nil {
		return d.fail("set", value, fmt.Errorf("not sent: %w (%w)", actuators.ErrNotApplied, err))
	}
	v := d.faults.onSet(value)
	if v.apply {
		if err := d.rec.update(change); err != nil {
			return d.fail("set", value, err)
		}
	}
	if v.hang {
		select {
		case <-ctx.Done():
			return d.fail("set", value, ctx.Err())
		case <-d.faults.done:
			return d.fail("set", value, ErrWorldClosed)
		}
	}
	if v.err != nil {
		return d.fail("set", value, v.err)
	}
	return nil
}

// readBack returns the device's position now, as its sensor would.
func (d *device) readBack(ctx context.Context) (float64, error) {
	if d.err != nil {
		return 0, d.err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("sim: %s %s: read back: %w", d.kind, d.name, err)
	}
	if _, err := d.faults.link(); err != nil {
		return 0, fmt.Errorf("sim: %s %s: read back: %w", d.kind, d.name, err)
	}
	if d.rec.w.closed.Load() {
		return 0, fmt.Errorf("sim: %s %s: read back: %w", d.kind, d.name, ErrWorldClosed)
	}
	st, now := d.rec.read()
	return st.position(now), nil
}

// halt detaches the device, applying change to the world.
func (d *device) halt(change func(st *state, now int64)) error {
	if d.err != nil {
		return d.err
	}
	if err := d.faults.onHalt(); err != nil {
		return fmt.Errorf("sim: %s %s: halt: %w", d.kind, d.name, err)
	}
	if err := d.rec.update(func(st *state, now int64) {
		change(st, now)
		st.detached = true
		st.since = now
	}); err != nil {
		return fmt.Errorf("sim: %s %s: halt: %w", d.kind, d.name, err)
	}
	return nil
}

// Servo is a simulated hobby servo: an angle in degrees that moves toward
// the commanded angle at a finite slew rate.
//
// Its position is computed from the time of the last command, so no
// goroutine runs per servo. A servo whose process dies keeps moving toward
// its last command, as one driven by a hardware PWM controller does, and the
// next process finds it where it has got to by then.
type Servo struct {
	Faults
	device
}

// Servo returns the servo named name, made at angle initial (degrees) with
// the given slew (degrees per second; 0 means it reaches any angle at once).
//
// If the world already has the servo, its state — angle, command, slew —
// wins over initial and slewDegPerSec: a world file left by a killed process
// says where the arm really is. Asking again for the same name in one World
// returns the same Servo. Mistakes (a bad name, a name the world has as
// another kind, a closed world) are returned by every later call; see Err.
func (w *World) Servo(name string, initial, slewDegPerSec float64) *Servo {
	s := &Servo{}
	switch {
	case !finite(initial):
		s.err = fmt.Errorf("sim: servo %s: initial angle %g is not finite", name, initial)
	case !validSlew(slewDegPerSec):
		s.err = fmt.Errorf("sim: servo %s: slew %g is not >= 0", name, slewDegPerSec)
	}
	return attach(w, s, &s.Faults, &s.device, name, kindServo, state{commanded: initial, from: initial, slew: slewDegPerSec})
}

// Set commands the servo to deg. The command is recorded at once; the
// position gets there at the servo's slew. Set re-attaches a halted servo.
func (s *Servo) Set(ctx context.Context, deg float64) error {
	return s.set(ctx, deg, func(st *state, now int64) {
		// Restart the motion from wherever the servo is now, so a command
		// that interrupts a move does not make it jump.
		st.from = st.position(now)
		st.since = now
		st.commanded = deg
		st.detached = false
	})
}

// ReadBack returns the servo's angle now, partway to the command if it is
// still moving.
func (s *Servo) ReadBack(ctx context.Context) (float64, error) { return s.readBack(ctx) }

// Halt detaches the servo: its pulses stop and it stays where it physically
// is, short of the command if it was moving, until the next Set.
func (s *Servo) Halt() error {
	return s.halt(func(st *state, now int64) { st.from = st.position(now) })
}

// Digital is a simulated on/off output, such as a relay: 0 is off, 1 is on.
type Digital struct {
	Faults
	device
}

// Digital returns the digital output named name, made in state initial (0 or
// 1). As with Servo, an existing device's state wins over initial.
func (w *World) Digital(name string, initial float64) *Digital {
	d := &Digital{}
	if initial != 0 && initial != 1 {
		d.err = fmt.Errorf("sim: digital %s: initial value %g is not 0 or 1", name, initial)
	}
	return attach(w, d, &d.Faults, &d.device, name, kindDigital, state{commanded: initial, from: initial})
}

// Set switches the output off (0) or on (1); any other value is an error,
// wrapping actuators.ErrNotApplied, and changes nothing.
func (d *Digital) Set(ctx context.Context, value float64) error {
	if d.err == nil && value != 0 && value != 1 {
		return d.fail("set", value, fmt.Errorf("digital value must be 0 or 1: %w", actuators.ErrNotApplied))
	}
	return d.set(ctx, value, func(st *state, now int64) {
		st.commanded, st.from, st.since, st.detached = value, value, now, false
	})
}

// ReadBack returns the output's state now, as a sense line would: 0 after
// Halt.
func (d *Digital) ReadBack(ctx context.Context) (float64, error) { return d.readBack(ctx) }

// Halt de-energises the output: it reads 0 until the next Set, while the
// world still records the last command.
func (d *Digital) Halt() error {
	return d.halt(func(st *state, _ int64) { st.from = 0 })
}

// Setpoint is a simulated scalar sent to a device or MCU, such as a motor
// speed or a PWM duty cycle.
type Setpoint struct {
	Faults
	device
}

// Setpoint returns the setpoint named name, made at initial. As with Servo,
// an existing device's state wins over initial.
func (w *World) Setpoint(name string, initial float64) *Setpoint {
	p := &Setpoint{}
	if !finite(initial) {
		p.err = fmt.Errorf("sim: setpoint %s: initial value %g is not finite", name, initial)
	}
	return attach(w, p, &p.Faults, &p.device, name, kindSetpoint, state{commanded: initial, from: initial})
}

// Set sends value; it takes effect at once.
func (p *Setpoint) Set(ctx context.Context, value float64) error {
	return p.set(ctx, value, func(st *state, now int64) {
		st.commanded, st.from, st.since, st.detached = value, value, now, false
	})
}

// ReadBack returns the value the device holds.
func (p *Setpoint) ReadBack(ctx context.Context) (float64, error) { return p.readBack(ctx) }

// Halt marks the setpoint detached until the next Set. The value is left as
// it is: the simulation cannot know what a device does with a setpoint it no
// longer receives, and holding it is the conservative guess.
func (p *Setpoint) Halt() error {
	return p.halt(func(*state, int64) {})
}

// Pulse is a simulated momentary output, such as a solenoid kicker: each Set
// is one kick. A kick cannot be undone, which is why the rollback engine
// reports steps on a pulse output as orphaned rather than compensating them.
// It has no ReadBack: there is no position to read.
type Pulse struct {
	Faults
	device
}

// Pulse returns the pulse output named name. An existing device keeps its
// kick count.
func (w *World) Pulse(name string) *Pulse {
	p := &Pulse{}
	return attach(w, p, &p.Faults, &p.device, name, kindPulse, state{})
}

// Set performs one kick. value is recorded as the commanded value (e.g. the
// kick's strength) but does not change what a kick is.
func (p *Pulse) Set(ctx context.Context, value float64) error {
	return p.set(ctx, value, func(st *state, now int64) {
		st.kicks++
		st.commanded, st.since, st.detached = value, now, false
	})
}

// Kicks returns how many kicks the output has made, by any process that used
// the world file.
func (p *Pulse) Kicks() uint64 { return p.State().Kicks }

// Halt marks the output detached until the next Set; a kick in progress is
// momentary and has nothing to stop.
func (p *Pulse) Halt() error {
	return p.halt(func(*state, int64) {})
}

// Device is what the simulated world makes for an actuator: a driver that
// also reports a failure to attach it to the world (Err).
type Device interface {
	actuators.Driver
	Err() error
}

// ForKind makes the simulated device for an actuator of kind k named
// name, starting at initial (a servo slewing at slew deg/s; 0: at once).
// ok is false for a kind the world has no device for.
func (w *World) ForKind(name string, k actuators.Kind, initial, slew float64) (d Device, ok bool) {
	switch k {
	case actuators.Servo:
		return w.Servo(name, initial, slew), true
	case actuators.Digital:
		return w.Digital(name, initial), true
	case actuators.PWM, actuators.Setpoint:
		return w.Setpoint(name, initial), true
	case actuators.Pulse:
		return w.Pulse(name), true
	}
	return nil, false
}
