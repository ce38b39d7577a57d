package pca9685

import (
	"cmp"
	"fmt"
	"math"
	"sync"
	"time"

	"periph.io/x/conn/v3/i2c"
)

// DefaultAddr is the board's I2C address with no address jumper bridged.
const DefaultAddr = 0x40

// DefaultFrequency is the PWM frequency for hobby servos: 50 Hz.
const DefaultFrequency = 50.0

// DefaultOscillatorHz is the chip's internal oscillator, nominally 25 MHz.
// Real chips are off by a few percent; see Options.OscillatorHz.
const DefaultOscillatorHz = 25e6

// maxOscillatorHz is the fastest external clock the chip accepts.
const maxOscillatorHz = 50e6

// wakeDelay is how long the oscillator needs after SLEEP is cleared.
const wakeDelay = 500 * time.Microsecond

// Options configure a board. The zero value is a board at 0x40 running at
// 50 Hz from the nominal 25 MHz oscillator.
type Options struct {
	// Addr is the 7-bit I2C address, 0x40..0x7F (A0..A5 jumpers add 1, 2,
	// 4, ... 32). 0 means DefaultAddr.
	Addr uint16
	// Frequency is the PWM frequency in Hz, shared by all 16 channels;
	// 0 means DefaultFrequency (50 Hz). With the nominal oscillator,
	// 24..1526 Hz can be set.
	Frequency float64
	// OscillatorHz is the chip's clock, for calibration: measure the pulse
	// of a channel with a scope or logic analyser and scale 25 MHz by
	// measured/expected width. 0 means DefaultOscillatorHz; also set it to
	// the external clock's frequency if the board has one on EXTCLK.
	OscillatorHz float64
}

// Board is one PCA9685 on an I2C bus. Its methods and those of its channels
// are safe for concurrent use: one mutex serialises every transaction to
// the chip, so a Set on one channel never interleaves with another's.
type Board struct {
	bus      i2c.Bus
	addr     uint16
	name     string
	osc      float64
	prescale uint8

	mu     sync.Mutex
	used   [Channels]bool
	closed bool
}

// Open finds and configures the chip at opts.Addr on bus and returns the
// board. It fails if nothing answers at the address, if the device there
// does not behave like a PCA9685, or if the configuration does not read
// back: a missing or wrong board is found here, not at the first Set.
//
// Open never moves an output. If the chip already runs as configured (the
// supervisor restarted), only reads are made and every channel keeps its
// pulse. Otherwise (power-on, or another frequency) every channel is put
// full off before the prescaler is changed, because an old pulse would mean
// another position at the new period; a chip fresh from power-on has every
// channel full off already. See the package documentation for the register
// sequence.
func Open(bus i2c.Bus, opts Options) (*Board, error) {
	name := fmt.Sprintf("pca9685 %#02x", opts.withDefaults().Addr)
	if bus != nil {
		name += " on " + bus.String()
	}
	if bus == nil {
		return nil, fmt.Errorf("pca9685: %s: %w: no bus", name, ErrConfig)
	}
	b, err := newBoard(opts)
	if err != nil {
		return nil, fmt.Errorf("pca9685: %s: %w", name, err)
	}
	b.bus, b.name = bus, name
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.init(); err != nil {
		return nil, err
	}
	return b, nil
}

func (o Options) withDefaults() Options {
	o.Addr = cmp.Or(o.Addr, DefaultAddr)
	o.Frequency = cmp.Or(o.Frequency, DefaultFrequency)
	o.OscillatorHz = cmp.Or(o.OscillatorHz, DefaultOscillatorHz)
	return o
}

// newBoard checks opts and returns a board without a bus.
func newBoard(opts Options) (*Board, error) {
	opts = opts.withDefaults()
	switch {
	case opts.Addr < 0x40 || opts.Addr > 0x7F:
		return nil, fmt.Errorf("%w: address %#02x outside 0x40..0x7f", ErrConfig, opts.Addr)
	case !finite(opts.OscillatorHz) || opts.OscillatorHz <= 0 || opts.OscillatorHz > maxOscillatorHz:
		return nil, fmt.Errorf("%w: oscillator %g Hz outside (0, %g]", ErrConfig, opts.OscillatorHz, maxOscillatorHz)
	}
	ps, err := prescaleFor(opts.OscillatorHz, opts.Frequency)
	if err != nil {
		return nil, err
	}
	return &Board{addr: opts.Addr, osc: opts.OscillatorHz, prescale: ps}, nil
}

