//go:build !saga_lean

package wiring

import (
	"fmt"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2creg"

	"github.com/saga-supervisor/saga-supervisor/drivers/pihost"
)

// i2cBus returns the I2C bus periph names name ("1" for /dev/i2c-1; ""
// for the first found), opened once and shared by every chip on it.
func i2cBus(e *Env, name string) (i2c.BusCloser, error) {
	return Shared(e, "i2c bus "+name, func() (i2c.BusCloser, error) {
		if _, err := pihost.Init(); err != nil {
			return nil, fmt.Errorf("periph: %w", err)
		}
		bus, err := i2creg.Open(name)
		if err != nil {
			return nil, fmt.Errorf("i2c bus %q: %w", name, err)
		}
		return bus, nil
	})
}
