//go:build !saga_lean

package wiring_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/supervisor/wiring"
)

// head is what every case below shares; the case adds its actuators,
// supplies or boards.
const head = "device: pi1\nhttp: {listen: \"\"}\n"

// refused are configs each driver kind's check must refuse, with the
// errors it must give, in order: each names the key's path and why.
var refused = []struct {
	name, yaml string
	want       []string
}{
	// pca9685: every check docs/HARDWARE.md lists.
	{"pca9685 without a section", `
actuators:
  pan: {kind: servo, driver: pca9685, min: 0, max: 1}
`, []string{"actuators.pan.driver: driver: pca9685 needs a pca9685 section"}},
	{"pca9685 channel required", `
actuators:
  fan: {kind: pwm, driver: pca9685, pca9685: {bus: "1"}}
`, []string{"actuators.fan.pca9685.channel: required"}},
	{"pca9685 channel out of range", `
actuators:
  fan: {kind: pwm, driver: pca9685, pca9685: {channel: 16}}
`, []string{"actuators.fan.pca9685.channel: 16 is not a channel (0..15)"}},
	{"pca9685 address", `
actuators:
  fan: {kind: pwm, driver: pca9685, pca9685: {addr: 0x3f, channel: 1}}
`, []string{"actuators.fan.pca9685.addr: 0x3f is not a PCA9685 address (0x40..0x77"}},
	{"pca9685 frequency not achievable", `
actuators:
  fan: {kind: pwm, driver: pca9685, pca9685: {channel: 1, frequency: 2000}}
`, []string{"actuators.fan.pca9685.frequency: frequency 2000 Hz outside"}},
	{"pca9685 oscillator", `
actuators:
  fan: {kind: pwm, driver: pca9685, pca9685: {channel: 1, oscillator_hz: 90e6}}
`, []string{"actuators.fan.pca9685.oscillator_hz: oscillator 9e+07 Hz outside"}},
	{"pca9685 channel twice", `
actuators:
  a: {kind: pwm, driver: pca9685, pca9685: {channel: 3}}
  b: {kind: pwm, driver: pca9685, pca9685: {channel: 3}}
`, []string{`actuators.b.pca9685.channel: channel 3 of PCA9685 0x40 on I2C bus "" is already used by actuators.a.pca9685.channel (line 4)`}},
	{"pca9685 one board two frequencies", `
actuators:
  a: {kind: pwm, driver: pca9685, pca9685: {channel: 0, frequency: 50}}
  b: {kind: pwm, driver: pca9685, pca9685: {channel: 1, frequency: 60}}
`, []string{"actuators.b.pca9685.frequency: 60 Hz at a 2.5e+07 Hz clock differs from actuators.a's 50 Hz"}},
	{"pca9685 address of a power monitor", `
supplies:
  battery: {driver: ina219, i2c: {bus: "1", addr: 0x40}, min_volts: 6, max_volts: 8}
actuators:
  fan: {kind: pwm, driver: pca9685, pca9685: {bus: "1", channel: 0}}
`, []string{`actuators.fan.pca9685.addr: I2C address 0x40 on bus "1" is already used by supplies.battery.i2c.addr (line 4)`}},
	{"pca9685 kind", `
actuators:
  relay: {kind: digital, driver: pca9685, pca9685: {channel: 0}}
`, []string{"actuators.relay.driver: driver: pca9685 drives servo or pwm actuators, not a digital"}},
	{"pca9685 servo calibration required", `
actuators:
  pan: {kind: servo, driver: pca9685, pca9685: {channel: 0, min_pulse: 500us}, min: 0, max: 1}
`, []string{"max_pulse: required", "min_angle: required", "max_angle: required"}},
	{"pca9685 servo pulse longer than the period", `
actuators:
  pan:
    kind: servo
    driver: pca9685
    pca9685: {channel: 0, min_pulse: 500us, max_pulse: 25ms, min_angle: -90, max_angle: 90}
    min: -80
    max: 80
`, []string{"actuators.pan.pca9685.min_pulse: servo pulse range 500µs..25ms must be positive and shorter than the period"}},
	{"pca9685 servo pulses less than a count apart", `
actuators:
  pan:
    kind: servo
    driver: pca9685
    pca9685: {channel: 0, min_pulse: 1500us, max_pulse: 1501us, min_angle: -90, max_angle: 90}
    min: -80
    max: 80
`, []string{"is less than one count"}},
	{"pca9685 servo angles", `
actuators:
  pan:
    kind: servo
    driver: pca9685
    pca9685: {channel: 0, min_pulse: 500us, max_pulse: 2500us, min_angle: 90, max_angle: -90}
    min: -80
    max: 80
`, []string{"actuators.pan.pca9685.min_angle: 90 is not below max_angle -90"}},
	{"pca9685 servo limits outside the calibration", `
actuators:
  pan:
    kind: servo
    driver: pca9685
    pca9685: {channel: 0, min_pulse: 500us, max_pulse: 2500us, min_angle: -90, max_angle: 90}
    min: -100
    max: 80
`, []string{"actuators.pan.min: [min, max] = [-100, 80] must lie within the calibrated angles [-90, 90]"}},
	{"pca9685 pwm with a servo key", `
actuators:
  fan: {kind: pwm, driver: pca9685, pca9685: {channel: 0, min_pulse: 1ms}}
`, []string{"actuators.fan.pca9685.min_pulse: applies to servo actuators only, not pwm"}},
	{"pca9685 section under another driver", `
actuators:
  fan: {kind: pwm, driver: sim, pca9685: {channel: 0}}
`, []string{"actuators.fan.pca9685: pca9685 settings apply to driver: pca9685 only, not sim"}},
	{"pca9685 unknown key", `
actuators:
  fan: {kind: pwm, driver: pca9685, pca9685: {channel: 0, chanel: 1}}
`, []string{`actuators.fan.pca9685: unknown key "chanel" (known keys: bus, addr, channel, frequency, oscillator_hz, min_pulse`}},

	// The other hardware kinds, checked here rather than in config.
	{"gpio digital without a pin", `
actuators:
  relay: {kind: digital, driver: gpio, gpio: {active_low: true}}
`, []string{"actuators.relay.gpio.pin: required"}},
	{"gpio kind", `
actuators:
  fan: {kind: pwm, driver: gpio, gpio: {pin: GPIO18}}
`, []string{"actuators.fan.driver: driver: gpio drives digital or servo actuators, not a pwm"}},
	{"mcu channel twice", `
mcus:
  pico: {port: /dev/ttyACM0}
actuators:
  a: {kind: setpoint, driver: mcu, mcu: {board: pico, channel: 2}, min: 0, max: 1}
  b: {kind: setpoint, driver: mcu, mcu: {board: pico, channel: 2}, min: 0, max: 1}
`, []string{"actuators.b.mcu.channel: channel 2 of mcus.pico is already used by actuators.a.mcu.channel (line 6)"}},
	{"mcu active_low on a servo", `
mcus:
  uno: {port: /dev/ttyACM0}
actuators:
  pan: {kind: servo, driver: mcu, mcu: {board: uno, channel: 0, active_low: true}, min: 0, max: 180}
`, []string{"actuators.pan.mcu.active_low: applies to digital, pulse and pwm outputs, not servo"}},
	{"mcu active_low not a bool", `
mcus:
  uno: {port: /dev/ttyACM0}
actuators:
  pump: {kind: digital, driver: mcu, mcu: {board: uno, channel: 4, active_low: low}}
`, []string{"actuators.pump.mcu.active_low"}},
	{"mcu unknown board", `
actuators:
  a: {kind: setpoint, driver: mcu, mcu: {board: nano, channel: 2}, min: 0, max: 1}
`, []string{`actuators.a.mcu.board: unknown board "nano" (none are configured under mcus)`}},
	{"two power monitors at one address", `
supplies:
  a: {driver: ina219, i2c: {bus: "1", addr: 0x41}, min_volts: 6, max_volts: 8}
  b: {driver: ina226, i2c: {bus: "1", addr: 0x41}, min_volts: 11, max_volts: 13}
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{`supplies.b.i2c.addr: I2C address 0x41 on bus "1" is already used by supplies.a.i2c.addr (line 4)`}},
	{"i2c section on a sim supply", `
supplies:
  a: {driver: sim, i2c: {addr: 0x41}, min_volts: 6, max_volts: 8}
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, []string{"supplies.a.i2c: i2c settings apply to drivers ina219 and ina226 only, not sim"}},
}