// Check reports whether Open would accept opts, and Servo cal on such a
// board (cal nil: no servo), without a chip: a configuration is checked
// before anything is opened. Its errors wrap ErrConfig.
func Check(opts Options, cal *ServoCalibration) error {
	b, err := newBoard(opts)
	if err != nil || cal == nil {
		return err
	}
	_, err = b.servoMap(*cal)
	return err
}

// prescaleFor returns PRE_SCALE for a frequency: round(osc / (4096 f)) - 1,
// which must lie in 3..255.
func prescaleFor(osc, freq float64) (uint8, error) {
	lo := osc / (steps * 256)
	hi := osc / (steps * (minPrescale + 1))
	if !finite(freq) || freq <= 0 {
		return 0, fmt.Errorf("%w: frequency %g Hz", ErrConfig, freq)
	}
	p := math.Round(osc/(steps*freq)) - 1
	if p < minPrescale || p > 255 {
		return 0, fmt.Errorf("%w: frequency %g Hz outside %.1f..%.1f Hz for a %g Hz oscillator", ErrConfig, freq, lo, hi, osc)
	}
	return uint8(p), nil
}

// init checks the device and configures it. Call with mu held.
func (b *Board) init() error {
	mode1, err := b.read(regMode1)
	if err != nil {
		return fmt.Errorf("%w (is the board powered, its address right? try i2cdetect)", err)
	}
	mode2, err := b.read(regMode2)
	if err != nil {
		return err
	}
	ps, err := b.read(regPrescale)
	if err != nil {
		return err
	}
	if mode2&mode2Rsvd != 0 || ps < minPrescale {
		return fmt.Errorf("pca9685: %s: %w: MODE2 %#02x, PRE_SCALE %d", b, ErrWrongDevice, mode2, ps)
	}
	if mode1&(mode1Sleep|mode1AI) == mode1AI && mode2 == mode2Default && ps == b.prescale {
		return nil // running as configured: keep every output as it is
	}
	for _, w := range [][]byte{
		{regAllOffH, ledFull},                              // every channel full off
		{regMode1, mode1&mode1Addr | mode1Sleep | mode1AI}, // oscillator off
		{regPrescale, b.prescale},                          // only writable asleep
		{regMode2, mode2Default},
		{regMode1, mode1&mode1Addr | mode1AI}, // wake
	} {
		if err := b.write(w...); err != nil {
			return err
		}
	}
	time.Sleep(wakeDelay)
	if mode1, err = b.read(regMode1); err != nil {
		return err
	}
	if mode1&mode1Restart != 0 {
		// Channels that were running when SLEEP was set wait for a 1 in
		// RESTART; all are full off now, so restarting moves nothing and
		// clears the flag.
		if err := b.write(regMode1, mode1&^mode1Sleep|mode1Restart); err != nil {
			return err
		}
		if mode1, err = b.read(regMode1); err != nil {
			return err
		}
	}
	if mode2, err = b.read(regMode2); err != nil {
		return err
	}
	if ps, err = b.read(regPrescale); err != nil {
		return err
	}
	if mode1&(mode1Sleep|mode1AI|mode1Restart) != mode1AI || mode2 != mode2Default || ps != b.prescale {
		return fmt.Errorf("pca9685: %s: %w: reads back MODE1 %#02x MODE2 %#02x PRE_SCALE %d, want MODE1 awake with auto-increment, MODE2 %#02x, PRE_SCALE %d",
			b, ErrWrongDevice, mode1, mode2, ps, mode2Default, b.prescale)
	}
	return nil
}

// String names the board by address and bus.
func (b *Board) String() string { return b.name }

// Addr returns the board's I2C address.
func (b *Board) Addr() uint16 { return b.addr }

