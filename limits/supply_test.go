package limits

import (
	"math"
	"testing"
	"time"
)

// motor is the reference supply of the tables: 11..14 V, clearing inside
// 11.5..13.5 V, 100ms debounce, stale after 1s.
var motor = SupplySpec{
	Name: "motor", MinVolts: 11, MaxVolts: 14, HysteresisVolts: 0.5,
	Debounce: 100 * time.Millisecond, StaleAfter: time.Second, Action: Refuse,
}

type reading struct {
	volts float64
	at    time.Duration // since t0
}

const ms = time.Millisecond

// tripLow is a violation that trips motor at 100ms.
var tripLow = []reading{{10.9, 0}, {10.9, 100 * ms}}

func join(rs ...[]reading) []reading {
	var out []reading
	for _, r := range rs {
		out = append(out, r...)
	}
	return out
}

func TestSupply(t *testing.T) {
	noDebounce := motor
	noDebounce.Debounce = 0
	noHyst := motor
	noHyst.HysteresisVolts = 0
	const never = -1 // Since is the zero time
	data := []struct {
		spec     SupplySpec
		readings []reading
		now      time.Duration
		known    bool
		stale    bool
		tripped  bool
		volts    float64
		code     Code
		cause    Code
		since    time.Duration
	}{
		// 0-2: unknown until a valid reading; NaN and Inf are no reading.
		{motor, nil, 0, false, false, false, 0, SupplyUnknown, OK, never},
		{motor, []reading{{math.NaN(), 0}}, 0, false, false, false, 0, SupplyUnknown, OK, never},
		{motor, []reading{{math.Inf(-1), 0}, {math.Inf(1), 10 * ms}}, 10 * ms, false, false, false, 0, SupplyUnknown, OK, never},
		// 3-5: fresh, exactly StaleAfter old (still fresh), then stale.
		{motor, []reading{{12, 0}}, 0, true, false, false, 12, OK, OK, 0},
		{motor, []reading{{12, 0}}, time.Second, true, false, false, 12, OK, OK, 0},
		{motor, []reading{{12, 0}}, time.Second + 1, true, true, false, 12, SupplyStale, OK, time.Second},
		// 6: garbage readings do not refresh: stale.
		{motor, []reading{{12, 0}, {math.NaN(), 500 * ms}, {math.Inf(1), 1500 * ms}}, 1500 * ms, true, true, false, 12, SupplyStale, OK, time.Second},
		// 7: fresh again after a stale gap: good since the new reading.
		{motor, []reading{{12, 0}, {12.1, 5 * time.Second}}, 5 * time.Second, true, false, false, 12.1, OK, OK, 5 * time.Second},
		// 8-9: dips shorter than the debounce never trip.
		{motor, []reading{{10.9, 0}, {10.9, 50 * ms}, {12, 99 * ms}, {10.9, 150 * ms}}, 150 * ms, true, false, false, 10.9, OK, OK, 0},
		{motor, []reading{{10.9, 0}, {10.9, 99 * ms}}, 99 * ms, true, false, false, 10.9, OK, OK, 0},
		// 10-11: a violation lasting the debounce trips, low or high.
		{motor, tripLow, 100 * ms, true, false, true, 10.9, SupplyLow, SupplyLow, 100 * ms},
		{motor, []reading{{14.1, 0}, {14.2, 100 * ms}}, 100 * ms, true, false, true, 14.2, SupplyHigh, SupplyHigh, 100 * ms},
		// 12-13: exactly on the bounds is inside.
		{motor, []reading{{11, 0}, {11, 200 * ms}}, 200 * ms, true, false, false, 11, OK, OK, 0},
		{motor, []reading{{14, 0}, {14, 200 * ms}}, 200 * ms, true, false, false, 14, OK, OK, 0},
		// 14: with no debounce one reading trips.
		{noDebounce, []reading{{10, 0}}, 0, true, false, true, 10, SupplyLow, SupplyLow, 0},
		// 15: a violation swinging from low to high is one violation; the
		// trip names the reading that tripped it.
		{motor, []reading{{10.9, 0}, {14.5, 100 * ms}}, 100 * ms, true, false, true, 14.5, SupplyHigh, SupplyHigh, 100 * ms},
		// 16: a garbage reading does not end a violation.
		{motor, []reading{{10.9, 0}, {math.NaN(), 50 * ms}, {10.9, 100 * ms}}, 100 * ms, true, false, true, 10.9, SupplyLow, SupplyLow, 100 * ms},
		// 17-18: latched: back in range is SUPPLY_TRIPPED; inside the
		// hysteresis margin it stays latched however long.
		{motor, join(tripLow, []reading{{12, 150 * ms}}), 150 * ms, true, false, true, 12, SupplyTripped, SupplyLow, 100 * ms},
		{motor, join(tripLow, []reading{{11.2, 150 * ms}, {11.4, 500 * ms}, {11.4, 900 * ms}}), 900 * ms, true, false, true, 11.4, SupplyTripped, SupplyLow, 100 * ms},
		// 19: latched low, then swinging high: the code follows the reading,
		// the cause stays first-out.
		{motor, join(tripLow, []reading{{15, 150 * ms}}), 150 * ms, true, false, true, 15, SupplyHigh, SupplyLow, 100 * ms},
		// 20-21: clears after Debounce inside the band; exactly on its edge
		// counts as inside.
		{motor, join(tripLow, []reading{{12, 150 * ms}, {12, 250 * ms}}), 250 * ms, true, false, false, 12, OK, OK, 250 * ms},
		{motor, join(tripLow, []reading{{11.5, 150 * ms}, {13.5, 250 * ms}}), 250 * ms, true, false, false, 13.5, OK, OK, 250 * ms},
		// 22-23: leaving the band restarts the run toward clearing.
		{motor, join(tripLow, []reading{{12, 150 * ms}, {11.3, 200 * ms}, {12, 250 * ms}, {12, 300 * ms}}), 300 * ms, true, false, true, 12, SupplyTripped, SupplyLow, 100 * ms},
		{motor, join(tripLow, []reading{{12, 150 * ms}, {11.3, 200 * ms}, {12, 250 * ms}, {12, 350 * ms}}), 350 * ms, true, false, false, 12, OK, OK, 350 * ms},
		// 24: so does a garbage reading.
		{motor, join(tripLow, []reading{{12, 150 * ms}, {math.NaN(), 200 * ms}, {12, 250 * ms}}), 250 * ms, true, false, true, 12, SupplyTripped, SupplyLow, 100 * ms},
		// 25-26: and a stale gap.
		{motor, join(tripLow, []reading{{12, 150 * ms}, {12, 1200 * ms}, {12, 1250 * ms}}), 1250 * ms, true, false, true, 12, SupplyTripped, SupplyLow, 100 * ms},
		{motor, join(tripLow, []reading{{12, 150 * ms}, {12, 1200 * ms}, {12, 1300 * ms}}), 1300 * ms, true, false, false, 12, OK, OK, 1300 * ms},
		// 27: tripped and stale: still tripped, code SUPPLY_TRIPPED.
		{motor, tripLow, 2 * time.Second, true, true, true, 10.9, SupplyTripped, SupplyLow, 100 * ms},
		// 28: after clearing, a new violation needs a whole new debounce.
		{motor, join(tripLow, []reading{{12, 150 * ms}, {12, 250 * ms}, {10, 300 * ms}, {10, 399 * ms}}), 399 * ms, true, false, false, 10, OK, OK, 250 * ms},
		// 29: a reading older than the last is ignored.
		{motor, []reading{{12, 500 * ms}, {10, 100 * ms}}, 500 * ms, true, false, false, 12, OK, OK, 500 * ms},
		// 30: with no hysteresis the band is [Min, Max].
		{noHyst, join(tripLow, []reading{{11, 150 * ms}, {11, 250 * ms}}), 250 * ms, true, false, false, 11, OK, OK, 250 * ms},
	}
	for i, line := range data {
		s, err := NewSupply(line.spec)
		if err != nil {
			t.Fatalf("#%d: %v", i, err)
		}
		for _, r := range line.readings {
			s.Observe(r.volts, at(r.at))
		}
		st := s.State(at(line.now))
		wantSince := time.Time{}
		if line.since != never {
			wantSince = at(line.since)
		}
		if st.Known != line.known || st.Stale != line.stale || st.Tripped != line.tripped || st.Volts != line.volts ||
			st.Code != line.code || st.Cause != line.cause || !st.Since.Equal(wantSince) || st.Name != line.spec.Name {
			t.Errorf("#%d: State(+%s) = %+v\nwant known %t stale %t tripped %t volts %g code %q cause %q since +%s",
				i, line.now, st, line.known, line.stale, line.tripped, line.volts, line.code, line.cause, line.since)
		}
	}
}

