package ina2xx

import (
	"fmt"
	"time"

	"periph.io/x/conn/v3"
)

// INA226 registers, fields and scales (datasheet SBOS547).
const (
	regMaskEnable   = 0x06
	regManufacturer = 0xFE
	regDieID        = 0xFF

	ina226Manufacturer = 0x5449 // "TI"
	ina226DieID        = 0x2260 // DID 0x226, revision 0
	ina226CVRF         = 1 << 3
	ina226OVF          = 1 << 2
	ina226BusLSB       = 1.25e-3 // volts
	ina226ShuntLSB     = 2.5e-6  // volts
	ina226Mode         = 0b111   // shunt and bus, continuous
	ina226Fixed        = 0x4000  // bits 14..12 read 100
)

// ina226Averages and ina226Times are the AVG and VBUSCT/VSHCT codes.
var (
	ina226Averages = [...]int{1, 4, 16, 64, 128, 256, 512, 1024}
	ina226Times    = [...]time.Duration{140 * time.Microsecond, 204 * time.Microsecond, 332 * time.Microsecond,
		588 * time.Microsecond, 1100 * time.Microsecond, 2116 * time.Microsecond, 4156 * time.Microsecond, 8244 * time.Microsecond}
)

// INA226Config configures an INA226. The zero value is 16-sample averaging
// of 1.1 ms conversions and no current measurement.
type INA226Config struct {
	// ShuntOhms is the shunt resistor, e.g. 0.002; 0 means current is not
	// measured (Amps returns ErrNoShunt).
	ShuntOhms float64
	// Averages is 1, 4, 16, 64, 128, 256, 512 or 1024; 0 means 16.
	Averages int
	// ConversionTime is per sample, for bus and shunt alike: 140µs, 204µs,
	// 332µs, 588µs, 1.1ms, 2.116ms, 4.156ms or 8.244ms; 0 means 1.1ms.
	ConversionTime time.Duration
	// StaleAfter is how long without a finished conversion before readings
	// fail with ErrStale; 0 means four conversion cycles plus 50 ms. A
	// negative value turns the check off, for a chip (or clone) whose
	// conversion-ready flag does not work; a chip that stops converting then
	// goes unnoticed.
	StaleAfter time.Duration
}

// INA226 is a TI INA226 bus voltage and shunt monitor. Its methods are safe
// for concurrent use.
type INA226 struct {
	dev
}

// NewINA226 checks the manufacturer and die IDs of the chip at c (typically
// &i2c.Dev{Bus: bus, Addr: DefaultAddr}) and configures it. Any die
// revision of the INA226 is accepted.
func NewINA226(c conn.Conn, cfg INA226Config) (*INA226, error) {
	d := &INA226{dev: dev{name: "INA226", c: c, shuntOhms: cfg.ShuntOhms}}
	d.bus, d.shunt = d.busLocked, decodeShunt226
	if err := checkShunt(d.name, cfg.ShuntOhms); err != nil {
		return nil, err
	}
	word, cycle, err := cfg.word()
	if err != nil {
		return nil, fmt.Errorf("ina2xx: %s: %w", d.name, err)
	}
	d.staleAfter = cfg.StaleAfter
	if d.staleAfter == 0 {
		d.staleAfter = 4*cycle + 50*time.Millisecond
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	man, err := d.read(regManufacturer)
	if err != nil {
		return nil, err
	}
	die, err := d.read(regDieID)
	if err != nil {
		return nil, err
	}
	if man != ina226Manufacturer || die>>4 != ina226DieID>>4 {
		return nil, fmt.Errorf("ina2xx: %s: %w: manufacturer %#04x, die %#04x; want %#04x, %#04x", d, ErrWrongDevice, man, die, ina226Manufacturer, ina226DieID)
	}
	if err := d.configure(word, 0x0fff); err != nil {
		return nil, err
	}
	return d, nil
}

// word encodes the configuration register and returns the time of one
// shunt-and-bus conversion cycle.
func (cfg INA226Config) word() (uint16, time.Duration, error) {
	n, ct := cfg.Averages, cfg.ConversionTime
	if n == 0 {
		n = 16
	}
	if ct == 0 {
		ct = 1100 * time.Microsecond
	}
	avg, tc := -1, -1
	for i, v := range ina226Averages {
		if v == n {
			avg = i
		}
	}
	for i, v := range ina226Times {
		if v == ct {
			tc = i
		}
	}
	switch {
	case avg < 0:
		return 0, 0, fmt.Errorf("%w: %d averages, want one of %v", ErrConfig, cfg.Averages, ina226Averages)
	case tc < 0:
		return 0, 0, fmt.Errorf("%w: conversion time %s, want one of %v", ErrConfig, cfg.ConversionTime, ina226Times)
	}
	w := uint16(ina226Fixed | avg<<9 | tc<<6 | tc<<3 | ina226Mode)
	return w, 2 * time.Duration(n) * ct, nil
}

// decodeBus226 decodes the bus voltage register.
func decodeBus226(raw uint16) (float64, error) {
	if raw&0x8000 != 0 {
		return 0, fmt.Errorf("%w: bus voltage register %#04x has bit 15 set", ErrBadReading, raw)
	}
	return float64(raw) * ina226BusLSB, nil
}

// decodeMask226 decodes the mask/enable register: whether a conversion
// finished since it was last read, and the overflow flag as an error.
func decodeMask226(raw uint16) (ready bool, err error) {
	ready = raw&ina226CVRF != 0
	if raw&ina226OVF != 0 {
		return ready, fmt.Errorf("%w: mask/enable register %#04x has OVF set", ErrOverflow, raw)
	}
	return ready, nil
}

// decodeShunt226 decodes the shunt voltage register; the two ends of its
// range mean the ADC saturated.
func decodeShunt226(raw uint16) (float64, error) {
	v := int16(raw)
	if v == 0x7fff || v == -0x8000 {
		return 0, fmt.Errorf("%w: shunt voltage at the end of its ±81.92 mV range", ErrOverflow)
	}
	return float64(v) * ina226ShuntLSB, nil
}

// String names the chip and its connection.
func (d *INA226) String() string { return d.dev.String() }

// busLocked reads the flags, then the bus voltage, so the voltage is at
// least as new as the conversion the flags report. Call with mu held.
func (d *INA226) busLocked() (float64, time.Time, error) {
	mask, err := d.read(regMaskEnable)
	if err != nil {
		return 0, time.Time{}, err
	}
	raw, err := d.read(regBus)
	if err != nil {
		return 0, time.Time{}, err
	}
	now := time.Now()
	ready, err := decodeMask226(mask)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("ina2xx: %s: %w", d, err)
	}
	v, err := decodeBus226(raw)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("ina2xx: %s: %w", d, err)
	}
	if err := d.converted(ready, now); err != nil {
		return 0, time.Time{}, err
	}
	return v, now, nil
}
