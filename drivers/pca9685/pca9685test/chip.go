// Package pca9685test is an in-memory PCA9685 for tests: Chip implements
// periph's i2c.Bus and the chip's registers as the data sheet describes
// them, so a pca9685.Board opens on it and a Set reads back for real.
// NewServo and NewPWM give a ready output on a fresh Chip, for the
// actuator conformance suite and other packages' tests.
//
// What Chip models: power-on values (MODE1 0x11 asleep, MODE2 0x04,
// PRE_SCALE 30, every channel full off); auto-increment when MODE1's AI
// bit is set (past LED15_OFF_H and past PRE_SCALE it rolls over to MODE1),
// otherwise every byte goes to the one register; PRE_SCALE written only
// while asleep and never below 3; EXTCLK sticky; RESTART set when a chip
// with a running channel is put to sleep and cleared by writing 1; reserved
// bits read 0; ALL_LED_* writes reaching every channel and reading 0.
// What it does not: the oscillator, the outputs' timing, sub-addresses and
// the all-call address, TestMode.
package pca9685test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/drivers/pca9685"
	"periph.io/x/conn/v3/i2c/i2ctest"
	"periph.io/x/conn/v3/physic"
)

// ErrNAK is the error of a transaction nobody answers: the address is not
// the chip's, or the chip is Absent.
var ErrNAK = errors.New("pca9685test: no acknowledge (remote I/O error)")

// Chip is an in-memory PCA9685. The zero value is not usable; call New.
type Chip struct {
	mu   sync.Mutex
	addr uint16
	reg  [256]byte
	ptr  byte
	ops  []i2ctest.IO

	// Absent makes the chip NAK every transaction, as an unplugged board.
	Absent bool
	// Fault, when set, is called before every transaction with its write
	// and read buffers. A non-nil err fails the transaction; applied says
	// whether its bytes reached the registers first (a failure after the
	// data went out, leaving the caller in doubt).
	Fault func(w, r []byte) (applied bool, err error)
}

// New returns a chip at addr (0 means pca9685.DefaultAddr), as after
// power-on.
func New(addr uint16) *Chip {
	if addr == 0 {
		addr = pca9685.DefaultAddr
	}
	c := &Chip{addr: addr}
	c.PowerOn()
	return c
}

// PowerOn resets every register to its power-on value, as a power cycle.
func (c *Chip) PowerOn() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reg = [256]byte{}
	c.reg[0x00] = 0x11 // SLEEP, ALLCALL
	c.reg[0x01] = 0x04 // OUTDRV
	c.reg[0x02], c.reg[0x03], c.reg[0x04], c.reg[0x05] = 0xE2, 0xE4, 0xE8, 0xE0
	for ch := 0; ch < pca9685.Channels; ch++ {
		c.reg[0x06+4*ch+3] = 0x10 // full off
	}
	c.reg[0xFE] = 0x1E
	c.ptr = 0
}

// String implements i2c.Bus.
func (c *Chip) String() string { return "pca9685test" }

// SetSpeed implements i2c.Bus.
func (c *Chip) SetSpeed(physic.Frequency) error { return nil }

// Tx implements i2c.Bus: the first byte written sets the register pointer,
// further bytes are written from it on, then r is read from it on.
func (c *Chip) Tx(addr uint16, w, r []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if addr != c.addr || c.Absent {
		return fmt.Errorf("%w at %#02x", ErrNAK, addr)
	}
	apply := true
	var ferr error
	if c.Fault != nil {
		apply, ferr = c.Fault(w, r)
		if ferr == nil {
			apply = true
		}
	}
	if apply {
		c.ops = append(c.ops, i2ctest.IO{Addr: addr, W: slices.Clone(w)})
		if len(w) > 0 {
			c.ptr = w[0]
			for _, v := range w[1:] {
				c.store(c.ptr, v)
				c.ptr = c.next(c.ptr)
			}
		}
		if ferr == nil {
			for i := range r {
				r[i] = c.reg[c.ptr]
				c.ptr = c.next(c.ptr)
			}
			c.ops[len(c.ops)-1].R = slices.Clone(r)
		}
	}
	return ferr
}

// next is the register after reg: the same without auto-increment.
func (c *Chip) next(reg byte) byte {
	switch {
	case c.reg[0]&0x20 == 0:
		return reg
	case reg == 0x45, reg >= 0xFE:
		return 0
	}
	return reg + 1
}