func TestChecksRefuse(t *testing.T) {
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(head+strings.TrimPrefix(tc.yaml, "\n")), "pi.yaml")
			if err == nil {
				t.Fatalf("accepted: %+v", c.Actuators)
			}
			var got []error
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				got = j.Unwrap()
			} else {
				got = []error{err}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(got), len(tc.want), err)
			}
			for i, e := range got {
				var ce *config.Error
				if !errors.As(e, &ce) || ce.Line == 0 {
					t.Errorf("error %d is not located: %v", i, e)
				}
				if !strings.Contains(e.Error(), tc.want[i]) {
					t.Errorf("error %d:\n got %v\nwant ... %s", i, e, tc.want[i])
				}
			}
		})
	}
}

// TestPCA9685Section decodes the configuration docs/HARDWARE.md shows,
// with the defaults filled in.
func TestPCA9685Section(t *testing.T) {
	c, err := config.Parse([]byte(head+`
actuators:
  pan:
    kind: servo
    driver: pca9685
    pca9685:
      bus: "1"
      addr: 0x40
      channel: 0
      frequency: 50
      oscillator_hz: 25e6
      min_pulse: 500us
      max_pulse: 2500us
      min_angle: -90
      max_angle: 90
    min: -80
    max: 80
    safe: detach
  fan:
    kind: pwm
    driver: pca9685
    pca9685: {bus: "1", channel: 15}
    safe: {value: 0}
`), "pi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pan := c.Actuators["pan"].Section.(*wiring.PCA9685)
	want := wiring.PCA9685{Bus: "1", Addr: 0x40, Channel: 0, Frequency: 50, OscillatorHz: 25e6,
		MinPulse: 500 * time.Microsecond, MaxPulse: 2500 * time.Microsecond, MinAngle: -90, MaxAngle: 90}
	if *pan != want {
		t.Errorf("pan %+v, want %+v", *pan, want)
	}
	fan := c.Actuators["fan"].Section.(*wiring.PCA9685)
	if want := (wiring.PCA9685{Bus: "1", Addr: 0x40, Channel: 15, Frequency: 50, OscillatorHz: 25e6}); *fan != want {
		t.Errorf("fan %+v, want %+v", *fan, want)
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("a second pca9685 kind was registered")
		}
	}()
	wiring.Register(wiring.Kind{Name: "pca9685"})
}

