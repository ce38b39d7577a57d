//go:build !saga_lean

package wiring

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	pgpio "periph.io/x/conn/v3/gpio"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/gpio"
	"github.com/saga-supervisor/saga-supervisor/internal/retrylog"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// gpio: digital outputs and servos on the machine's own pins, and the
// e-stop button (estop.driver: gpio).
func init() {
	Register(Kind{
		Config: config.Driver{Name: "gpio", Kinds: []actuators.Kind{actuators.Digital, actuators.Servo},
			Section: func() any { return &GPIOActuator{PWM: "sysfs", Period: 20 * time.Millisecond} },
			Check:   checkGPIO, Claims: gpioClaims},
		OpenActuator: openGPIO,
		OpenEStop:    openEStop,
		// A chip or pin not there (yet): the overlay not loaded, the
		// PWM channel not exported. A bad calibration is not retried.
		Absent: func(err error) bool { return !errors.Is(err, gpio.ErrConfig) },
	})
}

// GPIOActuator configures an output on the machine's own pins (driver:
// gpio): a digital output (a relay, an enable line) on a GPIO pin, or a
// hobby servo on a PWM channel — through the kernel's sysfs PWM interface
// (pwm: sysfs, the default: Raspberry Pi 5, and no root needed) or periph's
// PWM on the pin itself (pwm: periph: Raspberry Pi 4 and older, as root).
type GPIOActuator struct {
	// Pin names the pin as periph does ("GPIO17"): a digital output's pin,
	// or a servo's with pwm: periph. With pwm: sysfs it is optional and
	// only checked, never driven: the pin the PWM overlay routes the
	// channel to, so that check-config can refuse it for another use and
	// for a channel it cannot carry.
	Pin string `yaml:"pin"`
	// ActiveLow: 1 (on) drives the pin low, for relay boards that energise
	// on low. Digital outputs only.
	ActiveLow bool `yaml:"active_low"`
	// InertOn: the detach safe policy switches the output on rather than
	// off. Digital outputs only.
	InertOn bool `yaml:"inert_on"`
	// PWM is how a servo's pulses are made: sysfs (default) or periph.
	PWM string `yaml:"pwm"`
	// Chip and Channel select /sys/class/pwm/pwmchipN/pwmM (pwm: sysfs).
	Chip    int `yaml:"chip"`
	Channel int `yaml:"channel"`
	// SysfsRoot is the PWM class directory (default /sys/class/pwm).
	SysfsRoot string `yaml:"sysfs_root"`
	// MinPulse and MaxPulse are the pulse widths at MinAngle and MaxAngle:
	// the servo's calibration, required (e.g. 500us and 2500us for
	// -90..90). The actuator's min and max must lie within the angles.
	MinPulse time.Duration `yaml:"min_pulse"`
	MaxPulse time.Duration `yaml:"max_pulse"`
	MinAngle float64       `yaml:"min_angle"`
	MaxAngle float64       `yaml:"max_angle"`
	// Period is the pulse period (default 20ms: 50 Hz).
	Period time.Duration `yaml:"period"`
}

// checkGPIO checks a gpio actuator: a digital output on a pin, or a
// calibrated servo on a PWM channel.
func checkGPIO(c *config.Check) {
	a, g := c.Actuator, c.Section.(*GPIOActuator)
	if !c.OK("gpio", "kind") {
		return
	}
	if !c.Set("gpio") {
		c.Errorf("driver", "driver: gpio needs a gpio section: a pin for a digital output; a PWM channel and the calibration for a servo")
		return
	}
	only := func(kind actuators.Kind, keys ...string) {
		for _, k := range keys {
			if c.Set("gpio." + k) {
				c.Errorf("gpio."+k, "applies to %s actuators only, not %s", kind, a.Kind)
			}
		}
	}
	b := c.Board()
	if a.Kind == actuators.Digital {
		only(actuators.Servo, "pwm", "chip", "channel", "sysfs_root", "min_pulse", "max_pulse", "min_angle", "max_angle", "period")
		if g.Pin == "" {
			c.Errorf("gpio.pin", "required: the output's pin, e.g. GPIO17")
		} else {
			checkPin(c, b, g.Pin)
		}
		return
	}
	only(actuators.Digital, "active_low", "inert_on")
	switch g.PWM {
	case "sysfs":
		if !c.Set("gpio.channel") {
			c.Errorf("gpio.channel", "required with pwm: sysfs: the channel M of pwmchipN/pwmM")
		}
		if g.Chip < 0 || g.Channel < 0 {
			c.Errorf(first(c, "gpio.chip", "gpio.channel"), "must not be negative")
		} else if c.Set("gpio.pin") && c.OK("gpio.pin") {
			// Only pwmchip0 is the SoC's own PWM, whose pins the board
			// knows; another chip's channel numbers say nothing of them.
			ch := -1
			if g.Chip == 0 {
				ch = g.Channel
			}
			if p, ok := checkPin(c, b, g.Pin); ok {
				if err := b.CheckPWMPin(p, ch); err != nil {
					c.Errorf("gpio.pin", "%v", err)
				}
			}
		}
	case "periph":
		if g.Pin == "" {
			c.Errorf("gpio.pin", "required with pwm: periph: the servo's pin, e.g. GPIO18")
		} else if err := b.CheckPeriphPWM(); err != nil {
			c.Errorf("gpio.pwm", "%v", err)
		} else {
			checkPin(c, b, g.Pin)
		}
		for _, k := range []string{"chip", "channel", "sysfs_root"} {
			if c.Set("gpio." + k) {
				c.Errorf("gpio."+k, "applies to pwm: sysfs only")
			}
		}
		// periph's PWM maps the SoC's PWM, clock and DMA registers through
		// /dev/mem: only root can, and the shipped unit (User=saga, no
		// capabilities, no /dev/mem in DeviceAllow=) never can. It is not
		// refused, since it works when run as root on a Pi 4 or older; the
		// failure would otherwise come only at the servo's first command.
		c.Warnf("gpio.pwm", "pwm: periph needs root (/dev/mem) and a Raspberry Pi 4 or older; under configs/saga-supervisor.service (User=saga) every command to this servo fails: use pwm: sysfs (docs/HARDWARE.md)")
	default:
		c.Errorf("gpio.pwm", "unknown %.20q (sysfs or periph)", g.PWM)
	}
	checkCalibration(c, "gpio", g.MinAngle, g.MaxAngle, func() (string, string) {
		switch {
		case g.MinPulse <= 0 || g.MaxPulse <= 0 || g.MinPulse == g.MaxPulse:
			return "min_pulse", fmt.Sprintf("pulse widths must be positive and differ (%v, %v)", g.MinPulse, g.MaxPulse)
		case g.Period <= 0:
			return "period", "must be positive"
		case max(g.MinPulse, g.MaxPulse) >= g.Period:
			return "max_pulse", fmt.Sprintf("a pulse of %v does not fit in the %v period", max(g.MinPulse, g.MaxPulse), g.Period)
		}
		return "", ""
	})
}

