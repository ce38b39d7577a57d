//go:build !saga_lean

package wiring_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// servo is a gpio servo's calibration, for the cases below.
const servo = "min_pulse: 500us, max_pulse: 2500us, min_angle: -90, max_angle: 90"

// conflicts are configs that take one piece of hardware twice. Each is
// refused once, at the later key (path, at line), naming the earlier key
// and its line (by, first). Line 1 and 2 are head.
var conflicts = []struct {
	name, yaml string
	path       string
	line       int
	msg, by    string
	first      int
}{
	{"two outputs on one pin", `
actuators:
  base:
    kind: digital
    driver: gpio
    gpio: {pin: GPIO18}
  elbow:
    kind: digital
    driver: gpio
    gpio: {pin: GPIO18}
`, "actuators.elbow.gpio.pin", 11, "GPIO18 is already used by", "actuators.base.gpio.pin", 7},
	{"one pin by name and by number", `
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: "17"}}
  valve: {kind: digital, driver: gpio, gpio: {pin: GPIO17}}
`, "actuators.valve.gpio.pin", 5, "GPIO17 is already used by", "actuators.pump.gpio.pin", 4},
	{"an output on the e-stop's pin", `
estop: {driver: gpio, pin: GPIO27}
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: "27"}}
`, "actuators.pump.gpio.pin", 5, "GPIO27 is already used by", "estop.pin", 3},
	{"an output on a periph servo's PWM pin", `
actuators:
  pan:
    kind: servo
    driver: gpio
    gpio: {pwm: periph, pin: GPIO18, ` + servo + `}
    min: -90
    max: 90
  pump: {kind: digital, driver: gpio, gpio: {pin: GPIO18}}
`, "actuators.pump.gpio.pin", 10, "GPIO18 is already used by", "actuators.pan.gpio.pin", 7},
	{"an output on the pin a sysfs channel is routed to", `
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: GPIO18}}
  pan:
    kind: servo
    driver: gpio
    gpio: {pwm: sysfs, chip: 0, channel: 0, pin: GPIO18, ` + servo + `}
    min: -90
    max: 90
`, "actuators.pan.gpio.pin", 8, "GPIO18 is already used by", "actuators.pump.gpio.pin", 4},
	{"two servos on one sysfs channel", `
actuators:
  pan:
    kind: servo
    driver: gpio
    gpio: {channel: 1, ` + servo + `}
    min: -90
    max: 90
  tilt:
    kind: servo
    driver: gpio
    gpio: {chip: 0, channel: 1, ` + servo + `}
    min: -90
    max: 90
`, "actuators.tilt.gpio.channel", 13, "pwmchip0/pwm1 is already used by", "actuators.pan.gpio.channel", 7},
	{"two actuators on one PCA9685 channel", `
actuators:
  a:
    kind: pwm
    driver: pca9685
    pca9685: {bus: "1", channel: 3}
  b:
    kind: pwm
    driver: pca9685
    pca9685: {bus: I2C1, channel: 3}
`, "actuators.b.pca9685.channel", 11, `channel 3 of PCA9685 0x40 on I2C bus "1" is already used by`, "actuators.a.pca9685.channel", 7},
	{"a PCA9685 and an INA219 both at 0x40", `
supplies:
  logic:
    driver: ina219
    i2c: {bus: "1"}
    min_volts: 4.75
    max_volts: 5.4
actuators:
  fan:
    kind: pwm
    driver: pca9685
    pca9685:
      bus: "1"
      channel: 0
`, "actuators.fan.pca9685.addr", 13, `I2C address 0x40 on bus "1" is already used by`, "supplies.logic.i2c.addr", 6},
	{"an output on the I2C bus's pin", `
supplies:
  logic: {driver: ina226, i2c: {bus: "1", addr: 0x41}, min_volts: 4.75, max_volts: 5.4}
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: GPIO3}}
`, "actuators.pump.gpio.pin", 6, "GPIO3 is already used by", "supplies.logic.i2c.bus", 4},
	{"an I2C bus on an output's pin", `
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: GPIO2}}
supplies:
  logic: {driver: ina226, i2c: {bus: "1", addr: 0x41}, min_volts: 4.75, max_volts: 5.4}
`, "supplies.logic.i2c.bus", 6, "GPIO2 is already used by", "actuators.pump.gpio.pin", 4},
	{"two actuators on one channel of a board", `
mcus:
  pico: {port: /dev/ttyACM0}
actuators:
  a: {kind: setpoint, driver: mcu, mcu: {board: pico, channel: 2}, min: 0, max: 1}
  b:
    kind: setpoint
    driver: mcu
    mcu: {board: pico, channel: 2}
    min: 0
    max: 1
`, "actuators.b.mcu.channel", 10, "channel 2 of mcus.pico is already used by", "actuators.a.mcu.channel", 6},
	{"an output on the header UART a board uses", `
mcus:
  pico: {port: /dev/serial0}
actuators:
  a: {kind: setpoint, driver: mcu, mcu: {board: pico, channel: 0}, min: 0, max: 1}
  led: {kind: digital, driver: gpio, gpio: {pin: GPIO14}}
`, "actuators.led.gpio.pin", 7, "GPIO14 is already used by", "mcus.pico.port", 4},
}

