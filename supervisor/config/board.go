package config

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Board is the computer the supervisor runs on (the top-level board: key),
// as far as checking its pins goes: which GPIO numbers exist, which of them
// can carry hardware PWM, and which are taken by the I2C bus and the UART
// when those are used. A pin the board does not have is refused by
// check-config rather than found missing at start-up.
//
// Pins are written as periph names them: GPIO<n> (BCM numbering on a
// Raspberry Pi), or the bare number n (periph's alias for it on a Pi up to
// the 4). Any other name (a USB expander's pin, a test's fake pin) is taken
// as it is: it is compared with other pins by that exact name, and its
// existence is left to periph at start-up.
type Board struct {
	// Name is the value of board: ("" is the default, DefaultBoard).
	Name string
	// About is a few words for messages: "a Raspberry Pi 4".
	About string

	pi      bool        // the Raspberry Pi 40-pin header: GPIO0..GPIO27
	maxGPIO int         // the highest GPIO number
	pwmPins map[int]int // hardware PWM pin → its channel of pwmchip0 (-1: not checked); nil: any pin
	// noPeriphPWM: periph cannot make PWM on this board (the Pi 5).
	noPeriphPWM bool
	// noBareNumbers: periph does not find pins by their bare number (the
	// Pi 5, whose GPIO periph reaches only through the kernel's line names).
	noBareNumbers bool
}

// DefaultBoard is the board assumed when board: is not written: some
// Raspberry Pi with the 40-pin header, the computer the supervisor is made
// for. Other hardware says board: generic.
const DefaultBoard = "raspberry-pi"

// maxGenericGPIO bounds a GPIO number on a board this package knows nothing
// about: far above any real SoC's lines, far below a typo such as 9999.
const maxGenericGPIO = 1023

// The Raspberry Pi's hardware PWM pins. Up to the 4 (BCM2835..BCM2711) they
// carry PWM0 (GPIO12, GPIO18: pwmchip0 channel 0) and PWM1 (GPIO13, GPIO19:
// channel 1), whichever overlay routes them. The Pi 5's RP1 also has PWM
// on GPIO14 and GPIO15; its channel numbering is left to the overlay.
var (
	bcmPWM   = map[int]int{12: 0, 18: 0, 13: 1, 19: 1}
	anyPiPWM = map[int]int{12: -1, 13: -1, 18: -1, 19: -1}
	rp1PWM   = map[int]int{12: -1, 13: -1, 14: -1, 15: -1, 18: -1, 19: -1}
)

var boards = map[string]Board{
	"raspberry-pi":        {About: "a Raspberry Pi (model not given)", pi: true, maxGPIO: 27, pwmPins: anyPiPWM},
	"raspberry-pi-3":      {About: "a Raspberry Pi 3", pi: true, maxGPIO: 27, pwmPins: bcmPWM},
	"raspberry-pi-4":      {About: "a Raspberry Pi 4", pi: true, maxGPIO: 27, pwmPins: bcmPWM},
	"raspberry-pi-zero-2": {About: "a Raspberry Pi Zero 2", pi: true, maxGPIO: 27, pwmPins: bcmPWM},
	"raspberry-pi-5": {About: "a Raspberry Pi 5", pi: true, maxGPIO: 27, pwmPins: rp1PWM,
		noPeriphPWM: true, noBareNumbers: true},
	"generic": {About: "a generic board", maxGPIO: maxGenericGPIO},
}

// BoardNames lists the values board: takes, sorted.
func BoardNames() []string { return sortedKeys(boards) }

// LookupBoard returns the board of that name ("" is DefaultBoard).
func LookupBoard(name string) (Board, bool) {
	if name == "" {
		name = DefaultBoard
	}
	b, ok := boards[name]
	b.Name = name
	return b, ok
}

// HostBoard returns the configured board (DefaultBoard when board: is not
// written). A board: Parse refused reads as generic.
func (c *Config) HostBoard() Board {
	if b, ok := LookupBoard(c.Board); ok {
		return b
	}
	b, _ := LookupBoard("generic")
	return b
}

// RaspberryPi reports whether the board is a Raspberry Pi.
func (b Board) RaspberryPi() bool { return b.pi }

// Pin is a pin as periph finds it.
type Pin struct {
	// Name is the pin's one name: GPIO18 however the file wrote it, or the
	// name as written for a pin that is not a numbered GPIO.
	Name string
	// GPIO is the GPIO number, -1 for a pin of another name.
	GPIO int
}

var (
	numberedPin = regexp.MustCompile(`^(?i:gpio)?([-+]?[0-9]+)$`)
	headerPin   = regexp.MustCompile(`^(?i:p1|j8)_([0-9]+)$`)
)

// header maps the 40-pin header's physical pins to the GPIO on them; the
// others are power and ground.
var header = map[int]int{3: 2, 5: 3, 7: 4, 8: 14, 10: 15, 11: 17, 12: 18, 13: 27, 15: 22, 16: 23, 18: 24, 19: 10,
	21: 9, 22: 25, 23: 11, 24: 8, 26: 7, 27: 0, 28: 1, 29: 5, 31: 6, 32: 12, 33: 13, 35: 19, 36: 16, 37: 26, 38: 20, 40: 21}

