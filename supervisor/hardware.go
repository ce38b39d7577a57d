package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	pgpio "periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/host/v3"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/gpio"
	"github.com/saga-supervisor/saga-supervisor/drivers/ina2xx"
	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
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
	stale := time.Duration(0) // the driver's default: four conversions plus 50ms
	if !sc.I2C.ConversionCheck {
		stale = -1
	}
	var src VoltSource
	switch sc.Driver {
	case "ina219":
		src, err = ina2xx.NewINA219(dev, ina2xx.INA219Config{ShuntOhms: sc.I2C.ShuntOhms, Averages: sc.I2C.Averages, StaleAfter: stale})
	case "ina226":
		src, err = ina2xx.NewINA226(dev, ina2xx.INA226Config{ShuntOhms: sc.I2C.ShuntOhms, Averages: sc.I2C.Averages, StaleAfter: stale})
	default:
		err = errors.New("not an I2C power monitor")
	}
	if err != nil {
		return nil, bus, fmt.Errorf("%s at 0x%02x on bus %q: %w", sc.Driver, sc.I2C.Addr, sc.I2C.Bus, err)
	}
	return src, bus, nil
}

// boards opens the serial links to the config's microcontroller boards on
// first use, and holds them for the supervisor's lifetime.
type boards struct {
	cfg   *config.Config
	lg    *slog.Logger
	links map[string]*serial.Link
}

// link returns the named board's link, opening it (and waiting briefly for
// the board to answer, so that crash recovery, which runs right after
// composition, finds it) if this is its first use.
func (b *boards) link(name string) (*serial.Link, bool, error) {
	if l, ok := b.links[name]; ok {
		return l, false, nil
	}
	m := b.cfg.MCUs[name]
	sc := serial.Config{Name: name, Port: m.Port, VID: m.USB.VID, PID: m.USB.PID, SerialNumber: m.USB.SerialNumber,
		Baud: m.Baud, LinkTimeout: m.LinkTimeout, AckTimeout: m.AckTimeout, Retries: m.Retries, Logger: b.lg.With("mcu", name)}
	if m.Retries == 0 {
		sc.Retries = serial.NoRetries
	}
	l, err := serial.Open(context.Background(), sc)
	if err != nil {
		return nil, false, fmt.Errorf("mcu %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := l.WaitReady(ctx); err != nil {
		// Not fatal: the link keeps trying, and the supervisor is not
		// ready (and its steps in doubt) until the board answers.
		b.lg.Warn("mcu not answering yet", "mcu", name, "err", err)
	}
	b.links[name] = l
	return l, true, nil
}

// mcuInput is a board's link as a safety input: not ready while it is down.
type mcuInput struct {
	name string
	l    *serial.Link
}

func (m mcuInput) Name() string { return "mcu " + m.name }
func (m mcuInput) Ready() error { return m.l.Ready() }

// EStopPressed reports the board's e-stop flag: an e-stop wired to the
// board, which has already put its own outputs safe.
func (m mcuInput) EStopPressed() bool { return m.l.Faults()&serial.FaultEStop != 0 }

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
