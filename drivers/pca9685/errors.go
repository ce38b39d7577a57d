package pca9685

import (
	"errors"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// Errors returned by this package, for errors.Is. Every error names the
// board (address and bus) and, where there is one, the channel.
var (
	// ErrConfig is a configuration this package refuses: an address,
	// frequency or oscillator out of range, a channel outside 0..15 or
	// already in use, an empty or inverted calibration.
	ErrConfig = errors.New("pca9685: invalid configuration")
	// ErrBus is a failed I2C transaction. Set errors that wrap it also wrap
	// actuators.ErrLinkLost.
	ErrBus = errors.New("pca9685: i2c transaction failed")
	// ErrWrongDevice is a device at the address that does not behave like a
	// PCA9685: reserved bits set, a prescaler below the chip's minimum, or
	// a configuration that does not read back as written.
	ErrWrongDevice = errors.New("pca9685: not a PCA9685")
	// ErrChipReset is a chip found asleep (or with auto-increment off)
	// after Open configured it: it lost power or someone else reset it, so
	// every output is off and the prescaler is back at its default. Open
	// the board again.
	ErrChipReset = errors.New("pca9685: chip asleep or reset since Open")
	// ErrInvalidValue is a value an output refuses; nothing was written.
	// It comes wrapped together with actuators.ErrNotApplied.
	ErrInvalidValue = errors.New("pca9685: invalid value")
	// ErrBadReading is a channel register value this package never writes
	// and a servo cannot be read from (reserved bits set, full on).
	ErrBadReading = errors.New("pca9685: unexpected channel registers")
	// ErrClosed is a Set on a channel of a closed board.
	ErrClosed = errors.New("pca9685: board closed")
	// ErrNotDriven is returned by Servo.ReadBack while the channel is full
	// off (never driven since power-on, or halted): no pulse, no angle. It
	// wraps actuators.ErrNoReading.
	ErrNotDriven error = notDriven{}
)

// notDriven is ErrNotDriven's type: a sentinel that also matches
// actuators.ErrNoReading under errors.Is.
type notDriven struct{}

func (notDriven) Error() string { return "pca9685: channel full off, no pulse" }
func (notDriven) Unwrap() error { return actuators.ErrNoReading }
