package pca9685

import (
	"context"
	"fmt"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

var (
	_ actuators.Driver     = (*PWM)(nil)
	_ actuators.ReadBacker = (*PWM)(nil)
)

// PWM is a plain duty-cycle output on one channel — an LED, an ESC's or
// motor driver's PWM input: its value is the fraction 0..1 of the period
// the output is high, to 1/4096. 0 is the full-off bit, 1 the full-on bit.
// It implements actuators.Driver and actuators.ReadBacker.
type PWM struct {
	output // its value is the duty
}

// PWM returns channel ch (0..15) as a duty-cycle output. Nothing is
// written until the first Set. A channel can be opened once per Board.
func (b *Board) PWM(ch int) (*PWM, error) {
	if err := b.claim(ch); err != nil {
		return nil, err
	}
	return &PWM{output{b: b, ch: ch}}, nil
}

// String names the output by board and channel.
func (p *PWM) String() string { return fmt.Sprintf("%s channel %d (pwm)", p.b, p.ch) }

// Channel returns the output's channel number.
func (p *PWM) Channel() int { return p.ch }

// Set sets the duty cycle, rounded to the nearest 1/4096; a duty that
// rounds to 0 is full off, one that rounds to 4096 full on. Errors as for
// Servo.Set: a duty outside 0..1 or not finite, a done ctx, a closed board
// or a reset chip wrap actuators.ErrNotApplied; a failed write is in doubt
// and wraps actuators.ErrLinkLost.
func (p *PWM) Set(ctx context.Context, duty float64) error {
	n, err := dutyTicks(duty)
	if err != nil {
		return fmt.Errorf("pca9685: %s: set: %w (%w)", p, err, actuators.ErrNotApplied)
	}
	return p.set(ctx, p, duty, n, "/4096")
}

// ReadBack reads the channel's registers and returns the duty cycle the
// chip is producing: the exact duty of the last Set while the chip still
// holds its count, otherwise count/4096. Full off (power-on, Halt) reads 0
// — for a duty-cycle output, off is a value, not a missing reading.
func (p *PWM) ReadBack(ctx context.Context) (float64, error) {
	l, last, held, err := p.readBack(ctx, p)
	switch {
	case err != nil:
		return 0, err
	case held:
		return last, nil
	}
	return float64(l.high()) / steps, nil
}

// Halt sets the channel's full-off bit: the output stays low. One write,
// whatever Set did before, closed board or not.
func (p *PWM) Halt() error { return p.halt() }
