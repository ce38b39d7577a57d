package limits

import (
	"errors"
	"fmt"
	"math"
)

// Policy says what happens to a command over a limit.
type Policy uint8

const (
	// Reject refuses the command (the default).
	Reject Policy = iota
	// Clamp moves the value to the nearest allowed one; the verdict records
	// both the requested and the applied value.
	Clamp
)

func (p Policy) String() string {
	if p == Clamp {
		return "clamp"
	}
	return "reject"
}

// Spec holds the limits of one actuator. A zero MaxStep or MaxRate means no
// such limit. Min and Max are always enforced.
type Spec struct {
	Min, Max float64
	MaxStep  float64 // largest change from the previous command, in units
	MaxRate  float64 // largest change per second, in units/s
	Policy   Policy
	// Supply names the supply this actuator draws from ("" for none);
	// SupplyMinVolts/SupplyMaxVolts bound its voltage for this actuator
	// (0 means the supply's own bounds only).
	Supply         string
	SupplyMinVolts float64
	SupplyMaxVolts float64
}

// Validate reports a spec that cannot be enforced.
func (s Spec) Validate() error {
	for _, v := range []float64{s.Min, s.Max, s.MaxStep, s.MaxRate, s.SupplyMinVolts, s.SupplyMaxVolts} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return errors.New("limits: non-finite bound")
		}
	}
	if s.Min > s.Max {
		return fmt.Errorf("limits: min %g > max %g", s.Min, s.Max)
	}
	if s.MaxStep < 0 || s.MaxRate < 0 {
		return errors.New("limits: negative max_step or max_rate")
	}
	if s.SupplyMaxVolts != 0 && s.SupplyMinVolts > s.SupplyMaxVolts {
		return fmt.Errorf("limits: supply min %g V > max %g V", s.SupplyMinVolts, s.SupplyMaxVolts)
	}
	return nil
}
