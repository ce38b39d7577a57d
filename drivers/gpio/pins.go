package gpio

import (
	"fmt"

	pgpio "periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpioreg"

	"github.com/saga-supervisor/saga-supervisor/drivers/pihost"
)

// lookup initialises periph's host drivers (once; later calls are cheap)
// and finds a pin by name, number or alias.
func lookup(name string) (pgpio.PinIO, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: no pin name", ErrConfig)
	}
	if _, err := pihost.Init(); err != nil {
		return nil, fmt.Errorf("gpio: pin %s: periph host init: %w", name, err)
	}
	// On a machine without GPIO pihost.Init succeeds and registers nothing, so
	// the nil check is the real "no such pin" test.
	p := gpioreg.ByName(name)
	if p == nil {
		return nil, fmt.Errorf("gpio: pin %s: %w (check the name, e.g. GPIO17, and that this machine has GPIO)", name, ErrPinNotFound)
	}
	return p, nil
}