// Prescale returns the PRE_SCALE value the chip runs with.
func (b *Board) Prescale() uint8 { return b.prescale }

// Frequency returns the PWM frequency the chip produces, in Hz:
// oscillator / (4096 * (PRE_SCALE + 1)). It differs a little from the one
// asked for (50.03 Hz for 50 at 25 MHz) because the prescaler is an integer.
func (b *Board) Frequency() float64 { return b.osc / (steps * (float64(b.prescale) + 1)) }

// Period returns the PWM period, 1/Frequency, to the nanosecond.
func (b *Board) Period() time.Duration {
	return time.Duration(math.Round(1e9 * steps * (float64(b.prescale) + 1) / b.osc))
}

// ticksFor returns a pulse width in counts of the chip's 4096-step period,
// unrounded.
func (b *Board) ticksFor(width time.Duration) float64 {
	return float64(width) * b.osc / (1e9 * (float64(b.prescale) + 1))
}

// widthFor is the inverse of ticksFor.
func (b *Board) widthFor(ticks int) time.Duration {
	return time.Duration(math.Round(float64(ticks) * 1e9 * (float64(b.prescale) + 1) / b.osc))
}

// claim reserves a channel for one output.
func (b *Board) claim(ch int) error {
	if ch < 0 || ch >= Channels {
		return fmt.Errorf("pca9685: %s: %w: channel %d outside 0..15", b, ErrConfig, ch)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return fmt.Errorf("pca9685: %s: channel %d: %w", b, ch, ErrClosed)
	case b.used[ch]:
		return fmt.Errorf("pca9685: %s: %w: channel %d already in use", b, ErrConfig, ch)
	}
	b.used[ch] = true
	return nil
}

// HaltAll puts all 16 channels full off with one write to ALL_LED_OFF_H,
// including channels no Servo or PWM of this Board drives: the board-wide
// detach. It works after Close too, and makes one attempt.
func (b *Board) HaltAll() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.write(regAllOffH, ledFull); err != nil {
		return fmt.Errorf("halt all: %w", err)
	}
	return nil
}

// Close releases the board: Set on its channels fails with ErrClosed (and
// ErrNotApplied) from then on, and no channel can be opened. It writes
// nothing — every output keeps its pulse — because the supervisor parks
// each actuator at its own safe policy before closing, and a "hold" policy
// must not be undone here. Use HaltAll to stop every pulse. Halt still
// works after Close. Close does not close the bus, which the caller owns.
func (b *Board) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

// checkAwake reads MODE1 and fails with ErrChipReset if the chip is asleep
// or lost its auto-increment: it was reset since Open. Call with mu held.
func (b *Board) checkAwake() error {
	m, err := b.read(regMode1)
	if err != nil {
		return err
	}
	if m&(mode1Sleep|mode1AI) != mode1AI {
		return fmt.Errorf("pca9685: %s: %w: MODE1 %#02x", b, ErrChipReset, m)
	}
	return nil
}

// readLED reads a channel's four registers in one transaction. Call with
// mu held.
func (b *Board) readLED(ch int) ([4]byte, error) {
	var r [4]byte
	reg := ledReg(ch)
	if err := b.bus.Tx(b.addr, []byte{reg}, r[:]); err != nil {
		return r, fmt.Errorf("pca9685: %s: read channel %d (register %#02x): %w: %w", b, ch, reg, ErrBus, err)
	}
	return r, nil
}

// read reads one register. Call with mu held.
func (b *Board) read(reg byte) (byte, error) {
	var r [1]byte
	if err := b.bus.Tx(b.addr, []byte{reg}, r[:]); err != nil {
		return 0, fmt.Errorf("pca9685: %s: read register %#02x: %w: %w", b, reg, ErrBus, err)
	}
	return r[0], nil
}

// write writes w[1:] from register w[0] on, auto-incrementing. Call with
// mu held.
func (b *Board) write(w ...byte) error {
	if err := b.bus.Tx(b.addr, w, nil); err != nil {
		return fmt.Errorf("pca9685: %s: write register %#02x: %w: %w", b, w[0], ErrBus, err)
	}
	return nil
}