// checkPin refuses a pin the board does not have, warns of one it
// reserves, and returns the pin as periph will find it.
func checkPin(c *config.Check, b config.Board, name string) (config.Pin, bool) {
	p, err := b.Pin(name)
	if err != nil {
		c.Errorf("gpio.pin", "%v", err)
		return p, false
	}
	if w := b.PinWarning(p); w != "" {
		c.Warnf("gpio.pin", "%s", w)
	}
	return p, true
}

// gpioClaims: a digital output or a pwm: periph servo takes its pin; a
// pwm: sysfs servo its channel of its chip, and the pin if it names one.
func gpioClaims(c *config.Check) []config.Resource {
	g := c.Section.(*GPIOActuator)
	var rs []config.Resource
	if c.Actuator.Kind == actuators.Servo && g.PWM == "sysfs" {
		key := fmt.Sprintf("pwmchip%d/pwm%d", g.Chip, g.Channel)
		if root := filepath.Clean(g.SysfsRoot); g.SysfsRoot != "" && root != gpio.DefaultSysfsRoot {
			key = filepath.Join(root, key)
		}
		rs = append(rs, config.Resource{Key: key, Field: "gpio.channel"})
	}
	if g.Pin != "" {
		if p, err := c.Board().Pin(g.Pin); err == nil {
			rs = append(rs, config.Resource{Key: p.Name, Field: "gpio.pin"})
		}
	}
	return rs
}

func openGPIO(_ *Env, _ string, a *config.Actuator) (actuators.Driver, error) {
	g := a.Section.(*GPIOActuator)
	if a.Kind == actuators.Digital {
		return gpio.OpenOutput(gpio.OutputConfig{Pin: g.Pin, ActiveLow: g.ActiveLow, InertOn: g.InertOn})
	}
	cal := gpio.ServoConfig{MinPulse: g.MinPulse, MaxPulse: g.MaxPulse, MinAngle: g.MinAngle, MaxAngle: g.MaxAngle, Period: g.Period}
	if g.PWM == "periph" {
		return gpio.OpenPinServo(g.Pin, cal)
	}
	return gpio.OpenSysfsServo(gpio.SysfsConfig{Root: g.SysfsRoot, Chip: g.Chip, Channel: g.Channel}, cal)
}

// estop is the e-stop input as the supervisor watches it.
type estop struct{ *gpio.EStop }

func (estop) Name() string { return "estop" }

// openEStop watches the e-stop pin; a press halts.
func openEStop(e *Env, c config.EStop) (Input, error) {
	pull := pgpio.PullNoChange
	switch c.Pull {
	case "up":
		pull = pgpio.PullUp
	case "down":
		pull = pgpio.PullDown
	case "float":
		pull = pgpio.Float
	}
	var gate retrylog.Gate
	onRetry := func(err error) {
		if err == nil {
			_, downFor, _ := gate.Up(time.Now())
			// Its state is what Ready says now; a halt latched meanwhile
			// stays until an operator resets.
			e.Logger.Warn("e-stop pin readable again; a halt stays latched until a reset", "pin", c.Pin, "after", downFor.Round(time.Millisecond))
			return
		}
		if log, n := gate.Failed(err, time.Now()); log {
			e.Logger.Warn("e-stop pin not readable; retrying", "pin", c.Pin, "err", err, "attempts", n)
		}
	}
	es, err := gpio.OpenEStop(gpio.EStopConfig{Pin: c.Pin, ActiveHigh: c.ActiveHigh, Pull: pull, Debounce: c.Debounce, Poll: c.Poll,
		OnPress: func() { e.Halt("estop", "e-stop pressed") }, Retry: EStopRetry, OnRetry: onRetry})
	if es == nil {
		return nil, err
	}
	if err != nil {
		gate.Failed(err, time.Now()) // the first failure: the caller logs it
		e.closers = append(e.closers, es)
	}
	return &estop{es}, err
}

// EStopRetry is how often an e-stop pin that could not be read is tried
// again. It reads as pressed until then.
const EStopRetry = time.Second
