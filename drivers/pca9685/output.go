package pca9685

import (
	"context"
	"fmt"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// output is one channel of a board as a Servo or a PWM drives it: both
// write a count, read it back and halt the same way, and differ only in
// how a value becomes a count and a count a value.
type output struct {
	b  *Board
	ch int

	// Guarded by b.mu: the last value Set wrote and its count, so ReadBack
	// returns the exact value while the chip still has that count.
	value  float64
	ticks  int
	driven bool
}

// set writes count n, which the caller's Set made of value v, to the
// channel once the board is ready for it (Board.before). name is the
// caller, for errors; unit follows the count in them. A failed write is in
// doubt: it wraps actuators.ErrLinkLost, and the last value is forgotten.
func (o *output) set(ctx context.Context, name fmt.Stringer, v float64, n int, unit string) error {
	b := o.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.before(ctx); err != nil {
		return fmt.Errorf("pca9685: %s: set %g: %w", name, v, err)
	}
	r := encodeLED(n)
	if err := b.write(ledReg(o.ch), r[0], r[1], r[2], r[3]); err != nil {
		o.driven = false
		return fmt.Errorf("pca9685: %s: set %g (%d%s): %w: %w", name, v, n, unit, actuators.ErrLinkLost, err)
	}
	o.value, o.ticks, o.driven = v, n, true
	return nil
}

// readBack reads the channel's registers, l, and says whether the chip
// still holds the count of the last Set (held), whose value is last. name
// is the caller, for errors.
func (o *output) readBack(ctx context.Context, name fmt.Stringer) (l led, last float64, held bool, err error) {
	if err := ctx.Err(); err != nil {
		return led{}, 0, false, fmt.Errorf("pca9685: %s: read back: %w", name, err)
	}
	b := o.b
	b.mu.Lock()
	defer b.mu.Unlock()
	l, err = b.readChannel(o.ch)
	if err != nil {
		return led{}, 0, false, fmt.Errorf("pca9685: %s: read back: %w", name, err)
	}
	return l, o.value, o.driven && l.high() == o.ticks, nil
}

// halt sets the channel's full-off bit and forgets the last value.
func (o *output) halt() error {
	b := o.b
	b.mu.Lock()
	defer b.mu.Unlock()
	o.driven = false
	return b.halt(o.ch)
}
