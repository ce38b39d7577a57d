package pca9685

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

var (
	_ actuators.Driver     = (*Servo)(nil)
	_ actuators.ReadBacker = (*Servo)(nil)
)

// ServoCalibration maps a servo's angle range onto pulse widths, like
// drivers/gpio's ServoConfig; the period is the board's.
type ServoCalibration struct {
	// MinPulse is the pulse width at MinAngle, MaxPulse at MaxAngle, e.g.
	// 500µs and 2500µs. MinPulse may be the longer of the two, for a servo
	// mounted the other way round. Both must be shorter than the board's
	// period and at least one count (about 4.9 µs at 50 Hz) long.
	MinPulse, MaxPulse time.Duration
	// MinAngle and MaxAngle are the angle range in degrees, e.g. -90..90
	// or 0..180. MinAngle must be below MaxAngle.
	MinAngle, MaxAngle float64
}

// servoMap checks the calibration against the board's period and returns
// the angle-to-count map.
func (b *Board) servoMap(c ServoCalibration) (servoMap, error) {
	p := b.Period()
	switch {
	case c.MinPulse <= 0 || c.MaxPulse <= 0 || c.MinPulse >= p || c.MaxPulse >= p:
		return servoMap{}, fmt.Errorf("%w: servo pulse range %s..%s must be positive and shorter than the period %s", ErrConfig, c.MinPulse, c.MaxPulse, p)
	case !finite(c.MinAngle) || !finite(c.MaxAngle) || c.MinAngle >= c.MaxAngle:
		return servoMap{}, fmt.Errorf("%w: servo angle range %g..%g must be finite and increasing", ErrConfig, c.MinAngle, c.MaxAngle)
	}
	m := servoMap{minA: c.MinAngle, maxA: c.MaxAngle, minT: b.ticksFor(c.MinPulse), maxT: b.ticksFor(c.MaxPulse)}
	lo, hi := min(m.minT, m.maxT), max(m.minT, m.maxT)
	switch {
	case lo < 0.5 || hi >= steps-0.5:
		return servoMap{}, fmt.Errorf("%w: servo pulse range %s..%s is %.1f..%.1f counts, outside 1..4095", ErrConfig, c.MinPulse, c.MaxPulse, m.minT, m.maxT)
	case hi-lo < 1:
		return servoMap{}, fmt.Errorf("%w: servo pulse range %s..%s is less than one count (%s)", ErrConfig, c.MinPulse, c.MaxPulse, b.widthFor(1))
	}
	return m, nil
}

// Servo is a hobby servo on one channel: its value is an angle in degrees.
// It implements actuators.Driver and actuators.ReadBacker.
type Servo struct {
	output // its value is the angle
	cal    ServoCalibration
	m      servoMap
}

// Servo returns channel ch (0..15) as a servo calibrated by cal. Nothing is
// written: the channel keeps whatever pulse it has (none after power-on)
// until the first Set. A channel can be opened once per Board.
func (b *Board) Servo(ch int, cal ServoCalibration) (*Servo, error) {
	m, err := b.servoMap(cal)
	if err != nil {
		return nil, fmt.Errorf("pca9685: %s: channel %d: %w", b, ch, err)
	}
	if err := b.claim(ch); err != nil {
		return nil, err
	}
	return &Servo{output: output{b: b, ch: ch}, cal: cal, m: m}, nil
}

// String names the servo by board and channel.
func (s *Servo) String() string { return fmt.Sprintf("%s channel %d", s.b, s.ch) }

// Channel returns the servo's channel number.
func (s *Servo) Channel() int { return s.ch }

// Calibration returns the servo's calibration.
func (s *Servo) Calibration() ServoCalibration { return s.cal }

// Ticks returns the 12-bit off count Set writes for angle, or an error
// wrapping ErrInvalidValue.
func (s *Servo) Ticks(angle float64) (int, error) { return s.m.ticks(angle) }

