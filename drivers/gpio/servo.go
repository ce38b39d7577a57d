package gpio

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

var (
	_ actuators.Driver     = (*Servo)(nil)
	_ actuators.ReadBacker = (*Servo)(nil)
)

// DefaultPeriod is a hobby servo's pulse period: 50 Hz.
const DefaultPeriod = 20 * time.Millisecond

// maxPeriod bounds ServoConfig.Period; servos run at 50..330 Hz.
const maxPeriod = time.Second

// ServoConfig calibrates a servo: the pulse widths at the ends of its angle
// range. Angles map linearly onto pulse widths in between.
type ServoConfig struct {
	// MinPulse is the pulse width at MinAngle, MaxPulse at MaxAngle, e.g.
	// 500µs and 2500µs. MinPulse may be the longer of the two, for a servo
	// mounted the other way round.
	MinPulse, MaxPulse time.Duration
	// MinAngle and MaxAngle are the angle range in degrees, e.g. -90..90
	// or 0..180. MinAngle must be below MaxAngle.
	MinAngle, MaxAngle float64
	// Period is the pulse period; 0 means DefaultPeriod (20 ms, 50 Hz).
	Period time.Duration
}

// withDefaults fills in Period and checks the calibration.
func (c ServoConfig) withDefaults() (ServoConfig, error) {
	if c.Period == 0 {
		c.Period = DefaultPeriod
	}
	switch {
	case c.Period < 0 || c.Period > maxPeriod:
		return c, fmt.Errorf("%w: servo period %s outside (0, %s]", ErrConfig, c.Period, maxPeriod)
	case c.MinPulse <= 0 || c.MaxPulse <= 0 || c.MinPulse > c.Period || c.MaxPulse > c.Period:
		return c, fmt.Errorf("%w: servo pulse range %s..%s must be positive and within the period %s", ErrConfig, c.MinPulse, c.MaxPulse, c.Period)
	case c.MinPulse == c.MaxPulse:
		return c, fmt.Errorf("%w: servo pulse range %s..%s is empty", ErrConfig, c.MinPulse, c.MaxPulse)
	case !finite(c.MinAngle) || !finite(c.MaxAngle) || c.MinAngle >= c.MaxAngle:
		return c, fmt.Errorf("%w: servo angle range %g..%g must be finite and increasing", ErrConfig, c.MinAngle, c.MaxAngle)
	}
	return c, nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// PulseFor returns the pulse width for angle, to the nanosecond. An angle
// outside [MinAngle, MaxAngle], or not finite, is refused with
// ErrInvalidValue.
func (c ServoConfig) PulseFor(angle float64) (time.Duration, error) {
	if !finite(angle) || angle < c.MinAngle || angle > c.MaxAngle {
		return 0, fmt.Errorf("%w: angle %g outside %g..%g", ErrInvalidValue, angle, c.MinAngle, c.MaxAngle)
	}
	frac := (angle - c.MinAngle) / (c.MaxAngle - c.MinAngle)
	return c.MinPulse + time.Duration(math.Round(frac*float64(c.MaxPulse-c.MinPulse))), nil
}

// AngleFor is the inverse of PulseFor: the angle a pulse width commands. It
// is outside the angle range for a width outside the pulse range.
func (c ServoConfig) AngleFor(width time.Duration) float64 {
	frac := float64(width-c.MinPulse) / float64(c.MaxPulse-c.MinPulse)
	return c.MinAngle + frac*(c.MaxAngle-c.MinAngle)
}

// PulseOutput produces a servo pulse train: a PWM pin, a kernel PWM channel,
// a PWM expander channel.
type PulseOutput interface {
	// SetPulse starts or changes the pulse train. Like actuators.Driver.Set,
	// an error wrapping actuators.ErrNotApplied promises the output did not
	// change; any other error means it may have.
	SetPulse(ctx context.Context, width, period time.Duration) error
	// Detach stops the pulses.
	Detach() error
}

// PulseReader is a PulseOutput that can report the pulse train it is
// producing, e.g. from the kernel's PWM files.
type PulseReader interface {
	// Pulse returns the current pulse width and period and whether pulses
	// are being produced.
	Pulse() (width, period time.Duration, on bool, err error)
}

// Servo is a hobby servo driven by pulse width: its value is an angle in
// degrees. It implements actuators.Driver and actuators.ReadBacker; see the
// package documentation for what ReadBack can and cannot know.
type Servo struct {
	name string
	cfg  ServoConfig
	out  PulseOutput

	mu     sync.Mutex
	angle  float64 // last angle the output accepted
	driven bool    // angle is valid: set since start and not detached
	// doubt is why the output's state is unknown — a write that failed
	// and may have taken effect, or a failed detach — until the next
	// successful Set or Halt; nil otherwise.
	doubt error
}

// NewServo returns a servo calibrated by cfg, driving out. name is used in
// errors. Nothing is written until the first Set.
func NewServo(name string, out PulseOutput, cfg ServoConfig) (*Servo, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("gpio: servo %s: %w", name, err)
	}
	if out == nil {
		return nil, fmt.Errorf("gpio: servo %s: %w: no pulse output", name, ErrConfig)
	}
	return &Servo{name: name, cfg: c, out: out}, nil
}

