package ina2xx

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"periph.io/x/conn/v3"
	"periph.io/x/conn/v3/physic"

	"github.com/saga-supervisor/saga-supervisor/actuators/actuatorstest"
)

// fakeChip is a register model of a chip on the bus, for the conformance
// suite: unlike a conntest.Playback, whose script fixes every transaction in
// advance, it answers any number of reads in any order, from any goroutine.
// The voltage, whether the chip converts and whether the bus works can be
// changed at any time.
type fakeChip struct {
	mu         sync.Mutex
	regs       map[byte]uint16
	volts      float64
	converting bool
	dead       bool
	// bus encodes the bus voltage register and status for the chip.
	bus func(c *fakeChip, reg byte) (uint16, bool)
}

func (c *fakeChip) String() string              { return "fakechip" }
func (c *fakeChip) Duplex() conn.Duplex         { return conn.Half }
func (c *fakeChip) Frequency() physic.Frequency { return 0 }

func (c *fakeChip) Tx(w, r []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return errors.New("i2c: remote I/O error")
	}
	switch {
	case len(w) == 3 && len(r) == 0:
		c.regs[w[0]] = uint16(w[1])<<8 | uint16(w[2])
	case len(w) == 1 && len(r) == 2:
		v, ok := c.bus(c, w[0])
		if !ok {
			v = c.regs[w[0]]
		}
		r[0], r[1] = byte(v>>8), byte(v)
	default:
		return errors.New("fakechip: unexpected transaction")
	}
	return nil
}

func (c *fakeChip) set(f func(c *fakeChip)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

// ina219Chip: the bus register holds volts in 4 mV steps from bit 3, with
// CNVR while the chip converts.
func ina219Chip(volts float64) *fakeChip {
	return &fakeChip{regs: map[byte]uint16{}, volts: volts, converting: true,
		bus: func(c *fakeChip, reg byte) (uint16, bool) {
			if reg != regBus {
				return 0, false
			}
			v := uint16(math.Round(c.volts/ina219BusLSB)) << 3
			if c.converting {
				v |= ina219CNVR
			}
			return v, true
		}}
}

// ina226Chip: identifies as an INA226; the bus register holds volts in
// 1.25 mV steps, and the mask/enable register has CVRF while converting.
func ina226Chip(volts float64) *fakeChip {
	return &fakeChip{regs: map[byte]uint16{regManufacturer: ina226Manufacturer, regDieID: ina226DieID}, volts: volts, converting: true,
		bus: func(c *fakeChip, reg byte) (uint16, bool) {
			switch reg {
			case regBus:
				return uint16(math.Round(c.volts / ina226BusLSB)), true
			case regMaskEnable:
				if c.converting {
					return ina226CVRF, true
				}
				return 0, true
			}
			return 0, false
		}}
}

// supplyInstance makes the monitor on chip. Fail is the chip that stops
// converting (its readings go stale: ErrStale after StaleAfter) when stale,
// or a dead bus (ErrBus) otherwise.
func supplyInstance(t *testing.T, chip *fakeChip, mon func() (actuatorstest.VoltSource, error), stale bool) actuatorstest.SupplyInstance {
	src, err := mon()
	if err != nil {
		t.Fatal(err)
	}
	return actuatorstest.SupplyInstance{
		Source:   src,
		Volts:    chip.volts,
		SetVolts: func(v float64) { chip.set(func(c *fakeChip) { c.volts = v }) },
		Fail: func() func() {
			if stale {
				chip.set(func(c *fakeChip) { c.converting = false })
				return func() { chip.set(func(c *fakeChip) { c.converting = true }) }
			}
			chip.set(func(c *fakeChip) { c.dead = true })
			return func() { chip.set(func(c *fakeChip) { c.dead = false }) }
		},
	}
}

func TestConformanceINA219(t *testing.T) {
	for name, stale := range map[string]bool{"stale": true, "dead_bus": false} {
		t.Run(name, func(t *testing.T) {
			actuatorstest.RunSupply(t, actuatorstest.SupplySubject{
				New: func(t *testing.T) actuatorstest.SupplyInstance {
					chip := ina219Chip(12.004)
					return supplyInstance(t, chip, func() (actuatorstest.VoltSource, error) {
						return NewINA219(chip, INA219Config{StaleAfter: 20 * time.Millisecond})
					}, stale)
				},
				Tolerance: ina219BusLSB / 2,
				Wait:      time.Second,
				Others:    []float64{11.1, 0, 26, 32.76},
			})
		})
	}
}

func TestConformanceINA226(t *testing.T) {
	for name, stale := range map[string]bool{"stale": true, "dead_bus": false} {
		t.Run(name, func(t *testing.T) {
			actuatorstest.RunSupply(t, actuatorstest.SupplySubject{
				New: func(t *testing.T) actuatorstest.SupplyInstance {
					chip := ina226Chip(12.5)
					return supplyInstance(t, chip, func() (actuatorstest.VoltSource, error) {
						return NewINA226(chip, INA226Config{StaleAfter: 20 * time.Millisecond})
					}, stale)
				},
				Tolerance: ina226BusLSB / 2,
				Wait:      time.Second,
				Others:    []float64{11.1, 0, 24, 40.95},
			})
		})
	}
}