// TestSupplyStateIsPure checks that asking does not change the answer: State
// neither trips nor clears.
func TestSupplyStateIsPure(t *testing.T) {
	s, _ := NewSupply(motor)
	s.Observe(10.9, at(0))
	for _, d := range []time.Duration{0, 100 * ms, 5 * time.Second, 0} {
		if st := s.State(at(d)); st.Tripped {
			t.Fatalf("State(+%s) tripped without a reading", d)
		}
	}
	s.Observe(10.9, at(100*ms))
	if !s.State(at(100 * ms)).Tripped {
		t.Fatal("did not trip")
	}
}

func TestSupplySpecValidate(t *testing.T) {
	mod := func(f func(*SupplySpec)) SupplySpec { s := motor; f(&s); return s }
	data := []struct {
		s  SupplySpec
		ok bool
	}{
		{motor, true},
		{mod(func(s *SupplySpec) { s.Debounce = 0; s.HysteresisVolts = 0 }), true},
		{mod(func(s *SupplySpec) { s.Action = Halt }), true},
		{mod(func(s *SupplySpec) { s.Name = "" }), false},
		{mod(func(s *SupplySpec) { s.MinVolts = math.NaN() }), false},
		{mod(func(s *SupplySpec) { s.MaxVolts = math.Inf(1) }), false},
		{mod(func(s *SupplySpec) { s.HysteresisVolts = math.NaN() }), false},
		{mod(func(s *SupplySpec) { s.HysteresisVolts = -0.1 }), false},
		{mod(func(s *SupplySpec) { s.MinVolts, s.MaxVolts = 14, 11 }), false},
		{mod(func(s *SupplySpec) { s.MinVolts, s.MaxVolts, s.HysteresisVolts = 12, 12, 0 }), false},
		{mod(func(s *SupplySpec) { s.HysteresisVolts = 1.5 }), false}, // band [12.5, 12.5] is a point
		{mod(func(s *SupplySpec) { s.Debounce = -1 }), false},
		{mod(func(s *SupplySpec) { s.StaleAfter = 0 }), false},
		{mod(func(s *SupplySpec) { s.Action = 0 }), false},
		{mod(func(s *SupplySpec) { s.Action = Halt + 1 }), false},
	}
	for i, line := range data {
		err := line.s.Validate()
		_, nerr := NewSupply(line.s)
		if (err == nil) != line.ok || (nerr == nil) != line.ok {
			t.Errorf("#%d: %+v: Validate() = %v, NewSupply: %v", i, line.s, err, nerr)
		}
	}
}

