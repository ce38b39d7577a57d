package limits

import (
	"errors"
	"fmt"
	"time"
)

// Action is what the supervisor does when a supply trips. Actions are
// ordered by severity, so the worst of several is their maximum.
//
// The zero Action is not valid: a supply spec that forgets its action is
// refused by NewSupply instead of quietly defaulting to the mildest one.
type Action uint8

// The actions, mildest first.
const (
	Warn   Action = iota + 1 // log and report; motion continues
	Refuse                   // refuse new commands on the supply's actuators
	Unwind                   // also unwind the open sagas that touched them
	Halt                     // halt the whole supervisor
)

var actionNames = [...]string{Warn: "warn", Refuse: "refuse", Unwind: "unwind", Halt: "halt"}

// Valid reports whether a is one of the four actions.
func (a Action) Valid() bool { return a >= Warn && a <= Halt }

func (a Action) String() string {
	if a.Valid() {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// ParseAction parses "warn", "refuse", "unwind" or "halt".
func ParseAction(s string) (Action, error) {
	for a := Warn; a <= Halt; a++ {
		if actionNames[a] == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("limits: unknown supply action %q (want warn, refuse, unwind or halt)", s)
}

// MarshalText writes the action as its configuration word.
func (a Action) MarshalText() ([]byte, error) {
	if !a.Valid() {
		return nil, fmt.Errorf("limits: invalid supply action %d", uint8(a))
	}
	return []byte(actionNames[a]), nil
}

// UnmarshalText is ParseAction for encoding packages.
func (a *Action) UnmarshalText(b []byte) error {
	v, err := ParseAction(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// SupplySpec configures the watch on one supply.
type SupplySpec struct {
	Name string
	// MinVolts and MaxVolts bound the supply; a reading outside them is a
	// violation. Both are always enforced.
	MinVolts, MaxVolts float64
	// HysteresisVolts narrows the band a tripped supply must return to
	// before it clears, to [MinVolts+Hysteresis, MaxVolts−Hysteresis], so a
	// rail hovering at a bound does not flap between tripped and clear.
	HysteresisVolts float64
	// Debounce is how long a violation must last before it trips, and how
	// long a tripped supply must stay inside the hysteresis band before it
	// clears. Zero trips and clears on a single reading.
	Debounce time.Duration
	// StaleAfter is how old the last valid reading may be before the supply
	// is stale. It must be positive: a sensor that stops reporting must not
	// leave its last good reading standing forever.
	StaleAfter time.Duration
	// Action is what the supervisor does on a trip.
	Action Action
}

// Validate reports a supply spec that cannot be enforced.
func (s SupplySpec) Validate() error {
	if s.Name == "" {
		return errors.New("limits: supply with no name")
	}
	for _, v := range []float64{s.MinVolts, s.MaxVolts, s.HysteresisVolts} {
		if !isFinite(v) {
			return fmt.Errorf("limits: supply %s: non-finite bound", s.Name)
		}
	}
	if s.HysteresisVolts < 0 {
		return fmt.Errorf("limits: supply %s: negative hysteresis %g V", s.Name, s.HysteresisVolts)
	}
	// The clear band must have width, or a tripped supply could never
	// clear (or would need an exact reading to).
	if !(s.MinVolts+s.HysteresisVolts < s.MaxVolts-s.HysteresisVolts) {
		return fmt.Errorf("limits: supply %s: no room to clear: [%g+%g, %g-%g] V is empty",
			s.Name, s.MinVolts, s.HysteresisVolts, s.MaxVolts, s.HysteresisVolts)
	}
	if s.Debounce < 0 {
		return fmt.Errorf("limits: supply %s: negative debounce %s", s.Name, s.Debounce)
	}
	if s.StaleAfter <= 0 {
		return fmt.Errorf("limits: supply %s: stale_after must be positive", s.Name)
	}
	if !s.Action.Valid() {
		return fmt.Errorf("limits: supply %s: invalid action %s", s.Name, s.Action)
	}
	return nil
}

// SupplyState is what a Supply reports at a given time.
type SupplyState struct {
	Name string // the supply's name
	// Known is false until the first valid reading.
	Known bool
	// Stale is true when the last valid reading is older than StaleAfter.
	Stale bool
	// Tripped is true from a debounced violation until the supply clears.
	Tripped bool
	// Volts is the last valid reading (0 when not Known) and At its time.
	Volts float64
	At    time.Time
	// Code is OK when the supply permits motion. Otherwise, in order of
	// precedence: SUPPLY_UNKNOWN (never read); SUPPLY_LOW or SUPPLY_HIGH
	// (tripped, and the latest fresh reading is still out of range);
	// SUPPLY_TRIPPED (tripped, latched, with the latest reading back in
	// range or stale); SUPPLY_STALE (not tripped but stale).
	Code Code
	// Cause is why the supply tripped (SUPPLY_LOW or SUPPLY_HIGH), set
	// while Tripped. It is the first cause: the latch keeps it even if the
	// rail later swings the other way.
	Cause Code
	// Since is when the present condition began: the trip time while
	// Tripped, the moment it went stale while Stale, otherwise when it was
	// last known good (first reading, end of a stale gap, or clear).
	Since time.Time
}

// Supply is the state machine watching one supply. It is not safe for
// concurrent use: its owner (the goroutine sampling the rail and the gate
// reading it) must hold a lock around Observe and State.
//
// Transitions happen only on readings: State reports staleness but never
// trips or clears. A trip therefore comes at most one sample period after
// the debounce time, and a rail whose readings stop is caught by staleness.
type Supply struct {
	spec SupplySpec

	observed bool
	volts    float64   // last valid reading
	at       time.Time // when it was taken
	goodAt   time.Time // Since for a supply that is neither tripped nor stale

	violating bool      // readings have been out of range since violStart
	violStart time.Time // first reading of the current violation

	tripped    bool
	cause      Code
	trippedAt  time.Time
	clearing   bool      // tripped, and readings in the clear band since clearStart
	clearStart time.Time // first reading of the current run in the band
}

// NewSupply returns a supply in the unknown state.
func NewSupply(spec SupplySpec) (*Supply, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return &Supply{spec: spec}, nil
}

// Spec returns the supply's spec.
func (s *Supply) Spec() SupplySpec { return s.spec }

// Observe feeds a reading taken at time at.
//
// A NaN or infinite reading is no reading: it does not refresh staleness,
// so a sensor that only returns garbage goes stale. It does break a run of
// good readings a tripped supply needs to clear, since the voltage was not
// known to be good. It does not end a violation being debounced: a sensor
// alternating between a low value and garbage must still trip.
//
// A reading older than the last valid one is ignored: the timers assume
// time moves forward. A gap longer than StaleAfter likewise breaks a run
// toward clearing but not a violation, for the same fail-safe reason.
func (s *Supply) Observe(volts float64, at time.Time) {
	if !isFinite(volts) {
		s.clearing = false
		return
	}
	if s.observed && at.Before(s.at) {
		return
	}
	gap := s.observed && at.Sub(s.at) > s.spec.StaleAfter
	if !s.observed || gap {
		s.goodAt = at
		s.clearing = false
	}
	s.observed, s.volts, s.at = true, volts, at

	if s.tripped {
		if volts >= s.spec.MinVolts+s.spec.HysteresisVolts && volts <= s.spec.MaxVolts-s.spec.HysteresisVolts {
			if !s.clearing {
				s.clearing, s.clearStart = true, at
			}
			if at.Sub(s.clearStart) >= s.spec.Debounce {
				s.tripped, s.cause, s.clearing = false, OK, false
				s.goodAt = at
			}
		} else {
			s.clearing = false
		}
		return
	}

	c := s.classify(volts)
	if c == OK {
		s.violating = false
		return
	}
	if !s.violating {
		s.violating, s.violStart = true, at
	}
	if at.Sub(s.violStart) >= s.spec.Debounce {
		s.tripped, s.cause, s.trippedAt = true, c, at
		s.violating, s.clearing = false, false
	}
}

// classify says whether v is below, above or inside [MinVolts, MaxVolts];
// the bounds themselves are inside, as everywhere in this package.
func (s *Supply) classify(v float64) Code {
	switch {
	case v < s.spec.MinVolts:
		return SupplyLow
	case v > s.spec.MaxVolts:
		return SupplyHigh
	}
	return OK
}

// State reports the supply at time now. A reading exactly StaleAfter old is
// still fresh. It does not change the supply.
func (s *Supply) State(now time.Time) SupplyState {
	st := SupplyState{Name: s.spec.Name}
	if !s.observed {
		st.Code = SupplyUnknown
		return st
	}
	st.Known, st.Volts, st.At = true, s.volts, s.at
	st.Stale = now.Sub(s.at) > s.spec.StaleAfter
	switch {
	case s.tripped:
		st.Tripped, st.Cause, st.Since = true, s.cause, s.trippedAt
		st.Code = SupplyTripped
		if !st.Stale {
			if c := s.classify(s.volts); c != OK {
				st.Code = c
			}
		}
	case st.Stale:
		st.Code, st.Since = SupplyStale, s.at.Add(s.spec.StaleAfter)
	default:
		st.Since = s.goodAt
	}
	return st
}

// CheckSupply decides whether an actuator with spec s may move given the
// state st of the supply it draws from. It returns OK to allow motion, or
// the first of, in order:
//
//   - OK at once when s names no supply: there is nothing to check.
//   - SUPPLY_UNKNOWN when st is for another supply (a wiring mistake must not
//     pass as a good reading), when st is not Known, or when its Volts is not
//     finite.
//   - st's code when st is Tripped (SUPPLY_TRIPPED if that code is not a
//     supply refusal, so a tripped state can never allow motion).
//   - SUPPLY_STALE when st is Stale.
//   - st's own code when it is not OK.
//   - SUPPLY_LOW or SUPPLY_HIGH when st.Volts is outside the actuator's own
//     SupplyMinVolts/SupplyMaxVolts (each ignored when zero). These are
//     checked on the latest reading without debounce or latch: they refuse a
//     command during a dip, they do not trip the supply.
func CheckSupply(s Spec, st SupplyState) Code {
	if s.Supply == "" {
		return OK
	}
	if (st.Name != "" && st.Name != s.Supply) || !st.Known || !isFinite(st.Volts) {
		return SupplyUnknown
	}
	if st.Tripped {
		switch st.Code {
		case SupplyLow, SupplyHigh, SupplyTripped:
			return st.Code
		}
		return SupplyTripped
	}
	if st.Stale {
		return SupplyStale
	}
	if st.Code != OK {
		return st.Code
	}
	if s.SupplyMinVolts != 0 && !(st.Volts >= s.SupplyMinVolts) {
		return SupplyLow
	}
	if s.SupplyMaxVolts != 0 && !(st.Volts <= s.SupplyMaxVolts) {
		return SupplyHigh
	}
	return OK
}
