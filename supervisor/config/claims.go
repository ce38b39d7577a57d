package config

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// Resource is a piece of hardware that one actuator, supply, e-stop or
// board takes for itself: a pin, a PWM channel, an address on an I2C bus, a
// serial port, a channel of a board. Each driver kind declares what its
// actuators and supplies take (Driver.Claims, Driver.SupplyClaims); the
// configuration itself declares the e-stop's pin and the mcus' ports. One
// check then refuses every resource taken twice, at the later of the two
// keys, naming the earlier and its line:
//
//	arm.yaml:42:12: actuators.elbow.gpio.pin: GPIO18 is already used by actuators.base.gpio.pin (line 30)
//
// so a new driver kind gets the check by declaring its resources.
type Resource struct {
	// Key names the resource, normalised so that two spellings of one
	// piece of hardware are one key ("GPIO18" however the pin was written),
	// and is shown in messages: "GPIO18", "pwmchip0/pwm1", `I2C address
	// 0x40 on bus "1"`.
	Key string
	// Field is the key that takes it, relative to the actuator, supply,
	// e-stop or board that takes it ("gpio.pin").
	Field string
	// Shared: claims of one Key with the same non-empty Shared do not
	// conflict — the channels of one PCA9685 board share its address, the
	// chips on I2C bus 1 its pins.
	Shared string
	// As says what the resource is used as, for the message ("SDA of I2C
	// bus 1"); "" for the resource itself.
	As string
}

// claim is a Resource taken by the actuator, supply or section at owner.
type claim struct {
	Resource
	owner, path string
	at          place
}

// claim records the resources taken under owner ("actuators.pan"); field
// paths are relative to it.
func (d *decoder) claim(owner string, rs ...Resource) {
	for _, r := range rs {
		p := join(owner, r.Field)
		line, col := d.locate(p)
		d.resources = append(d.resources, claim{Resource: r, owner: owner, path: p, at: place{line, col}})
	}
}

// checkClaims refuses every resource claimed twice. The claim written
// first in the file keeps it; each later one is refused at its own key.
func (d *decoder) checkClaims() {
	sort.SliceStable(d.resources, func(i, j int) bool {
		a, b := d.resources[i].at, d.resources[j].at
		if a.line != b.line {
			return a.line < b.line
		}
		return a.col < b.col
	})
	first := map[string]claim{}
	for _, c := range d.resources {
		f, taken := first[c.Key]
		switch {
		case !taken:
			first[c.Key] = c
		case f.owner == c.owner, c.Shared != "" && c.Shared == f.Shared:
		default:
			as := ""
			if f.As != "" {
				as = " as " + f.As
			}
			if c.As != "" {
				as += "; here it would be " + c.As
			}
			d.errorf(c.path, "%s is already used by %s (line %d)%s", c.Key, f.path, f.at.line, as)
		}
	}
}

// pinClaims returns the claims of pins an I2C bus or a UART uses.
func pinClaims(field, shared, use string, pins []Pin, roles ...string) []Resource {
	rs := make([]Resource, len(pins))
	for i, p := range pins {
		rs[i] = Resource{Key: p.Name, Field: field, Shared: shared, As: roles[i] + " of " + use}
	}
	return rs
}

// I2CClaims returns what a chip at addr on an I2C bus takes: its address,
// and on a Raspberry Pi the bus's pins. field is the section's key ("i2c");
// shared lets the sections of one chip share its address (a PCA9685
// board's channels), "" none.
func I2CClaims(b Board, field, bus string, addr int, shared string) []Resource {
	bus = I2CBus(bus)
	rs := []Resource{{Key: fmt.Sprintf("I2C address %#02x on bus %q", addr, bus), Field: field + ".addr", Shared: shared}}
	use := "I2C bus " + bus
	return append(rs, pinClaims(field+".bus", use, use, b.I2CPins(bus), "SDA", "SCL")...)
}

// SerialPort returns one name for a serial device: the path cleaned and,
// where it is a link that resolves on this machine (/dev/serial/by-id/...,
// /dev/serial0), the device it links to.
func SerialPort(port string) string {
	p := filepath.Clean(port)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// claimMCUs records what each board under mcus takes: its serial port or
// USB device (one board per port: the actuators on a board share its link,
// each on a channel of its own), and on a Raspberry Pi the header UART's
// pins.
func (d *decoder) claimMCUs(c *Config) {
	b := c.HostBoard()
	for _, name := range c.MCUNames() {
		p, m := "mcus."+name, c.MCUs[name]
		switch {
		case m.Port != "" && d.ok(p+".port"):
			port := SerialPort(m.Port)
			d.claim(p, Resource{Key: "serial port " + port, Field: "port"})
			pins := b.UARTPins(filepath.Clean(m.Port))
			if pins == nil {
				pins = b.UARTPins(port)
			}
			d.claim(p, pinClaims("port", "uart", "the header UART", pins, "TXD", "RXD")...)
		case m.USB.VID != "" && m.USB.PID != "":
			serial := m.USB.SerialNumber
			if serial == "" {
				serial = "(none given)"
			}
			d.claim(p, Resource{Key: fmt.Sprintf("USB device %s:%s serial number %s",
				strings.ToLower(m.USB.VID), strings.ToLower(m.USB.PID), serial), Field: "usb"})
		}
	}
}

// checkBoard refuses a board: this package does not know.
func (d *decoder) checkBoard(c *Config) {
	if d.set("board") && d.ok("board") {
		if _, ok := LookupBoard(c.Board); !ok || c.Board == "" {
			d.errorf("board", "unknown board %.40q (known: %s)", c.Board, strings.Join(BoardNames(), ", "))
			d.bad["board"] = true
		}
	}
}

// claimEStop checks the e-stop's pin on the board and claims it.
func (d *decoder) claimEStop(c *Config) {
	e := c.EStop
	if !d.set("estop") || e.Driver != "gpio" || e.Pin == "" || !d.ok("estop.pin") {
		return
	}
	b := c.HostBoard()
	pin, err := b.Pin(e.Pin)
	if err != nil {
		d.errorf("estop.pin", "%v", err)
		return
	}
	if w := b.PinWarning(pin); w != "" {
		d.warnf("estop.pin", "%s", w)
	}
	d.claim("estop", Resource{Key: pin.Name, Field: "pin"})
}
