package gpio

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/actuators/actuatorstest"
)

var errBrokenPin = errors.New("fake pin: remote I/O error")

// Each subject runs on periph's fake pins, registered under the subtest's
// name, or on a fake sysfs tree in the subtest's temporary folder.

func TestConformanceOutput(t *testing.T) {
	for _, activeLow := range []bool{false, true} {
		name := "active_high"
		if activeLow {
			name = "active_low"
		}
		t.Run(name, func(t *testing.T) {
			actuatorstest.Run(t, actuatorstest.Subject{
				New: func(t *testing.T) actuatorstest.Instance {
					pin := newFailingPin(t, "relay")
					o, err := OpenOutput(OutputConfig{Pin: pin.Name(), ActiveLow: activeLow})
					if err != nil {
						t.Fatal(err)
					}
					return actuatorstest.Instance{
						Driver: o,
						// A failed pin write: Set (and Halt, which drives
						// the same pin) fail in doubt.
						Break: func() func() {
							pin.outErr = errBrokenPin
							return func() { pin.outErr = nil }
						},
					}
				},
				Kind: actuators.Digital,
				Min:  0, Max: 1,
				Values:     []float64{0, 1},
				ReadBack:   true,
				AfterHalt:  actuatorstest.HaltInert,
				Inert:      0,
				OutOfRange: []float64{0.5, -1, 2, math.NaN(), math.Inf(1), math.Inf(-1)},
			})
		})
	}
}

// pwmRefused is what a servo refuses before writing: angles outside the
// calibration, and values that are not finite.
var pwmRefused = []float64{90.001, -90.001, 1000, math.NaN(), math.Inf(1), math.Inf(-1)}

func TestConformancePinServo(t *testing.T) {
	actuatorstest.Run(t, actuatorstest.Subject{
		New: func(t *testing.T) actuatorstest.Instance {
			pin := newFailingPin(t, "servo")
			s, err := OpenPinServo(pin.Name(), sg90)
			if err != nil {
				t.Fatal(err)
			}
			return actuatorstest.Instance{
				Driver: s,
				// A failed PWM write; Halt detaches with Out, which works.
				Break: func() func() {
					pin.pwmErr = errBrokenPin
					return func() { pin.pwmErr = nil }
				},
			}
		},
		Kind: actuators.Servo,
		Min:  -90, Max: 90,
		Values:          []float64{-90, -45, 0, 12.5, 90},
		ReadBack:        true,
		AfterHalt:       actuatorstest.HaltNoReading,
		OutOfRange:      pwmRefused,
		HaltWhileBroken: true,
	})
}

func TestConformanceSysfsServo(t *testing.T) {
	actuatorstest.Run(t, actuatorstest.Subject{
		New: func(t *testing.T) actuatorstest.Instance {
			root := fakeChip(t, 0, 1)
			chip := filepath.Join(root, "pwmchip0")
			fakeChannel(t, chip, 0)
			s, err := OpenSysfsServo(SysfsConfig{Root: root, ExportTimeout: 30 * time.Millisecond}, sg90)
			if err != nil {
				t.Fatal(err)
			}
			return actuatorstest.Instance{
				Driver: s,
				// The channel unexported behind the driver's back, and no
				// kernel to export it again: the export times out, in
				// doubt. Restored by the kernel's files coming back.
				Break: func() func() {
					if err := os.RemoveAll(filepath.Join(chip, "pwm0")); err != nil {
						t.Fatal(err)
					}
					return func() { fakeChannel(t, chip, 0) }
				},
			}
		},
		Kind: actuators.Servo,
		Min:  -90, Max: 90,
		// ReadBack decodes the files: 12.3456° is not a whole nanosecond
		// of pulse, so it reads back within a nanosecond's worth.
		Values:     []float64{-90, -45, 0, 12.3456, 90},
		ReadBack:   true,
		Tolerance:  1e-3,
		AfterHalt:  actuatorstest.HaltNoReading,
		OutOfRange: pwmRefused,
	})
}
