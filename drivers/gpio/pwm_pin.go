package gpio

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	pgpio "periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/physic"
)

// DutyFor returns the periph duty cycle of a pulse width within a period,
// rounded to the nearest step of 1/DutyMax: 1.5 ms in 20 ms is
// DutyMax*1.5/20. The width is clamped to [0, period].
func DutyFor(width, period time.Duration) pgpio.Duty {
	if period <= 0 || width <= 0 {
		return 0
	}
	if width >= period {
		return pgpio.DutyMax
	}
	// In 128 bits: the kernel may show any period, and 2^24 times one of
	// hours overflows an int64 (FuzzDecodePulse covers it). hi < period
	// because width < period, so the division cannot overflow.
	hi, lo := bits.Mul64(uint64(pgpio.DutyMax), uint64(width))
	lo, carry := bits.Add64(lo, uint64(period)/2, 0)
	q, _ := bits.Div64(hi+carry, lo, uint64(period))
	return pgpio.Duty(q)
}

// PinPWM is a PulseOutput on a periph pin's PWM: hardware or DMA PWM on a
// Raspberry Pi up to the 4 (root needed). It cannot read its pulse back.
type PinPWM struct {
	name string
	pin  pgpio.PinIO
}

// OpenPinPWM finds a pin for servo pulses. Whether the pin can do PWM is
// only known at the first SetPulse: asking would mean driving it.
func OpenPinPWM(name string) (*PinPWM, error) {
	p, err := lookup(name)
	if err != nil {
		return nil, fmt.Errorf("gpio: pwm: %w", err)
	}
	return &PinPWM{name: name, pin: p}, nil
}

// String names the output by its pin.
func (p *PinPWM) String() string { return "pwm pin " + p.name }

// SetPulse sets the pin's PWM to width every period. A ctx already done
// writes nothing (the error wraps actuators.ErrNotApplied). A failure of the
// PWM call is in doubt (it wraps actuators.ErrLinkLost): periph may have
// changed the pin's function before failing.
func (p *PinPWM) SetPulse(ctx context.Context, width, period time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w: %w", p, actuators.ErrNotApplied, err)
	}
	d, f := DutyFor(width, period), physic.PeriodToFrequency(period)
	if err := p.pin.PWM(d, f); err != nil {
		return fmt.Errorf("%s: PWM(%s, %s): %w (%w)", p, d, f, actuators.ErrLinkLost, err)
	}
	return nil
}

// Detach stops the pulses by driving the pin Low; if that fails, by a 0%
// duty cycle.
func (p *PinPWM) Detach() error {
	err := p.pin.Out(pgpio.Low)
	if err == nil {
		return nil
	}
	if err2 := p.pin.PWM(0, physic.PeriodToFrequency(DefaultPeriod)); err2 != nil {
		return fmt.Errorf("%s: stop pulses: %w", p, errors.Join(err, err2))
	}
	return nil
}
