package gpio

import (
	"errors"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// Errors returned by this package, for errors.Is. Every error names the pin,
// chip or channel it is about.
var (
	// ErrConfig is a configuration this package refuses: an empty pin name,
	// an empty or inverted range, a negative duration.
	ErrConfig = errors.New("gpio: invalid configuration")
	// ErrPinNotFound is a pin name periph does not know on this machine.
	ErrPinNotFound = errors.New("gpio: pin not found")
	// ErrInvalidValue is a value an output refuses; nothing was written.
	ErrInvalidValue = errors.New("gpio: invalid value")
	// ErrNotDriven is returned by Servo.ReadBack while the servo is not being
	// driven (never commanded since start, or detached): there is no
	// commanded angle to report. It wraps actuators.ErrNoReading, so the
	// supervisor shows it without counting it against readiness.
	ErrNotDriven error = notDriven{}
	// ErrPressed is the e-stop's readiness error while it is pressed.
	ErrPressed = errors.New("gpio: e-stop pressed")
	// ErrClosed is returned by an EStop after Close.
	ErrClosed = errors.New("gpio: closed")
	// ErrNoPWMChip is a PWM chip or channel the kernel does not have.
	ErrNoPWMChip = errors.New("gpio: no such PWM chip or channel")
	// ErrExportTimeout is a PWM channel that did not appear (or did not
	// become writable) in time after being exported.
	ErrExportTimeout = errors.New("gpio: PWM channel did not appear after export")
	// ErrBadSysfs is a sysfs PWM file whose content is not what the kernel
	// writes, or a period that is not the servo's.
	ErrBadSysfs = errors.New("gpio: unexpected sysfs PWM state")
)

// notDriven is ErrNotDriven's type: a sentinel that also matches
// actuators.ErrNoReading under errors.Is, with a message that does not
// repeat it.
type notDriven struct{}

func (notDriven) Error() string { return "gpio: servo not driven" }
func (notDriven) Unwrap() error { return actuators.ErrNoReading }
