//go:build !saga_lean

package wiring

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"periph.io/x/conn/v3/i2c"

	"github.com/saga-supervisor/saga-supervisor/drivers/ina2xx"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// ina219, ina226: supplies read by an I2C power monitor, both configured
// under the key i2c.
func init() {
	for _, name := range []string{"ina219", "ina226"} {
		Register(Kind{
			Config: config.Driver{Name: name, Supply: true, SupplyKey: "i2c",
				SupplySection: func() any { return &I2CSupply{Addr: 0x40, ConversionCheck: true} }, CheckSupply: checkI2CSupply,
				SupplyClaims: i2cSupplyClaims},
			OpenSupply: openPowerMonitor,
			// The bus or the chip not there (yet), or not answering.
			Absent: func(err error) bool { return !errors.Is(err, ina2xx.ErrConfig) },
		})
	}
}

// I2CSupply configures a supply read by an INA219 or INA226 power monitor
// on an I2C bus (driver: ina219 or ina226).
type I2CSupply struct {
	// Bus is the I2C bus as periph names it: "1" for /dev/i2c-1 on a
	// Raspberry Pi, or "" for the first bus found.
	Bus string `yaml:"bus"`
	// Addr is the chip's 7-bit address, 0x40..0x4f (default 0x40, the
	// address with both address pins grounded).
	Addr int `yaml:"addr"`
	// ShuntOhms is the shunt resistor, for the current reading (0: none).
	ShuntOhms float64 `yaml:"shunt_ohms"`
	// Averages is how many samples each reading averages (0: the chip
	// driver's default, 16).
	Averages int `yaml:"averages"`
	// ConversionCheck (default true) fails readings once the chip has
	// finished no conversion for a while, so a wedged chip cannot serve a
	// frozen voltage. Turn it off only for a clone whose conversion-ready
	// flag does not work — a stopped chip then goes unnoticed.
	ConversionCheck bool `yaml:"conversion_check"`
}

func checkI2CSupply(c *config.Check) {
	if !c.OK("i2c") {
		return
	}
	s := c.Section.(*I2CSupply)
	switch {
	case s.Addr < 0x40 || s.Addr > 0x4f:
		// A0 and A1, each tied to GND, VS, SDA or SCL, give sixteen.
		c.Errorf("i2c.addr", "%#02x is not an %s address (0x40..0x4f)", s.Addr, strings.ToUpper(c.Supply.Driver))
	case s.ShuntOhms < 0:
		c.Errorf("i2c.shunt_ohms", "must not be negative (0: no current reading)")
	case s.Averages < 0:
		c.Errorf("i2c.averages", "must not be negative (0: the chip default)")
	}
}

// i2cSupplyClaims: the chip's address on its bus.
func i2cSupplyClaims(c *config.Check) []config.Resource {
	s := c.Section.(*I2CSupply)
	return config.I2CClaims(c.Board(), "i2c", s.Bus, s.Addr, "")
}

// openPowerMonitor opens an INA219 or INA226 on its I2C bus.
func openPowerMonitor(e *Env, _ string, sc *config.Supply) (VoltSource, error) {
	s := sc.Section.(*I2CSupply)
	bus, err := i2cBus(e, s.Bus)
	if err != nil {
		return nil, err
	}
	dev := &i2c.Dev{Bus: bus, Addr: uint16(s.Addr)}
	stale := time.Duration(0) // the driver's default: four conversions plus 50ms
	if !s.ConversionCheck {
		stale = -1
	}
	var src VoltSource
	if sc.Driver == "ina219" {
		src, err = ina2xx.NewINA219(dev, ina2xx.INA219Config{ShuntOhms: s.ShuntOhms, Averages: s.Averages, StaleAfter: stale})
	} else {
		src, err = ina2xx.NewINA226(dev, ina2xx.INA226Config{ShuntOhms: s.ShuntOhms, Averages: s.Averages, StaleAfter: stale})
	}
	if err != nil {
		return nil, fmt.Errorf("%s at 0x%02x on bus %q: %w", sc.Driver, s.Addr, s.Bus, err)
	}
	return src, nil
}
