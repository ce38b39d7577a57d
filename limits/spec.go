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

// ParsePolicy parses "reject" or "clamp", the words of the configuration.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "reject":
		return Reject, nil
	case "clamp":
		return Clamp, nil
	}
	return Reject, fmt.Errorf("limits: unknown policy %q (want reject or clamp)", s)
}

// MarshalText writes the policy as its configuration word, so it reads the
// same in a config file, a reply and the journal.
func (p Policy) MarshalText() ([]byte, error) {
	if p > Clamp {
		return nil, fmt.Errorf("limits: invalid policy %d", uint8(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText is ParsePolicy for encoding packages.
func (p *Policy) UnmarshalText(b []byte) error {
	v, err := ParsePolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
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
	// Check treats any policy but Clamp as Reject, which is safe, but a
	// value from a newer config or a corrupt one should be reported, not
	// silently reinterpreted.
	if s.Policy > Clamp {
		return fmt.Errorf("limits: invalid policy %d", uint8(s.Policy))
	}
	if s.SupplyMaxVolts != 0 && s.SupplyMinVolts > s.SupplyMaxVolts {
		return fmt.Errorf("limits: supply min %g V > max %g V", s.SupplyMinVolts, s.SupplyMaxVolts)
	}
	// Voltage bounds with no supply would never be checked (the gate only
	// looks at supplies an actuator names): a silent no-op in a safety
	// config is a mistake worth stopping at start-up.
	if s.Supply == "" && (s.SupplyMinVolts != 0 || s.SupplyMaxVolts != 0) {
		return errors.New("limits: supply voltage bounds without a supply")
	}
	return nil
}
