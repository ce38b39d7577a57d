package actuators

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/saga-supervisor/saga-supervisor/limits"
)

// Kind is what an actuator physically is. It decides the unit of its value
// and whether a step on it can be undone.
type Kind string

// The actuator kinds of DESIGN §2.
const (
	Servo    Kind = "servo"    // angle in degrees
	PWM      Kind = "pwm"      // duty cycle 0..1
	Digital  Kind = "digital"  // 0 (off) or 1 (on)
	Setpoint Kind = "setpoint" // a scalar sent to an MCU or device
	Pulse    Kind = "pulse"    // a momentary action; no undo exists
)

// Reversible reports whether a step on an actuator of this kind can be
// compensated by driving it back to its prior value.
func (k Kind) Reversible() bool { return k != Pulse }

// Valid reports whether k is one of the known kinds.
func (k Kind) Valid() bool {
	switch k {
	case Servo, PWM, Digital, Setpoint, Pulse:
		return true
	}
	return false
}

// Driver sets one output. Implementations must honour the context deadline:
// the engine treats a Set that returns after its deadline as in doubt.
//
// A failed Set is in doubt by default: the engine assumes the output may
// have moved and drives it back to its prior when the saga unwinds. Only an
// error wrapping ErrNotApplied says otherwise. A driver wraps it only when
// it knows the output did not change — the value failed the driver's own
// checks before any I/O, nothing was sent, or the device refused the
// command before acting on it — and never for a timeout, a lost link, a
// failed write or an error it does not understand. ErrNotApplied decides
// even when the error also wraps another cause, such as a context error.
type Driver interface {
	// Set commands the output to value. nil means the output was driven to
	// value. An error wrapping ErrNotApplied promises the output did not
	// change, so the engine has nothing to undo for that step; any other
	// error leaves the effect in doubt (it may have happened).
	Set(ctx context.Context, value float64) error
	// Halt makes the output inert (stop pulses, de-energise). It is the
	// `detach` safe policy and must work even when Set is failing.
	Halt() error
}

// ReadBacker is implemented by drivers that can report the output's actual
// position or state (a servo's feedback, a relay's sense line).
type ReadBacker interface {
	ReadBack(ctx context.Context) (float64, error)
}

// Drifter is implemented by drivers whose device may move an output on its
// own — a microcontroller whose watchdog, restart or e-stop sends its
// outputs to their safe values. Drifted reports where the device holds the
// output when that differs from commanded (the value the supervisor last
// drove it to), and false whenever it cannot tell: no fresh report from the
// device, or a command to the output in flight.
type Drifter interface {
	Drifted(commanded float64) (actual float64, moved bool)
}

// ErrLinkLost is returned by drivers whose connection to the hardware is
// gone. An effect attempted over a lost link is in doubt.
var ErrLinkLost = errors.New("actuators: link lost")

// ErrNotApplied is wrapped by a Set error that promises the output did not
// change: the value was refused by the driver's own validation before any
// I/O, nothing was sent, or the device refused the command (a NAK, an ack
// with ok:false) before acting on it. Wrap it, e.g.
// fmt.Errorf("...: %w", actuators.ErrNotApplied), only when that is known;
// an error without it is in doubt, and the engine compensates the step.
var ErrNotApplied = errors.New("actuators: not applied")

// ErrNoReading is wrapped by a ReadBack that has nothing to report because
// the output is not being driven — a PWM servo never commanded since the
// process started, or detached by its safe policy. It is not a fault: the
// supervisor shows it in its status but does not count it against
// readiness (an unreachable device is ErrLinkLost, or any other error).
var ErrNoReading = errors.New("actuators: output not driven, nothing to read back")

// SafeMode names a safe policy.
type SafeMode string

// The safe policies of DESIGN §2.
const (
	SafeHold   SafeMode = "hold"   // stay at the last commanded value
	SafeValue  SafeMode = "value"  // go to SafePolicy.Value
	SafeDetach SafeMode = "detach" // Driver.Halt: stop pulses / de-energise
)

// SafePolicy is what an actuator does on halt and when a compensation fails.
type SafePolicy struct {
	Mode  SafeMode
	Value float64 // used when Mode is SafeValue
}

func (p SafePolicy) String() string {
	if p.Mode == SafeValue {
		return fmt.Sprintf("value:%g", p.Value)
	}
	if p.Mode == "" {
		return string(SafeHold)
	}
	return string(p.Mode)
}

// Actuator is a named output with its driver, limits and safe policy.
type Actuator struct {
	Name    string
	Kind    Kind
	Limits  limits.Spec
	Safe    SafePolicy
	Timeout time.Duration // per-Set driver timeout; 0 means DefaultTimeout
	// Initial is the commanded value assumed before any journaled command,
	// e.g. the parked position the robot is powered up in.
	Initial float64
	Driver  Driver
}

// DefaultTimeout bounds a driver call when the actuator sets none.
const DefaultTimeout = 500 * time.Millisecond

// DriverTimeout returns the bound on one driver call.
func (a *Actuator) DriverTimeout() time.Duration {
	if a.Timeout > 0 {
		return a.Timeout
	}
	return DefaultTimeout
}

// GoSafe applies the safe policy. Hold does nothing: the output stays where
// it was last commanded.
func (a *Actuator) GoSafe(ctx context.Context) error {
	switch a.Safe.Mode {
	case SafeValue:
		ctx, cancel := context.WithTimeout(ctx, a.DriverTimeout())
		defer cancel()
		if err := a.Driver.Set(ctx, a.Safe.Value); err != nil {
			return fmt.Errorf("actuator %s: safe value %g: %w", a.Name, a.Safe.Value, err)
		}
		return nil
	case SafeDetach:
		if err := a.Driver.Halt(); err != nil {
			return fmt.Errorf("actuator %s: detach: %w", a.Name, err)
		}
		return nil
	default:
		return nil
	}
}

// Registry holds actuators by name. It is built once at start-up and then
// only read, so it needs no lock.
type Registry struct {
	byName map[string]*Actuator
	names  []string
}

// NewRegistry checks and indexes the given actuators.
func NewRegistry(list ...*Actuator) (*Registry, error) {
	r := &Registry{byName: make(map[string]*Actuator, len(list))}
	for _, a := range list {
		switch {
		case a == nil:
			return nil, errors.New("actuators: nil actuator")
		case a.Name == "":
			return nil, errors.New("actuators: actuator with no name")
		case !a.Kind.Valid():
			return nil, fmt.Errorf("actuators: %s: unknown kind %q", a.Name, a.Kind)
		case a.Driver == nil:
			return nil, fmt.Errorf("actuators: %s: no driver", a.Name)
		}
		if _, dup := r.byName[a.Name]; dup {
			return nil, fmt.Errorf("actuators: %s: defined twice", a.Name)
		}
		if err := a.Limits.Validate(); err != nil {
			return nil, fmt.Errorf("actuators: %s: %w", a.Name, err)
		}
		r.byName[a.Name] = a
		r.names = append(r.names, a.Name)
	}
	sort.Strings(r.names)
	return r, nil
}

// Get returns the actuator with the given name, or nil.
func (r *Registry) Get(name string) *Actuator { return r.byName[name] }

// Names lists the actuator names in sorted order.
func (r *Registry) Names() []string { return r.names }
