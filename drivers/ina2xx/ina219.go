package ina2xx

import (
	"fmt"
	"time"

	"periph.io/x/conn/v3"
)

// INA219 register fields and scales (datasheet SBOS448).
const (
	ina219CNVR     = 1 << 1
	ina219OVF      = 1 << 0
	ina219BusLSB   = 4e-3  // volts
	ina219ShuntLSB = 10e-6 // volts
	ina219Mode     = 0b111 // shunt and bus, continuous
	ina219Sample   = 532 * time.Microsecond
	ina219BRNG32   = 1 << 13
)

// INA219Config configures an INA219. The zero value is the chip's widest
// ranges with 16-sample averaging and no current measurement.
type INA219Config struct {
	// ShuntOhms is the shunt resistor, e.g. 0.1; 0 means current is not
	// measured (Amps returns ErrNoShunt).
	ShuntOhms float64
	// ShuntRangeMillivolts is the shunt voltage full scale: 40, 80, 160 or
	// 320 (PGA gain /1../8); 0 means 320.
	ShuntRangeMillivolts int
	// BusRangeVolts is 16 or 32; 0 means 32.
	BusRangeVolts int
	// Averages is how many 12-bit samples each result averages: 1, 2, 4,
	// ..., 128; 0 means 16 (8.5 ms per result).
	Averages int
	// StaleAfter is how long without a finished conversion before readings
	// fail with ErrStale; 0 means four conversion cycles plus 50 ms. A
	// negative value turns the check off, for a chip (or clone) whose
	// conversion-ready flag does not work; a chip that stops converting then
	// goes unnoticed.
	StaleAfter time.Duration
}

// INA219 is a TI INA219 bus voltage and shunt monitor. Its methods are safe
// for concurrent use.
type INA219 struct {
	dev
	pga int // 0../8 as 0..3
}

// NewINA219 configures the INA219 at c (typically &i2c.Dev{Bus: bus, Addr:
// DefaultAddr}) and checks that it keeps the configuration: the chip has no
// ID register, so this is how a missing or different chip is noticed.
func NewINA219(c conn.Conn, cfg INA219Config) (*INA219, error) {
	d := &INA219{dev: dev{name: "INA219", c: c, shuntOhms: cfg.ShuntOhms}}
	d.bus = d.busLocked
	d.shunt = func(raw uint16) (float64, error) { return decodeShunt219(raw, d.pga) }
	if err := checkShunt(d.name, cfg.ShuntOhms); err != nil {
		return nil, err
	}
	word, cycle, err := cfg.word()
	if err != nil {
		return nil, fmt.Errorf("ina2xx: %s: %w", d.name, err)
	}
	d.pga = int(word>>11) & 0b11
	d.staleAfter = cfg.StaleAfter
	if d.staleAfter == 0 {
		d.staleAfter = 4*cycle + 50*time.Millisecond
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Bit 15 (reset) reads back 0.
	if err := d.configure(word, 0x7fff); err != nil {
		return nil, err
	}
	return d, nil
}

// word encodes the configuration register and returns the time of one
// shunt-and-bus conversion cycle.
func (cfg INA219Config) word() (uint16, time.Duration, error) {
	var w uint16 = ina219Mode
	switch cfg.BusRangeVolts {
	case 0, 32:
		w |= ina219BRNG32
	case 16:
	default:
		return 0, 0, fmt.Errorf("%w: bus range %d V, want 16 or 32", ErrConfig, cfg.BusRangeVolts)
	}
	mv := cfg.ShuntRangeMillivolts
	if mv == 0 {
		mv = 320
	}
	pga, ok := log2(mv / 40)
	if !ok || mv%40 != 0 || pga > 3 {
		return 0, 0, fmt.Errorf("%w: shunt range %d mV, want 40, 80, 160 or 320", ErrConfig, cfg.ShuntRangeMillivolts)
	}
	w |= uint16(pga) << 11
	n := cfg.Averages
	if n == 0 {
		n = 16
	}
	avg, ok := log2(n)
	if !ok || avg > 7 {
		return 0, 0, fmt.Errorf("%w: %d averages, want a power of two up to 128", ErrConfig, cfg.Averages)
	}
	// 0b1000 | log2(n) selects 12 bits averaged over n samples, for the
	// bus (bits 10..7) and the shunt (bits 6..3) alike.
	adc := uint16(0b1000 | avg)
	w |= adc<<7 | adc<<3
	return w, 2 * time.Duration(n) * ina219Sample, nil
}

// decodeBus219 decodes the bus voltage register: the voltage, and whether
// a conversion finished since the power register was last read.
func decodeBus219(raw uint16) (volts float64, ready bool, err error) {
	ready = raw&ina219CNVR != 0
	if raw&ina219OVF != 0 {
		return 0, ready, fmt.Errorf("%w: bus voltage register %#04x has OVF set (shunt beyond range)", ErrOverflow, raw)
	}
	return float64(raw>>3) * ina219BusLSB, ready, nil
}

// decodeShunt219 decodes the shunt voltage register at PGA setting pga
// (0..3 for ±40..±320 mV). A value at or beyond the range is an overflow.
func decodeShunt219(raw uint16, pga int) (float64, error) {
	v := int(int16(raw))
	full := 4000 << (pga & 3)
	if v >= full || v <= -full {
		return 0, fmt.Errorf("%w: shunt voltage %g mV at or beyond ±%d mV", ErrOverflow, float64(v)*ina219ShuntLSB*1e3, full/100)
	}
	return float64(v) * ina219ShuntLSB, nil
}

// String names the chip and its connection.
func (d *INA219) String() string { return d.dev.String() }

// busLocked reads the bus voltage and keeps the conversion watch. Call with
// mu held.
func (d *INA219) busLocked() (float64, time.Time, error) {
	raw, err := d.read(regBus)
	if err != nil {
		return 0, time.Time{}, err
	}
	now := time.Now()
	v, ready, err := decodeBus219(raw)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("ina2xx: %s: %w", d, err)
	}
	if ready {
		// Reading the power register clears CNVR, so the next look tells
		// whether another conversion finished.
		if _, err := d.read(regPower); err != nil {
			return 0, time.Time{}, err
		}
	}
	if err := d.converted(ready, now); err != nil {
		return 0, time.Time{}, err
	}
	return v, now, nil
}
