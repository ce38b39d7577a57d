package ina2xx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"periph.io/x/conn/v3"
)

// DefaultAddr is the chips' I2C address with A0 and A1 grounded.
const DefaultAddr = 0x40

// Errors returned by this package, for errors.Is.
var (
	// ErrConfig is a configuration this package refuses.
	ErrConfig = errors.New("ina2xx: invalid configuration")
	// ErrBus is a failed I2C transaction.
	ErrBus = errors.New("ina2xx: i2c transaction failed")
	// ErrWrongDevice is a chip that does not identify as the one expected,
	// or does not keep the configuration written to it.
	ErrWrongDevice = errors.New("ina2xx: not the expected chip")
	// ErrOverflow is the chip's overflow flag, or a shunt voltage at the end
	// of its range: the current is beyond what can be measured.
	ErrOverflow = errors.New("ina2xx: overflow")
	// ErrBadReading is a register value the chip cannot produce.
	ErrBadReading = errors.New("ina2xx: impossible register value")
	// ErrStale means the chip has finished no conversion for longer than
	// StaleAfter: its registers hold an old result.
	ErrStale = errors.New("ina2xx: no new conversion")
	// ErrNoShunt is Amps on a monitor with no shunt resistance configured.
	ErrNoShunt = errors.New("ina2xx: no shunt resistance configured")
)

// Register addresses common to both chips.
const (
	regConfig = 0x00
	regShunt  = 0x01
	regBus    = 0x02
	regPower  = 0x03
)

// Reading is one set of measurements.
type Reading struct {
	BusVolts   float64
	ShuntVolts float64
	// Amps is ShuntVolts / shunt resistance; NaN when no shunt resistance
	// is configured.
	Amps float64
	At   time.Time
}

// dev is what both chips share: the connection, one transaction sequence at
// a time, and the freshness watch.
type dev struct {
	name       string
	c          conn.Conn
	shuntOhms  float64
	staleAfter time.Duration

	// bus reads the bus voltage (with d.mu held) and shunt decodes the
	// shunt register: what differs between the chips.
	bus   func() (float64, time.Time, error)
	shunt func(raw uint16) (float64, error)

	mu sync.Mutex
	// fresh is when a finished conversion was last seen (or the chip was
	// configured, which restarts conversions).
	fresh time.Time
}

// Volts reads the bus voltage and returns it with the time it was read. It
// is the supervisor's VoltSource.
func (d *dev) Volts() (float64, time.Time, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.bus()
}

// Read reads the bus and shunt voltages, and the current if a shunt
// resistance is configured.
func (d *dev) Read() (Reading, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	bus, at, err := d.bus()
	if err != nil {
		return Reading{}, err
	}
	raw, err := d.read(regShunt)
	if err != nil {
		return Reading{}, err
	}
	shunt, err := d.shunt(raw)
	if err != nil {
		return Reading{}, fmt.Errorf("ina2xx: %s: %w", d, err)
	}
	return Reading{BusVolts: bus, ShuntVolts: shunt, Amps: d.amps(shunt), At: at}, nil
}

// Amps reads the current through the shunt.
func (d *dev) Amps() (float64, time.Time, error) {
	if d.shuntOhms == 0 {
		return 0, time.Time{}, fmt.Errorf("ina2xx: %s: %w", d, ErrNoShunt)
	}
	r, err := d.Read()
	if err != nil {
		return 0, time.Time{}, err
	}
	return r.Amps, r.At, nil
}

func (d *dev) String() string { return d.name + " on " + d.c.String() }

func (d *dev) read(reg byte) (uint16, error) {
	var b [2]byte
	if err := d.c.Tx([]byte{reg}, b[:]); err != nil {
		return 0, fmt.Errorf("ina2xx: %s: read register %#02x: %w: %w", d, reg, ErrBus, err)
	}
	return binary.BigEndian.Uint16(b[:]), nil
}

func (d *dev) write(reg byte, v uint16) error {
	if err := d.c.Tx([]byte{reg, byte(v >> 8), byte(v)}, nil); err != nil {
		return fmt.Errorf("ina2xx: %s: write register %#02x: %w: %w", d, reg, ErrBus, err)
	}
	return nil
}

// configure writes the configuration register and checks it reads back.
func (d *dev) configure(cfg, mask uint16) error {
	if err := d.write(regConfig, cfg); err != nil {
		return err
	}
	got, err := d.read(regConfig)
	if err != nil {
		return err
	}
	if got&mask != cfg&mask {
		return fmt.Errorf("ina2xx: %s: %w: configuration reads back %#04x, wrote %#04x", d, ErrWrongDevice, got, cfg)
	}
	d.fresh = time.Now()
	return nil
}

// converted records whether a conversion finished since the last look and
// fails once none has for staleAfter. Call with mu held.
func (d *dev) converted(ready bool, now time.Time) error {
	if ready {
		d.fresh = now
		return nil
	}
	if d.staleAfter < 0 {
		return nil
	}
	if age := now.Sub(d.fresh); age > d.staleAfter {
		return fmt.Errorf("ina2xx: %s: %w for %s", d, ErrStale, age.Round(time.Millisecond))
	}
	return nil
}

func (d *dev) amps(shuntVolts float64) float64 {
	if d.shuntOhms == 0 {
		return math.NaN()
	}
	return shuntVolts / d.shuntOhms
}

func checkShunt(name string, ohms float64) error {
	if math.IsNaN(ohms) || math.IsInf(ohms, 0) || ohms < 0 {
		return fmt.Errorf("ina2xx: %s: %w: shunt resistance %g Ω", name, ErrConfig, ohms)
	}
	return nil
}

func log2(n int) (int, bool) {
	for i := 0; i < 31; i++ {
		if n == 1<<i {
			return i, true
		}
	}
	return 0, false
}
