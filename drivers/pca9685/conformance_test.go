package pca9685_test

import (
	"errors"
	"math"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/actuators/actuatorstest"
	"github.com/saga-supervisor/saga-supervisor/drivers/pca9685/pca9685test"
)

// breakBus makes every register write fail after its bytes may have
// reached the chip — a failed write is in doubt — until restored. Reads
// still work: a Set whose first read (the MODE1 check) fails has written
// nothing, and the driver rightly says so (not applied).
func breakBus(c *pca9685test.Chip) func() func() {
	return func() func() {
		c.Fault = func(w, _ []byte) (bool, error) {
			if len(w) > 1 {
				return true, errors.New("i2c: remote I/O error")
			}
			return true, nil
		}
		return func() { c.Fault = nil }
	}
}

// The servo on a channel passes the conformance suite every actuator kind
// passes (actuators/actuatorstest), on the register model of the chip.
func TestConformanceServo(t *testing.T) {
	actuatorstest.Run(t, actuatorstest.Subject{
		New: func(t *testing.T) actuatorstest.Instance {
			b, c := pca9685test.Open(t)
			s, err := b.Servo(3, pca9685test.Calibration)
			if err != nil {
				t.Fatal(err)
			}
			return actuatorstest.Instance{Driver: s, Break: breakBus(c), Close: b.Close}
		},
		Kind: actuators.Servo, Min: -90, Max: 90, Values: []float64{-90, -45.5, 0, 30, 90},
		ReadBack:   true,
		Tolerance:  0.5, // one count of 20 ms / 4096 is 0.44° on this calibration
		AfterHalt:  actuatorstest.HaltNoReading,
		OutOfRange: []float64{math.NaN(), math.Inf(1), math.Inf(-1), 90.001, -90.001},
	})
}

// A duty-cycle channel: off is a value (0), not "no reading".
func TestConformancePWM(t *testing.T) {
	actuatorstest.Run(t, actuatorstest.Subject{
		New: func(t *testing.T) actuatorstest.Instance {
			b, c := pca9685test.Open(t)
			p, err := b.PWM(7)
			if err != nil {
				t.Fatal(err)
			}
			return actuatorstest.Instance{Driver: p, Break: breakBus(c), Close: b.Close}
		},
		Kind: actuators.PWM, Min: 0, Max: 1, Values: []float64{0, 0.25, 0.5, 1},
		ReadBack:  true,
		Tolerance: 1.0 / 4096,
		AfterHalt: actuatorstest.HaltInert, Inert: 0,
		OutOfRange: []float64{math.NaN(), math.Inf(1), -0.001, 1.001},
	})
}