func TestConflictsNameBothLines(t *testing.T) {
	for _, tc := range conflicts {
		t.Run(tc.name, func(t *testing.T) {
			errs := refusals(t, tc.yaml)
			if len(errs) != 1 {
				t.Fatalf("%d errors, want 1:\n%v", len(errs), errors.Join(errs...))
			}
			var ce *config.Error
			if !errors.As(errs[0], &ce) {
				t.Fatalf("not a *config.Error: %v", errs[0])
			}
			want := fmt.Sprintf("%s %s (line %d)", tc.msg, tc.by, tc.first)
			if ce.Path != tc.path || ce.Line != tc.line || !strings.Contains(ce.Msg, want) {
				t.Errorf("got %v\nwant pi.yaml:%d:..: %s: %s", ce, tc.line, tc.path, want)
			}
		})
	}
}

// A pin taken by a bus says what for, whichever key came first.
func TestConflictSaysWhatThePinIs(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{`
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: GPIO2}}
supplies:
  logic: {driver: ina226, i2c: {bus: "1", addr: 0x41}, min_volts: 4.75, max_volts: 5.4}
`, "GPIO2 is already used by actuators.pump.gpio.pin (line 4); here it would be SDA of I2C bus 1"},
		{`
mcus:
  pico: {port: /dev/ttyAMA0}
actuators:
  led: {kind: digital, driver: gpio, gpio: {pin: GPIO15}}
`, "GPIO15 is already used by mcus.pico.port (line 4) as RXD of the header UART"},
	} {
		errs := refusals(t, tc.yaml)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
			t.Errorf("got %v\nwant ... %s", errors.Join(errs...), tc.want)
		}
	}
}

