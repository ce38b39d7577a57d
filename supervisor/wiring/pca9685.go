//go:build !saga_lean

package wiring

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/pca9685"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// pca9685: servos and PWM outputs on a PCA9685 16-channel I2C board, the
// usual Raspberry Pi servo hat (docs/HARDWARE.md).
func init() {
	Register(Kind{
		Config: config.Driver{Name: "pca9685", Kinds: []actuators.Kind{actuators.Servo, actuators.PWM},
			Section: func() any {
				return &PCA9685{Addr: pca9685.DefaultAddr, Frequency: pca9685.DefaultFrequency, OscillatorHz: pca9685.DefaultOscillatorHz}
			},
			Check: checkPCA9685, Claims: pca9685Claims},
		OpenActuator: openPCA9685,
		// The bus or the board not there (yet), or not answering.
		Absent: func(err error) bool { return !errors.Is(err, pca9685.ErrConfig) },
	})
}

// PCA9685 configures one channel of a PCA9685 board (driver: pca9685): a
// servo (its value an angle, calibrated by the pulse widths at two angles)
// or a PWM output (its value a duty cycle 0..1). All actuators on one
// board — one bus and address — share its frequency.
type PCA9685 struct {
	// Bus is the I2C bus as periph names it: "1" for /dev/i2c-1 on a
	// Raspberry Pi, or "" for the first bus found.
	Bus string `yaml:"bus"`
	// Addr is the board's 7-bit address, 0x40..0x77 (default 0x40; the
	// jumpers reach 0x7f, but I2C reserves 0x78..0x7f).
	Addr int `yaml:"addr"`
	// Channel is the output, 0..15; required, one actuator per channel.
	Channel int `yaml:"channel"`
	// Frequency is the board's PWM frequency in Hz (default 50, for
	// servos); every actuator on one board must give the same.
	Frequency float64 `yaml:"frequency"`
	// OscillatorHz is the chip's clock (default 25e6), for calibration:
	// see docs/HARDWARE.md.
	OscillatorHz float64 `yaml:"oscillator_hz"`
	// MinPulse and MaxPulse are a servo's pulse widths at MinAngle and
	// MaxAngle; all four are required for a servo and refused for a PWM
	// output. The actuator's min and max must lie within the angles.
	MinPulse time.Duration `yaml:"min_pulse"`
	MaxPulse time.Duration `yaml:"max_pulse"`
	MinAngle float64       `yaml:"min_angle"`
	MaxAngle float64       `yaml:"max_angle"`
}

func (p *PCA9685) options() pca9685.Options {
	return pca9685.Options{Addr: uint16(p.Addr), Frequency: p.Frequency, OscillatorHz: p.OscillatorHz}
}

func (p *PCA9685) calibration() pca9685.ServoCalibration {
	return pca9685.ServoCalibration{MinPulse: p.MinPulse, MaxPulse: p.MaxPulse, MinAngle: p.MinAngle, MaxAngle: p.MaxAngle}
}

// board names the board a section is on.
func (p *PCA9685) board() string {
	return fmt.Sprintf("pca9685 %#02x on bus %q", p.Addr, config.I2CBus(p.Bus))
}

func checkPCA9685(c *config.Check) {
	if !c.OK("pca9685", "kind") {
		return
	}
	if !c.Set("pca9685") {
		c.Errorf("driver", "driver: pca9685 needs a pca9685 section with its channel")
		return
	}
	p, a := c.Section.(*PCA9685), c.Actuator
	switch {
	case !c.OK("pca9685.addr", "pca9685.channel", "pca9685.frequency", "pca9685.oscillator_hz"):
		return
	case p.Addr < 0x40 || p.Addr > maxPCA9685Addr:
		c.Errorf("pca9685.addr", "%#02x is not a PCA9685 address (0x40..0x77: the jumpers reach 0x7f, but I2C reserves 0x78..0x7f)", p.Addr)
		return
	case !c.Set("pca9685.channel"):
		c.Errorf("pca9685.channel", "required: the board's output, 0..15")
		return
	case p.Channel < 0 || p.Channel >= pca9685.Channels:
		c.Errorf("pca9685.channel", "%d is not a channel (0..15)", p.Channel)
		return
	}
	if err := pca9685.Check(p.options(), nil); err != nil {
		c.Errorf(first(c, "pca9685.frequency", "pca9685.oscillator_hz"), "%s", strings.TrimPrefix(err.Error(), pca9685.ErrConfig.Error()+": "))
		return
	}
	// The board's first actuator sets its frequency and clock; the others
	// must agree, since the board has one of each.
	if by, _ := c.Claim(p.board(), "pca9685.frequency"); by != "" {
		o := c.Config.Actuators[strings.TrimPrefix(config.Owner(by), "actuators.")].Section.(*PCA9685)
		if o.Frequency != p.Frequency || o.OscillatorHz != p.OscillatorHz {
			c.Errorf(first(c, "pca9685.frequency", "pca9685.oscillator_hz"), "%g Hz at a %g Hz clock differs from %s's %g Hz at %g Hz: one board has one frequency",
				p.Frequency, p.OscillatorHz, config.Owner(by), o.Frequency, o.OscillatorHz)
		}
	}
	servoKeys := []string{"min_pulse", "max_pulse", "min_angle", "max_angle"}
	if a.Kind != actuators.Servo {
		for _, k := range servoKeys {
			if c.Set("pca9685." + k) {
				c.Errorf("pca9685."+k, "applies to servo actuators only, not %s", a.Kind)
			}
		}
		return
	}
	checkCalibration(c, "pca9685", p.MinAngle, p.MaxAngle, func() (string, string) {
		cal := p.calibration()
		if p.MinAngle >= p.MaxAngle {
			return "", "" // said by checkCalibration
		}
		if err := pca9685.Check(p.options(), &cal); err != nil {
			return "min_pulse", strings.TrimPrefix(err.Error(), pca9685.ErrConfig.Error()+": ")
		}
		return "", ""
	})
}

// maxPCA9685Addr is the highest address a PCA9685 may be given: its
// jumpers reach 0x7f, but 0x78..0x7f are I2C's reserved addresses.
const maxPCA9685Addr = 0x77

// pca9685Claims: a channel of one board, and the board's address on its
// bus, which every actuator on that board shares.
func pca9685Claims(c *config.Check) []config.Resource {
	p := c.Section.(*PCA9685)
	board := fmt.Sprintf("PCA9685 %#02x on I2C bus %q", p.Addr, config.I2CBus(p.Bus))
	return append([]config.Resource{{Key: fmt.Sprintf("channel %d of %s", p.Channel, board), Field: "pca9685.channel"}},
		config.I2CClaims(c.Board(), "pca9685", p.Bus, p.Addr, board)...)
}

func openPCA9685(e *Env, _ string, a *config.Actuator) (actuators.Driver, error) {
	p := a.Section.(*PCA9685)
	bus, err := i2cBus(e, p.Bus)
	if err != nil {
		return nil, err
	}
	b, err := Shared(e, p.board(), func() (*pca9685.Board, error) { return pca9685.Open(bus, p.options()) })
	if err != nil {
		return nil, err
	}
	if a.Kind == actuators.Servo {
		return b.Servo(p.Channel, p.calibration())
	}
	return b.PWM(p.Channel)
}
