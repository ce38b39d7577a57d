package sim_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/actuators/actuatorstest"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
)

// nonFinite is refused by every simulated device before it touches the
// world.
var nonFinite = []float64{math.NaN(), math.Inf(1), math.Inf(-1)}

// faulty is what every simulated device has: its fault injection.
type faulty interface {
	actuators.Driver
	LoseLink(applied bool)
	RestoreLink()
	FailAlways()
	Clear()
}

// world opens a world file of the test's own and closes it when the test
// ends.
func world(t *testing.T) *sim.World {
	t.Helper()
	w, err := sim.OpenWorld(filepath.Join(t.TempDir(), "world.sim"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// instance wraps a device with its faults: Break loses the link (the Set
// does not take effect, but its error is in doubt), Refuse fails every Set
// without effect, Close closes the world.
func instance(w *sim.World, d faulty) actuatorstest.Instance {
	return actuatorstest.Instance{
		Driver: d,
		Break: func() func() {
			d.LoseLink(false)
			return d.RestoreLink
		},
		Refuse: func() func() {
			d.FailAlways()
			return d.Clear
		},
		Close: w.Close,
	}
}

func TestConformanceServo(t *testing.T) {
	actuatorstest.Run(t, actuatorstest.Subject{
		New: func(t *testing.T) actuatorstest.Instance {
			w := world(t)
			return instance(w, w.Servo("arm", 0, 0)) // slew 0: at the command at once
		},
		Kind: actuators.Servo,
		Min:  -90, Max: 90,
		Values:   []float64{-90, -12.5, 0, 45.001, 90},
		ReadBack: true,
		// A halted servo stays where it physically is.
		AfterHalt:       actuatorstest.HaltHolds,
		OutOfRange:      nonFinite,
		HaltWhileBroken: true,
	})
}

func TestConformanceDigital(t *testing.T) {
	actuatorstest.Run(t, actuatorstest.Subject{
		New: func(t *testing.T) actuatorstest.Instance {
			w := world(t)
			return instance(w, w.Digital("relay", 0))
		},
		Kind: actuators.Digital,
		Min:  0, Max: 1,
		Values:          []float64{0, 1},
		ReadBack:        true,
		AfterHalt:       actuatorstest.HaltInert,
		Inert:           0,
		OutOfRange:      append([]float64{0.5, -1, 2}, nonFinite...),
		HaltWhileBroken: true,
	})
}

func TestConformanceSetpoint(t *testing.T) {
	actuatorstest.Run(t, actuatorstest.Subject{
		New: func(t *testing.T) actuatorstest.Instance {
			w := world(t)
			return instance(w, w.Setpoint("duty", 0))
		},
		Kind: actuators.PWM,
		Min:  0, Max: 1,
		Values:          []float64{0, 0.25, 0.999, 1},
		ReadBack:        true,
		AfterHalt:       actuatorstest.HaltHolds,
		OutOfRange:      nonFinite,
		HaltWhileBroken: true,
	})
}

func TestConformancePulse(t *testing.T) {
	actuatorstest.Run(t, actuatorstest.Subject{
		New: func(t *testing.T) actuatorstest.Instance {
			w := world(t)
			return instance(w, w.Pulse("kicker"))
		},
		Kind: actuators.Pulse,
		Min:  0, Max: 1,
		Values:          []float64{0, 0.5, 1},
		OutOfRange:      nonFinite,
		HaltWhileBroken: true,
	})
}

func TestConformanceSupply(t *testing.T) {
	actuatorstest.RunSupply(t, actuatorstest.SupplySubject{
		New: func(t *testing.T) actuatorstest.SupplyInstance {
			w := world(t)
			s := w.Supply("battery", 12.6)
			return actuatorstest.SupplyInstance{
				Source: s,
				Volts:  12.6,
				SetVolts: func(v float64) {
					if err := s.SetVolts(v); err != nil {
						t.Error(err)
					}
				},
				Fail: func() func() {
					s.LoseLink(false)
					return s.RestoreLink
				},
				Close: w.Close,
			}
		},
		Others: []float64{11.1, 0, 24},
	})
}