// Pin resolves a pin name the way periph will find it, or says why the
// board has no such pin.
func (b Board) Pin(name string) (Pin, error) {
	if m := headerPin.FindStringSubmatch(name); m != nil && b.pi {
		// periph registers the header's names for its pin map only, not
		// for gpioreg.ByName: the driver would not find the pin.
		n, _ := strconv.Atoi(m[1])
		if g, ok := header[n]; ok {
			return Pin{}, fmt.Errorf("%.20q is physical pin %d of the header: write GPIO%d (periph finds pins by BCM name)", name, n, g)
		}
		return Pin{}, fmt.Errorf("%.20q is physical pin %d of the header, which is not a GPIO (power or ground)", name, n)
	}
	m := numberedPin.FindStringSubmatch(name)
	if m == nil {
		return Pin{Name: name, GPIO: -1}, nil
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 0 {
		return Pin{}, fmt.Errorf("%.20q is not a GPIO number (%s: GPIO0..GPIO%d)", name, b.Name, b.maxGPIO)
	}
	if n > b.maxGPIO {
		if b.pi {
			return Pin{}, fmt.Errorf("%.20q is not on the 40-pin header of %s (board: %s has GPIO0..GPIO%d, BCM numbering)", name, b.About, b.Name, b.maxGPIO)
		}
		return Pin{}, fmt.Errorf("%.20q is not a GPIO number (board: %s: GPIO0..GPIO%d)", name, b.Name, b.maxGPIO)
	}
	canon := "GPIO" + strconv.Itoa(n)
	bare := m[1] == name
	switch {
	case bare && b.noBareNumbers:
		return Pin{}, fmt.Errorf("%.20q: on %s periph finds the pin as %s, not by its number", name, b.About, canon)
	case bare && name != strconv.Itoa(n), !bare && name != canon:
		// periph's names are exact: "gpio18" or "GPIO018" would not be found.
		return Pin{}, fmt.Errorf("%.20q: write %s, the name periph finds the pin by", name, canon)
	}
	return Pin{Name: canon, GPIO: n}, nil
}

// PinWarning returns what is discouraged about a valid pin, "" if nothing:
// on a Raspberry Pi, GPIO0 and GPIO1 are the HAT ID EEPROM's bus.
func (b Board) PinWarning(p Pin) string {
	if b.pi && (p.GPIO == 0 || p.GPIO == 1) {
		return fmt.Sprintf("%s is reserved for the HAT ID EEPROM (ID_SD/ID_SC): a HAT's EEPROM on it would be driven", p.Name)
	}
	return ""
}

// CheckPWMPin says why pin cannot carry the hardware PWM channel of
// pwmchipN/pwmM (channel M; -1: unknown), nil when it can or the board does
// not say.
func (b Board) CheckPWMPin(p Pin, channel int) error {
	if b.pwmPins == nil || p.GPIO < 0 {
		return nil
	}
	ch, ok := b.pwmPins[p.GPIO]
	if !ok {
		pins := make([]int, 0, len(b.pwmPins))
		for n := range b.pwmPins {
			pins = append(pins, n)
		}
		sort.Ints(pins)
		names := make([]string, len(pins))
		for i, n := range pins {
			names[i] = "GPIO" + strconv.Itoa(n)
		}
		return fmt.Errorf("%s has no hardware PWM on %s (board: %s: %s)", b.About, p.Name, b.Name, orList(names))
	}
	if ch >= 0 && channel >= 0 && ch != channel {
		return fmt.Errorf("%s carries PWM%d, which is channel %d, not %d, on %s", p.Name, ch, ch, channel, b.About)
	}
	return nil
}

// CheckPeriphPWM says why periph cannot make PWM on this board, nil if it
// can.
func (b Board) CheckPeriphPWM() error {
	if b.noPeriphPWM {
		return fmt.Errorf("periph has no PWM on %s (board: %s): use pwm: sysfs", b.About, b.Name)
	}
	return nil
}

// I2CBus returns one name for an I2C bus however periph's name for it is
// written: "1", "I2C1" and "/dev/i2c-1" are bus "1". "" (the first bus
// found) stays "".
func I2CBus(name string) string {
	for _, prefix := range []string{"/dev/i2c-", "I2C", "i2c"} {
		if n, ok := strings.CutPrefix(name, prefix); ok {
			if _, err := strconv.Atoi(n); err == nil {
				return n
			}
		}
	}
	return name
}

// I2CPins returns the pins the I2C bus uses on this board, SDA then SCL:
// GPIO2 and GPIO3 for bus 1 of a Raspberry Pi; none otherwise.
func (b Board) I2CPins(bus string) []Pin {
	if b.pi && I2CBus(bus) == "1" {
		return []Pin{{"GPIO2", 2}, {"GPIO3", 3}}
	}
	return nil
}

// UARTPins returns the pins a serial port uses on this board, TXD then
// RXD: GPIO14 and GPIO15 for a Raspberry Pi's header UART (serial0,
// ttyAMA0, ttyS0); none otherwise.
func (b Board) UARTPins(port string) []Pin {
	switch port {
	case "/dev/serial0", "/dev/ttyAMA0", "/dev/ttyS0":
		if b.pi {
			return []Pin{{"GPIO14", 14}, {"GPIO15", 15}}
		}
	}
	return nil
}