// Set moves the servo to angle degrees: it checks the chip is awake (one
// read of MODE1), then writes the channel's LEDn_ON_L..LEDn_OFF_H in one
// auto-incremented transaction: ON count 0, OFF count the pulse width in
// counts. The chip applies the four bytes together at the I2C stop.
//
// An angle outside the calibrated range or not finite, a done ctx, a
// closed board, a failed or unexpected MODE1 read: each wraps
// actuators.ErrNotApplied, and nothing was written to the channel. A failed
// write is in doubt — the chip may have taken the bytes before the error
// (Linux reports a NAK of the address and of a data byte alike) — and
// wraps ErrBus and actuators.ErrLinkLost, not ErrNotApplied. An I2C
// transaction cannot be cancelled: ctx is checked before the first.
func (s *Servo) Set(ctx context.Context, angle float64) error {
	n, err := s.m.ticks(angle)
	if err != nil {
		return fmt.Errorf("pca9685: %s: set: %w (%w)", s, err, actuators.ErrNotApplied)
	}
	return s.set(ctx, s, angle, n, " counts")
}

// before is what every Set does before writing: a done ctx, a closed board
// or a chip found reset fail with actuators.ErrNotApplied. Call with mu
// held.
func (b *Board) before(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", actuators.ErrNotApplied, err)
	}
	if b.closed {
		return fmt.Errorf("%w (%w)", ErrClosed, actuators.ErrNotApplied)
	}
	if err := b.checkAwake(); err != nil {
		if errors.Is(err, ErrBus) {
			return fmt.Errorf("%w (%w, %w)", err, actuators.ErrNotApplied, actuators.ErrLinkLost)
		}
		return fmt.Errorf("%w (%w)", err, actuators.ErrNotApplied)
	}
	return nil
}

// ReadBack reads the channel's registers and returns the angle its pulse
// width commands: the pulse the chip is producing, not a measured position
// — a stalled or unpowered servo reads the same. While the chip still
// holds the count of the last successful Set, that Set's exact angle is
// returned; otherwise the count is converted (a count is about 0.44° for a
// 500..2500 µs, 180° servo at 50 Hz), and may lie outside the angle range
// if someone else wrote the channel.
//
// A channel full off (never driven since power-on, or halted) returns
// ErrNotDriven, which wraps actuators.ErrNoReading. A chip found reset is
// ErrChipReset; a failed read wraps ErrBus and actuators.ErrLinkLost.
func (s *Servo) ReadBack(ctx context.Context) (float64, error) {
	l, last, held, err := s.readBack(ctx, s)
	switch {
	case err != nil:
		return 0, err
	case l.fullOff:
		return 0, fmt.Errorf("pca9685: %s: read back: %w", s, ErrNotDriven)
	case l.fullOn:
		return 0, fmt.Errorf("pca9685: %s: read back: %w: channel full on, not a servo pulse", s, ErrBadReading)
	case held:
		return last, nil
	default:
		return s.m.angle(l.high()), nil
	}
}

// readChannel checks the chip is awake and decodes a channel's registers.
// Call with mu held.
func (b *Board) readChannel(ch int) (led, error) {
	if err := b.checkAwake(); err != nil {
		return led{}, fmt.Errorf("%w (%w)", err, actuators.ErrLinkLost)
	}
	r, err := b.readLED(ch)
	if err != nil {
		return led{}, fmt.Errorf("%w (%w)", err, actuators.ErrLinkLost)
	}
	l, err := decodeLED(r)
	if err != nil {
		return led{}, fmt.Errorf("channel %d: %w", ch, err)
	}
	return l, nil
}

// Halt detaches the servo: LEDn_OFF_H's full-off bit, so the servo gets no
// more pulses and goes limp where it is. One write, whatever Set did
// before, closed board or not; an error is Halt's own (the pulse may still
// be running).
func (s *Servo) Halt() error { return s.halt() }

// halt sets a channel's full-off bit. Call with mu held.
func (b *Board) halt(ch int) error {
	if err := b.write(ledReg(ch)+3, ledFull); err != nil {
		return fmt.Errorf("pca9685: %s: channel %d: halt: %w", b, ch, err)
	}
	return nil
}