// board are configs refused (or warned of) for pins, channels and addresses
// the board or the chip does not have.
var board = []struct {
	name, yaml string
	path, msg  string
	warning    bool
}{
	{"GPIO 9999 on the default board", `
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: GPIO9999}}
`, "actuators.pump.gpio.pin", `"GPIO9999" is not on the 40-pin header of a Raspberry Pi (model not given) (board: raspberry-pi has GPIO0..GPIO27`, false},
	{"GPIO 28 on a Pi 4", `
board: raspberry-pi-4
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: "28"}}
`, "actuators.pump.gpio.pin", `"28" is not on the 40-pin header of a Raspberry Pi 4`, false},
	{"GPIO 9999 on a generic board", `
board: generic
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: GPIO9999}}
`, "actuators.pump.gpio.pin", `"GPIO9999" is not a GPIO number (board: generic: GPIO0..GPIO1023)`, false},
	{"a negative pin", `
board: generic
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: "-1"}}
`, "actuators.pump.gpio.pin", `"-1" is not a GPIO number`, false},
	{"a header pin name", `
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: P1_12}}
`, "actuators.pump.gpio.pin", `"P1_12" is physical pin 12 of the header: write GPIO18`, false},
	{"a name periph would not find", `
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: gpio17}}
`, "actuators.pump.gpio.pin", `"gpio17": write GPIO17, the name periph finds the pin by`, false},
	{"a bare number on a Pi 5", `
board: raspberry-pi-5
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: "17"}}
`, "actuators.pump.gpio.pin", `"17": on a Raspberry Pi 5 periph finds the pin as GPIO17`, false},
	{"sysfs PWM on a pin without hardware PWM", `
board: raspberry-pi-4
actuators:
  pan:
    kind: servo
    driver: gpio
    gpio: {channel: 0, pin: GPIO17, ` + servo + `}
    min: -90
    max: 90
`, "actuators.pan.gpio.pin", "a Raspberry Pi 4 has no hardware PWM on GPIO17 (board: raspberry-pi-4: GPIO12, GPIO13, GPIO18 or GPIO19)", false},
	{"sysfs PWM on the other channel's pin", `
board: raspberry-pi-4
actuators:
  pan:
    kind: servo
    driver: gpio
    gpio: {channel: 1, pin: GPIO18, ` + servo + `}
    min: -90
    max: 90
`, "actuators.pan.gpio.pin", "GPIO18 carries PWM0, which is channel 0, not 1, on a Raspberry Pi 4", false},
	{"periph PWM on a Pi 5", `
board: raspberry-pi-5
actuators:
  pan:
    kind: servo
    driver: gpio
    gpio: {pwm: periph, pin: GPIO18, ` + servo + `}
    min: -90
    max: 90
`, "actuators.pan.gpio.pwm", "periph has no PWM on a Raspberry Pi 5 (board: raspberry-pi-5): use pwm: sysfs", false},
	{"a PCA9685 at a reserved address", `
actuators:
  fan: {kind: pwm, driver: pca9685, pca9685: {addr: 0x78, channel: 0}}
`, "actuators.fan.pca9685.addr", "0x78 is not a PCA9685 address (0x40..0x77", false},
	{"an INA219 at an address it cannot have", `
supplies:
  logic: {driver: ina219, i2c: {addr: 0x60}, min_volts: 4.75, max_volts: 5.4}
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`, "supplies.logic.i2c.addr", "0x60 is not an INA219 address (0x40..0x4f)", false},
	{"the HAT EEPROM's pin", `
actuators:
  pump: {kind: digital, driver: gpio, gpio: {pin: GPIO0}}
`, "actuators.pump.gpio.pin", "GPIO0 is reserved for the HAT ID EEPROM", true},
}

func TestBoardRefusesPins(t *testing.T) {
	for _, tc := range board {
		t.Run(tc.name, func(t *testing.T) {
			text := head + strings.TrimPrefix(tc.yaml, "\n")
			c, err := config.Parse([]byte(text), "pi.yaml")
			var got string
			if tc.warning {
				if err != nil {
					t.Fatal(err)
				}
				if w := c.Warnings(); len(w) == 1 {
					got = w[0]
				} else {
					t.Fatalf("warnings %q, want one", w)
				}
			} else {
				errs := refusals(t, tc.yaml)
				if len(errs) != 1 {
					t.Fatalf("%d errors, want 1:\n%v", len(errs), errors.Join(errs...))
				}
				got = errs[0].Error()
			}
			// Located at the key's own line.
			line := 0
			last := tc.path[strings.LastIndexByte(tc.path, '.')+1:]
			for i, l := range strings.Split(text, "\n") {
				if strings.Contains(l, last+":") {
					line = i + 1
				}
			}
			if want := fmt.Sprintf("pi.yaml:%d:", line); !strings.HasPrefix(got, want) || !strings.Contains(got, tc.path+": "+tc.msg) {
				t.Errorf("got  %s\nwant %s..: %s: %s", got, want, tc.path, tc.msg)
			}
		})
	}
}