func TestCheckSupply(t *testing.T) {
	arm := Spec{Max: 1, Supply: "motor", SupplyMinVolts: 11.5, SupplyMaxVolts: 13}
	plain := Spec{Max: 1, Supply: "motor"}
	good := SupplyState{Name: "motor", Known: true, Volts: 12}
	with := func(f func(*SupplyState)) SupplyState { st := good; f(&st); return st }
	data := []struct {
		s    Spec
		st   SupplyState
		want Code
	}{
		// 0-1: nothing to check without a supply.
		{Spec{Max: 1}, SupplyState{}, OK},
		{Spec{Max: 1}, with(func(st *SupplyState) { st.Tripped, st.Code = true, SupplyLow }), OK},
		// 2-5: unknown: zero state, wrong supply, non-finite volts.
		{arm, SupplyState{}, SupplyUnknown},
		{arm, with(func(st *SupplyState) { st.Name = "logic" }), SupplyUnknown},
		{arm, with(func(st *SupplyState) { st.Volts = math.NaN() }), SupplyUnknown},
		{arm, with(func(st *SupplyState) { st.Volts = math.Inf(-1) }), SupplyUnknown},
		// 6: a state with no name is taken for the right supply.
		{arm, with(func(st *SupplyState) { st.Name = "" }), OK},
		// 7-10: tripped, whatever else the state says.
		{arm, with(func(st *SupplyState) { st.Tripped, st.Code = true, SupplyLow }), SupplyLow},
		{arm, with(func(st *SupplyState) { st.Tripped, st.Code = true, SupplyHigh }), SupplyHigh},
		{arm, with(func(st *SupplyState) { st.Tripped, st.Code = true, SupplyTripped }), SupplyTripped},
		{arm, with(func(st *SupplyState) { st.Tripped = true }), SupplyTripped},
		// 11-12: stale, by flag or by code.
		{arm, with(func(st *SupplyState) { st.Stale = true }), SupplyStale},
		{arm, with(func(st *SupplyState) { st.Code = SupplyStale }), SupplyStale},
		// 13-17: the actuator's own bounds, inclusive.
		{arm, with(func(st *SupplyState) { st.Volts = 11.4 }), SupplyLow},
		{arm, with(func(st *SupplyState) { st.Volts = 11.5 }), OK},
		{arm, with(func(st *SupplyState) { st.Volts = 13 }), OK},
		{arm, with(func(st *SupplyState) { st.Volts = 13.1 }), SupplyHigh},
		{arm, good, OK},
		// 18: zero actuator bounds: only the supply's own state counts.
		{plain, with(func(st *SupplyState) { st.Volts = 3 }), OK},
	}
	for i, line := range data {
		if got := CheckSupply(line.s, line.st); got != line.want {
			t.Errorf("#%d: CheckSupply(%+v, %+v) = %q; want %q", i, line.s, line.st, got, line.want)
		}
	}
}

