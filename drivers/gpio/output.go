package gpio

import (
	"context"
	"fmt"
	"sync"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	pgpio "periph.io/x/conn/v3/gpio"
)

var (
	_ actuators.Driver     = (*Output)(nil)
	_ actuators.ReadBacker = (*Output)(nil)
)

// OutputConfig describes a digital output.
type OutputConfig struct {
	// Pin is the periph pin name, number or alias, e.g. "GPIO17".
	Pin string
	// ActiveLow inverts the pin: value 1 (on, energised) drives it Low.
	// Many relay boards energise on Low.
	ActiveLow bool
	// InertOn makes Halt switch the output on instead of off. The inert
	// state is logical, not electrical: by default Halt drives the pin Low,
	// or High when ActiveLow is set, so marking a board active-low can never
	// make Halt energise its relays.
	InertOn bool
}

// Output is a digital output such as a relay or an enable line: value 0 is
// off, 1 is on. It implements actuators.Driver and actuators.ReadBacker.
type Output struct {
	cfg OutputConfig
	pin pgpio.PinIO
	mu  sync.Mutex // one change of the pin at a time
}

// OpenOutput finds the output's pin. It does not drive it: the pin keeps its
// state until the first Set or Halt.
func OpenOutput(cfg OutputConfig) (*Output, error) {
	p, err := lookup(cfg.Pin)
	if err != nil {
		return nil, fmt.Errorf("gpio: output: %w", err)
	}
	return &Output{cfg: cfg, pin: p}, nil
}

// String names the output by its pin.
func (o *Output) String() string { return "output " + o.cfg.Pin }

// level is the electrical level for the logical state on.
func (o *Output) level(on bool) pgpio.Level {
	return pgpio.Level(on != o.cfg.ActiveLow)
}

// Set switches the output: 0 off, 1 on. Any other value, NaN included, is
// refused with ErrInvalidValue and the pin is not touched; so is a Set whose
// ctx is already done. Those errors wrap actuators.ErrNotApplied. A failed
// pin write is in doubt (it wraps actuators.ErrLinkLost).
func (o *Output) Set(ctx context.Context, value float64) error {
	if value != 0 && value != 1 {
		return fmt.Errorf("gpio: %s: set %g: %w: must be 0 or 1 (%w)", o, value, ErrInvalidValue, actuators.ErrNotApplied)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("gpio: %s: set %g: %w: %w", o, value, actuators.ErrNotApplied, err)
	}
	return o.drive(value == 1, "set")
}

func (o *Output) drive(on bool, op string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.level(on)
	if err := o.pin.Out(l); err != nil {
		return fmt.Errorf("gpio: %s: %s %s: %w (%w)", o, op, l, actuators.ErrLinkLost, err)
	}
	return nil
}

// ReadBack reads the pin's level and returns it as the logical state: 1 on,
// 0 off. Before the first Set or Halt it reads whatever drives the pin.
func (o *Output) ReadBack(ctx context.Context) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("gpio: %s: read back: %w", o, err)
	}
	if bool(o.pin.Read()) != o.cfg.ActiveLow {
		return 1, nil
	}
	return 0, nil
}

// Halt drives the output to its inert state: off unless InertOn.
func (o *Output) Halt() error {
	return o.drive(o.cfg.InertOn, "halt")
}
