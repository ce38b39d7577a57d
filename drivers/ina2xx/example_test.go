package ina2xx_test

import (
	"fmt"

	"github.com/saga-supervisor/saga-supervisor/drivers/ina2xx"
	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/host/v3"
)

// Watching a servo rail through an INA226 on the Pi's I2C bus 1.
func Example() {
	if _, err := host.Init(); err != nil {
		fmt.Println(err)
		return
	}
	bus, err := i2creg.Open("1")
	if err != nil {
		fmt.Println(err) // a machine without I2C
		return
	}
	defer bus.Close()
	mon, err := ina2xx.NewINA226(&i2c.Dev{Bus: bus, Addr: ina2xx.DefaultAddr}, ina2xx.INA226Config{ShuntOhms: 0.002})
	if err != nil {
		fmt.Println(err)
		return
	}
	volts, at, err := mon.Volts()
	fmt.Println(volts, at, err)
}