// TestCheckSupplyFromSupply runs the supply machine into CheckSupply, the way
// the gate uses them.
func TestCheckSupplyFromSupply(t *testing.T) {
	arm := Spec{Max: 1, Supply: "motor", SupplyMinVolts: 11.5}
	s, _ := NewSupply(motor)
	data := []struct {
		r    reading
		now  time.Duration
		want Code
	}{
		{reading{math.NaN(), 0}, 0, SupplyUnknown},
		{reading{12, 10 * ms}, 10 * ms, OK},
		{reading{11.2, 20 * ms}, 20 * ms, SupplyLow}, // the actuator's bound, not debounced
		{reading{10.9, 30 * ms}, 30 * ms, SupplyLow}, // below the supply too, not yet tripped
		{reading{12, 40 * ms}, 40 * ms, OK},          // the dip was brief
		{reading{10.9, 50 * ms}, 50 * ms, SupplyLow},
		{reading{10.9, 150 * ms}, 150 * ms, SupplyLow},   // tripped
		{reading{12, 200 * ms}, 200 * ms, SupplyTripped}, // latched
		{reading{12, 300 * ms}, 300 * ms, OK},            // cleared
		{reading{12, 300 * ms}, 1301 * ms, SupplyStale},  // silence
		{reading{math.NaN(), 1400 * ms}, 1400 * ms, SupplyStale},
	}
	for i, line := range data {
		s.Observe(line.r.volts, at(line.r.at))
		if got := CheckSupply(arm, s.State(at(line.now))); got != line.want {
			t.Errorf("#%d: after %g V at +%s: %q; want %q", i, line.r.volts, line.r.at, got, line.want)
		}
	}
}

func TestAction(t *testing.T) {
	data := []struct {
		s string
		a Action
	}{
		{"warn", Warn},
		{"refuse", Refuse},
		{"unwind", Unwind},
		{"halt", Halt},
	}
	for i, line := range data {
		a, err := ParseAction(line.s)
		if err != nil || a != line.a || a.String() != line.s || !a.Valid() {
			t.Errorf("#%d: ParseAction(%q) = %v, %v", i, line.s, a, err)
		}
		b, err := a.MarshalText()
		var u Action
		if err != nil || string(b) != line.s || u.UnmarshalText(b) != nil || u != a {
			t.Errorf("#%d: text round trip: %q, %v -> %v", i, b, err, u)
		}
		if i > 0 && !(data[i-1].a < a) {
			t.Errorf("#%d: %v is not more severe than %v", i, a, data[i-1].a)
		}
	}
	for i, s := range []string{"", "Halt", "stop", "warn "} {
		if a, err := ParseAction(s); err == nil {
			t.Errorf("#%d: ParseAction(%q) = %v", i, s, a)
		}
	}
	if Action(0).Valid() || Action(0).String() != "action(0)" {
		t.Errorf("zero action: valid=%t %q", Action(0).Valid(), Action(0))
	}
	if _, err := Action(9).MarshalText(); err == nil {
		t.Error("Action(9).MarshalText() succeeded")
	}
	u := Halt
	if err := u.UnmarshalText([]byte("nope")); err == nil || u != Halt {
		t.Errorf("UnmarshalText(nope) = %v, left %v", err, u)
	}
}

func TestSupplyAllocs(t *testing.T) {
	s, _ := NewSupply(motor)
	arm := Spec{Max: 1, Supply: "motor", SupplyMinVolts: 11.5}
	var sink Code
	n := testing.AllocsPerRun(100, func() {
		s.Observe(12, at(0))
		sink = CheckSupply(arm, s.State(at(0)))
	})
	if n != 0 {
		t.Errorf("%g allocs per Observe+State+CheckSupply; want 0", n)
	}
	_ = sink
}