func TestKindNotBuilt(t *testing.T) {
	c := config.Default()
	a := c.Actuators[c.ActuatorNames()[0]]
	a.Driver = "can-servo"
	e := wiring.NewEnv(c, nil, nil)
	defer e.Close()
	if _, err := wiring.OpenActuator(e, "x", &a); err == nil || !strings.Contains(err.Error(), `driver "can-servo" is not available in this build`) {
		t.Errorf("OpenActuator of an unknown kind: %v", err)
	}
}

// A servo on periph's PWM is valid but warned about, at its pwm key: it
// needs root (/dev/mem), which the shipped unit never has; sysfs PWM is not.
func TestPeriphPWMWarns(t *testing.T) {
	servo := func(pwm string) string {
		return head + `
actuators:
  pan:
    kind: servo
    driver: gpio
    gpio: {` + pwm + `, min_pulse: 500us, max_pulse: 2500us, min_angle: -90, max_angle: 90}
    min: -80
    max: 80
`
	}
	c, err := config.Parse([]byte(servo("pwm: periph, pin: GPIO18")), "pi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w := c.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "pi.yaml:8:17:") || !strings.Contains(w[0], "actuators.pan.gpio.pwm") ||
		!strings.Contains(w[0], "needs root") || !strings.Contains(w[0], "use pwm: sysfs") {
		t.Errorf("warnings for pwm: periph: %q", w)
	}
	c, err = config.Parse([]byte(servo("pwm: sysfs, channel: 0")), "pi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings for pwm: sysfs: %q", w)
	}
}