// store writes one register as the chip does.
func (c *Chip) store(reg, v byte) {
	switch {
	case reg == 0x00:
		old := c.reg[0]
		nv := v&^0xC0 | old&0x40 // EXTCLK is sticky
		if old&0x80 != 0 && v&0x80 == 0 {
			nv |= 0x80 // writing 0 to RESTART leaves it
		}
		if old&0x10 == 0 && v&0x10 != 0 && c.running() {
			nv |= 0x80
		}
		c.reg[0] = nv
	case reg == 0x01:
		c.reg[1] = v & 0x1F
	case reg >= 0x06 && reg <= 0x45:
		if (reg-0x06)%2 == 1 { // ON_H or OFF_H
			v &= 0x1F
		}
		c.reg[reg] = v
	case reg >= 0xFA && reg <= 0xFD: // ALL_LED_*: every channel, reads 0
		if reg%2 == 1 {
			v &= 0x1F
		}
		for ch := 0; ch < pca9685.Channels; ch++ {
			c.reg[0x06+4*ch+int(reg-0xFA)] = v
		}
	case reg == 0xFE:
		if c.reg[0]&0x10 != 0 {
			c.reg[0xFE] = max(v, 3)
		}
	case reg >= 0x02 && reg <= 0x05:
		c.reg[reg] = v
	}
}

// running reports whether some channel is not full off.
func (c *Chip) running() bool {
	for ch := 0; ch < pca9685.Channels; ch++ {
		if c.reg[0x06+4*ch+3]&0x10 == 0 {
			return true
		}
	}
	return false
}

// Reg returns one register's content.
func (c *Chip) Reg(reg byte) byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reg[reg]
}

// SetReg writes a register behind the driver's back (bypassing the chip's
// write rules), e.g. to play another program or a corrupted register.
func (c *Chip) SetReg(reg, v byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reg[reg] = v
}

// LED returns a channel's four registers: ON_L, ON_H, OFF_L, OFF_H.
func (c *Chip) LED(ch int) [4]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b [4]byte
	copy(b[:], c.reg[0x06+4*ch:])
	return b
}

// Ops returns every transaction that reached the chip, in order: the bytes
// written and, for reads, the bytes returned.
func (c *Chip) Ops() []i2ctest.IO {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ops)
}

// Writes returns the write-only transactions (register pointer and data),
// in order: what the driver changed.
func (c *Chip) Writes() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]byte
	for _, op := range c.ops {
		if len(op.R) == 0 && len(op.W) > 1 {
			out = append(out, op.W)
		}
	}
	return out
}

// ResetOps forgets the transactions recorded so far.
func (c *Chip) ResetOps() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops = nil
}

// Calibration is a typical 180° servo: 500..2500 µs for -90..90°.
var Calibration = pca9685.ServoCalibration{MinPulse: 500_000, MaxPulse: 2_500_000, MinAngle: -90, MaxAngle: 90}

// Open opens a board at 50 Hz on a fresh chip at the default address.
func Open(tb testing.TB) (*pca9685.Board, *Chip) {
	tb.Helper()
	c := New(0)
	b, err := pca9685.Open(c, pca9685.Options{})
	if err != nil {
		tb.Fatalf("pca9685test: open: %v", err)
	}
	tb.Cleanup(func() { _ = b.Close() })
	return b, c
}

// NewServo returns channel 0 of a board on a fresh chip as a servo with
// cal (Calibration if cal is the zero value), and the chip. Set and
// ReadBack round-trip through the chip's registers.
func NewServo(tb testing.TB, cal pca9685.ServoCalibration) (*pca9685.Servo, *Chip) {
	tb.Helper()
	if cal == (pca9685.ServoCalibration{}) {
		cal = Calibration
	}
	b, c := Open(tb)
	s, err := b.Servo(0, cal)
	if err != nil {
		tb.Fatalf("pca9685test: servo: %v", err)
	}
	return s, c
}

// NewPWM returns channel 0 of a board on a fresh chip as a duty-cycle
// output, and the chip.
func NewPWM(tb testing.TB) (*pca9685.PWM, *Chip) {
	tb.Helper()
	b, c := Open(tb)
	p, err := b.PWM(0)
	if err != nil {
		tb.Fatalf("pca9685test: pwm: %v", err)
	}
	return p, c
}
