package supervisor

import (
	"errors"
	"fmt"

	pgpio "periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/host/v3"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/gpio"
	"github.com/saga-supervisor/saga-supervisor/drivers/ina2xx"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// gpioDriver opens a gpio actuator: a digital output or a PWM servo.
func gpioDriver(a config.Actuator) (actuators.Driver, error) {
	g := a.GPIO
	switch a.Kind {
	case actuators.Digital:
		return gpio.OpenOutput(gpio.OutputConfig{Pin: g.Pin, ActiveLow: g.ActiveLow, InertOn: g.InertOn})
	case actuators.Servo:
		cal := gpio.ServoConfig{MinPulse: g.MinPulse, MaxPulse: g.MaxPulse, MinAngle: g.MinAngle, MaxAngle: g.MaxAngle, Period: g.Period}
		if g.PWM == "periph" {
			return gpio.OpenPinServo(g.Pin, cal)
		}
		return gpio.OpenSysfsServo(gpio.SysfsConfig{Root: g.SysfsRoot, Chip: g.Chip, Channel: g.Channel}, cal)
	}
	return nil, fmt.Errorf("driver gpio has no %s actuators", a.Kind)
}

// openPowerMonitor opens an INA219 or INA226 on its I2C bus. The bus is
// returned, to be closed with the supervisor, even when the chip fails.
func openPowerMonitor(sc config.Supply) (VoltSource, i2c.BusCloser, error) {
	if _, err := host.Init(); err != nil {
		return nil, nil, fmt.Errorf("periph: %w", err)
	}
	bus, err := i2creg.Open(sc.I2C.Bus)
	if err != nil {
		return nil, nil, fmt.Errorf("i2c bus %q: %w", sc.I2C.Bus, err)
	}
	dev := &i2c.Dev{Bus: bus, Addr: uint16(sc.I2C.Addr)}
	var src VoltSource
	switch sc.Driver {
	case "ina219":
		src, err = ina2xx.NewINA219(dev, ina2xx.INA219Config{ShuntOhms: sc.I2C.ShuntOhms, Averages: sc.I2C.Averages})
	case "ina226":
		src, err = ina2xx.NewINA226(dev, ina2xx.INA226Config{ShuntOhms: sc.I2C.ShuntOhms, Averages: sc.I2C.Averages})
	default:
		err = errors.New("not an I2C power monitor")
	}
	if err != nil {
		return nil, bus, fmt.Errorf("%s at 0x%02x on bus %q: %w", sc.Driver, sc.I2C.Addr, sc.I2C.Bus, err)
	}
	return src, bus, nil
}

// estop is the e-stop input as the supervisor watches it.
type estop struct{ *gpio.EStop }

func (estop) Name() string { return "estop" }

// openEStop watches the e-stop pin; a press triggers the halt line.
func openEStop(c config.EStop, line *HaltLine) (*estop, error) {
	pull := pgpio.PullNoChange
	switch c.Pull {
	case "up":
		pull = pgpio.PullUp
	case "down":
		pull = pgpio.PullDown
	case "float":
		pull = pgpio.Float
	}
	es, err := gpio.OpenEStop(gpio.EStopConfig{Pin: c.Pin, ActiveHigh: c.ActiveHigh, Pull: pull, Debounce: c.Debounce, Poll: c.Poll,
		OnPress: func() { line.Trigger("estop", "e-stop pressed") }})
	if es == nil {
		return nil, err
	}
	return &estop{es}, err
}