// OpenPinServo returns a servo on a periph PWM pin (see PinPWM).
func OpenPinServo(pin string, cfg ServoConfig) (*Servo, error) {
	p, err := OpenPinPWM(pin)
	if err != nil {
		return nil, err
	}
	return NewServo(pin, p, cfg)
}

// OpenSysfsServo returns a servo on a kernel PWM channel (see SysfsPWM),
// exporting the channel if needed.
func OpenSysfsServo(sc SysfsConfig, cfg ServoConfig) (*Servo, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, fmt.Errorf("gpio: servo %s: %w", sc.name(), err)
	}
	p, err := OpenSysfsPWM(sc)
	if err != nil {
		return nil, err
	}
	return NewServo(sc.name(), p, cfg)
}

// Config returns the servo's calibration, with defaults filled in.
func (s *Servo) Config() ServoConfig { return s.cfg }

// String names the servo.
func (s *Servo) String() string { return "servo " + s.name }

// Set moves the servo to angle degrees. An angle outside the calibrated
// range, or not finite, is refused with ErrInvalidValue and nothing is
// written; so is a Set whose ctx is already done. Those errors, and a
// PulseOutput's own promise, wrap actuators.ErrNotApplied; any other
// failure is in doubt.
func (s *Servo) Set(ctx context.Context, angle float64) error {
	w, err := s.cfg.PulseFor(angle)
	if err != nil {
		return fmt.Errorf("gpio: %s: set: %w (%w)", s, err, actuators.ErrNotApplied)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("gpio: %s: set %g: %w: %w", s, angle, actuators.ErrNotApplied, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.out.SetPulse(ctx, w, s.cfg.Period); err != nil {
		err = fmt.Errorf("gpio: %s: set %g (pulse %s): %w", s, angle, w, err)
		if inDoubt(err) {
			// The pulse may have changed: until a Set or Halt succeeds,
			// neither the remembered angle nor "not driven" is known.
			s.driven, s.doubt = false, err
		}
		return err
	}
	s.angle, s.driven, s.doubt = angle, true, nil
	return nil
}

// inDoubt reports whether a PulseOutput error leaves the pulse unknown:
// every error does, unless it wraps actuators.ErrNotApplied.
func inDoubt(err error) bool {
	return !errors.Is(err, actuators.ErrNotApplied)
}

// ReadBack returns the angle the servo was last commanded to and the
// hardware accepted — not a measured position. With a PulseReader output it
// is decoded from the pulse the hardware is producing. A servo not being
// driven (never commanded, or detached) returns ErrNotDriven, which wraps
// actuators.ErrNoReading.
//
// Without a PulseReader, after a write that failed in doubt (or a failed
// Halt) the servo may or may not be pulsing: ReadBack then returns an error
// wrapping that failure — never ErrNotDriven — until a Set or Halt
// succeeds.
func (s *Servo) ReadBack(ctx context.Context) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("gpio: %s: read back: %w", s, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.out.(PulseReader)
	if !ok {
		if s.doubt != nil {
			return 0, fmt.Errorf("gpio: %s: read back: state unknown after a failed write: %w", s, s.doubt)
		}
		if !s.driven {
			return 0, fmt.Errorf("gpio: %s: read back: %w", s, ErrNotDriven)
		}
		return s.angle, nil
	}
	w, period, on, err := r.Pulse()
	switch {
	case err != nil:
		return 0, fmt.Errorf("gpio: %s: read back: %w", s, err)
	case !on:
		return 0, fmt.Errorf("gpio: %s: read back: %w", s, ErrNotDriven)
	case period != s.cfg.Period:
		return 0, fmt.Errorf("gpio: %s: read back: %w: period %s, want %s", s, ErrBadSysfs, period, s.cfg.Period)
	}
	// The remembered angle is exact; the width only resolves to a
	// nanosecond. Use it when the hardware still has its pulse.
	if s.driven {
		if want, err := s.cfg.PulseFor(s.angle); err == nil && want == w {
			return s.angle, nil
		}
	}
	return s.cfg.AngleFor(w), nil
}

// Halt detaches the servo: pulses stop and it goes limp where it is. It
// works whatever Set did before.
func (s *Servo) Halt() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.driven = false
	if err := s.out.Detach(); err != nil {
		// The pulses may still be running.
		s.doubt = fmt.Errorf("gpio: %s: detach: %w", s, err)
		return s.doubt
	}
	s.doubt = nil
	return nil
}