// accepted share hardware legitimately, or use what only another board
// lacks.
var accepted = []struct{ name, yaml string }{
	{"an active-low relay and a pwm on an mcu", `
mcus:
  uno: {port: /dev/ttyACM0}
actuators:
  pump: {kind: digital, driver: mcu, mcu: {board: uno, channel: 4, active_low: true}}
  fan: {kind: pwm, driver: mcu, mcu: {board: uno, channel: 2, tolerance: 0.003, active_low: false}}
`},
	{"several actuators on one PCA9685 board", `
supplies:
  logic: {driver: ina219, i2c: {bus: "1", addr: 0x41}, min_volts: 4.75, max_volts: 5.4}
actuators:
  a: {kind: pwm, driver: pca9685, pca9685: {bus: "1", channel: 0}}
  b: {kind: pwm, driver: pca9685, pca9685: {bus: "1", channel: 1}}
  c: {kind: pwm, driver: pca9685, pca9685: {bus: "1", addr: 0x42, channel: 0}}
`},
	{"channels of one board on one port", `
mcus:
  pico: {port: /dev/ttyACM0}
supplies:
  battery: {driver: mcu, mcu: {board: pico}, min_volts: 6, max_volts: 8}
actuators:
  a: {kind: setpoint, driver: mcu, mcu: {board: pico, channel: 0}, min: 0, max: 1}
  b: {kind: setpoint, driver: mcu, mcu: {board: pico, channel: 1}, min: 0, max: 1}
`},
	{"GPIO40 and GPIO3 on a generic board with an I2C bus 1", `
board: generic
supplies:
  logic: {driver: ina219, i2c: {bus: "1"}, min_volts: 4.75, max_volts: 5.4}
actuators:
  a: {kind: digital, driver: gpio, gpio: {pin: GPIO40}}
  b: {kind: digital, driver: gpio, gpio: {pin: GPIO3}}
`},
	{"a sysfs channel on its own pin, and the other", `
board: raspberry-pi-4
actuators:
  pan:
    kind: servo
    driver: gpio
    gpio: {channel: 0, pin: GPIO12, ` + servo + `}
    min: -90
    max: 90
  tilt:
    kind: servo
    driver: gpio
    gpio: {channel: 1, ` + servo + `}
    min: -90
    max: 90
`},
	{"pins periph finds by another name", `
estop: {driver: gpio, pin: EXP_ESTOP}
actuators:
  a: {kind: digital, driver: gpio, gpio: {pin: EXP_RELAY}}
`},
}

// A section refused for what it says claims nothing: its defaults would
// collide where the file wrote something else.
func TestRefusedSectionClaimsNothing(t *testing.T) {
	errs := refusals(t, `
actuators:
  a: {kind: pwm, driver: pca9685, pca9685: {channel: 0}}
  b: {kind: pwm, driver: pca9685, pca9685: {channel: "1"}}
  c:
    kind: servo
    driver: gpio
    gpio: {channel: zero, `+servo+`}
    min: -90
    max: 90
  d:
    kind: servo
    driver: gpio
    gpio: {channel: 0, `+servo+`}
    min: -90
    max: 90
`)
	for _, e := range errs {
		if strings.Contains(e.Error(), "already used") {
			t.Errorf("a refused section claimed: %v", e)
		}
	}
	if len(errs) != 2 {
		t.Errorf("%d errors, want 2 (the channels that did not decode):\n%v", len(errs), errors.Join(errs...))
	}
}

func TestSharedHardwareAccepted(t *testing.T) {
	for _, tc := range accepted {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := config.Parse([]byte(head+strings.TrimPrefix(tc.yaml, "\n")), "pi.yaml"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// refusals parses head+yaml and returns its errors; it fails the test if
// the config was accepted.
func refusals(t *testing.T, yaml string) []error {
	t.Helper()
	c, err := config.Parse([]byte(head+strings.TrimPrefix(yaml, "\n")), "pi.yaml")
	if err == nil {
		t.Fatalf("accepted: %+v", c.Actuators)
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
