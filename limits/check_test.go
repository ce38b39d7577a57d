package limits

import (
	"errors"
	"math"
	"testing"
	"time"
)

// t0 is an arbitrary fixed instant: tests never read the clock.
var t0 = time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

var (
	nan  = math.NaN()
	pInf = math.Inf(1)
	nInf = math.Inf(-1)
)

// shoulder is the reference actuator of the tables: 0..180°, 45° a step,
// 90°/s.
var shoulder = Spec{Min: 0, Max: 180, MaxStep: 45, MaxRate: 90}

func clampOf(s Spec) Spec { s.Policy = Clamp; return s }

// prevAt is a previous command applied at t0.
func prevAt(v float64) Prev { return Prev{Value: v, At: t0, Known: true} }

// prevNoTime is a known previous value with no time (an initial value).
func prevNoTime(v float64) Prev { return Prev{Value: v, Known: true} }

func TestCheck(t *testing.T) {
	neg := Spec{Min: -90, Max: -10, MaxStep: 10}
	data := []struct {
		s       Spec
		prev    Prev
		req     float64
		now     time.Duration // since t0
		code    Code
		value   float64
		clamped bool
		limit   Code
		bound   float64
	}{
		// 0: inside, nothing known before.
		{shoulder, Prev{}, 90, 0, OK, 90, false, OK, 0},
		// 1-6: NaN and ±Inf are refused under both policies.
		{shoulder, Prev{}, nan, 0, NotFinite, nan, false, NotFinite, 0},
		{shoulder, Prev{}, pInf, 0, NotFinite, pInf, false, NotFinite, 0},
		{shoulder, Prev{}, nInf, 0, NotFinite, nInf, false, NotFinite, 0},
		{clampOf(shoulder), Prev{}, nan, 0, NotFinite, nan, false, NotFinite, 0},
		{clampOf(shoulder), Prev{}, pInf, 0, NotFinite, pInf, false, NotFinite, 0},
		{clampOf(shoulder), prevAt(90), nInf, time.Second, NotFinite, nInf, false, NotFinite, 0},
		// 7-9: a non-finite previous value refuses; an unknown one is ignored.
		{shoulder, prevAt(nan), 90, time.Second, NotFinite, 90, false, NotFinite, 0},
		{clampOf(shoulder), prevAt(pInf), 90, time.Second, NotFinite, 90, false, NotFinite, 0},
		{shoulder, Prev{Value: nan}, 90, 0, OK, 90, false, OK, 0},
		// 10-15: min and max, and exactly on them.
		{shoulder, Prev{}, -0.5, 0, LimitMin, -0.5, false, LimitMin, 0},
		{shoulder, Prev{}, 200, 0, LimitMax, 200, false, LimitMax, 180},
		{shoulder, Prev{}, 0, 0, OK, 0, false, OK, 0},
		{shoulder, Prev{}, 180, 0, OK, 180, false, OK, 0},
		{Spec{Min: 5, Max: 5}, Prev{}, 5, 0, OK, 5, false, OK, 0},
		{Spec{Min: 5, Max: 5}, Prev{}, 5.000001, 0, LimitMax, 5.000001, false, LimitMax, 5},
		// 16-21: a negative range.
		{neg, Prev{}, -95, 0, LimitMin, -95, false, LimitMin, -90},
		{neg, Prev{}, -5, 0, LimitMax, -5, false, LimitMax, -10},
		{neg, Prev{}, 0, 0, LimitMax, 0, false, LimitMax, -10},
		{neg, Prev{}, -90, 0, OK, -90, false, OK, 0},
		{neg, prevNoTime(-50), -61, 0, LimitStep, -61, false, LimitStep, 10},
		{neg, prevNoTime(-50), -60, 0, OK, -60, false, OK, 0},
		// 22-26: step, both directions, exactly on it; the initial value has
		// no time so only the step applies.
		{shoulder, prevNoTime(90), 136, 0, LimitStep, 136, false, LimitStep, 45},
		{shoulder, prevNoTime(90), 135, 0, OK, 135, false, OK, 0},
		{shoulder, prevNoTime(90), 45, 0, OK, 45, false, OK, 0},
		{shoulder, prevNoTime(90), 44, 0, LimitStep, 44, false, LimitStep, 45},
		{Spec{Min: 0, Max: 180, MaxRate: 1}, prevNoTime(0), 180, 0, OK, 180, false, OK, 0},
		// 27-28: step and slew do nothing when the previous value is unknown.
		{shoulder, Prev{}, 180, 0, OK, 180, false, OK, 0},
		{Spec{Min: 0, Max: 180, MaxRate: 1}, Prev{At: t0}, 180, 0, OK, 180, false, OK, 0},
		// 29-31: slew: 90°/s over 250ms allows 22.5°.
		{shoulder, prevAt(90), 112.5, 250 * time.Millisecond, OK, 112.5, false, OK, 0},
		{shoulder, prevAt(90), 67.5, 250 * time.Millisecond, OK, 67.5, false, OK, 0},
		{shoulder, prevAt(90), 112.6, 250 * time.Millisecond, LimitSlew, 112.6, false, LimitSlew, 90},
		// 32-35: no time elapsed (or negative): only a repeat passes.
		{shoulder, prevAt(90), 90, 0, OK, 90, false, OK, 0},
		{shoulder, prevAt(90), 90.001, 0, LimitSlew, 90.001, false, LimitSlew, 90},
		{shoulder, prevAt(90), 91, -time.Second, LimitSlew, 91, false, LimitSlew, 90},
		{shoulder, prevAt(90), 90, -time.Second, OK, 90, false, OK, 0},
		// 36-39: order: NOT_FINITE, min/max, step, slew.
		{shoulder, prevAt(90), -50, 0, LimitMin, -50, false, LimitMin, 0},
		{shoulder, prevAt(90), 300, 0, LimitMax, 300, false, LimitMax, 180},
		{shoulder, prevAt(90), 170, 0, LimitStep, 170, false, LimitStep, 45},
		{shoulder, prevAt(nan), nan, 0, NotFinite, nan, false, NotFinite, 0},
		// 40: zero MaxStep and MaxRate mean no limit.
		{Spec{Min: 0, Max: 180}, prevAt(0), 180, 0, OK, 180, false, OK, 0},

		// Clamp.
		// 41-43: min and max; a value inside is not clamped.
		{clampOf(shoulder), Prev{}, 200, 0, OK, 180, true, LimitMax, 180},
		{clampOf(shoulder), Prev{}, -3, 0, OK, 0, true, LimitMin, 0},
		{clampOf(shoulder), Prev{}, 100, 0, OK, 100, false, OK, 0},
		// 44-47: step up and down; max then step; max alone.
		{clampOf(shoulder), prevNoTime(90), 170, 0, OK, 135, true, LimitStep, 45},
		{clampOf(shoulder), prevNoTime(90), 0, 0, OK, 45, true, LimitStep, 45},
		{clampOf(shoulder), prevNoTime(90), 400, 0, OK, 135, true, LimitStep, 45},
		{clampOf(shoulder), prevNoTime(170), 400, 0, OK, 180, true, LimitMax, 180},
		// 48-50: slew tighter than step; step tighter; a tie names the step.
		{clampOf(shoulder), prevAt(90), 180, 250 * time.Millisecond, OK, 112.5, true, LimitSlew, 90},
		{clampOf(shoulder), prevAt(90), 180, time.Second, OK, 135, true, LimitStep, 45},
		{clampOf(shoulder), prevAt(90), 180, 500 * time.Millisecond, OK, 135, true, LimitStep, 45},
		// 51-52: no time elapsed, or negative: hold.
		{clampOf(shoulder), prevAt(90), 180, 0, OK, 90, true, LimitSlew, 90},
		{clampOf(shoulder), prevAt(90), 0, -time.Second, OK, 90, true, LimitSlew, 90},
		// 53-55: prev outside the range: reachable in one step, or not (then
		// refused exactly as Reject would).
		{Spec{Min: 0, Max: 180, MaxStep: 10, Policy: Clamp}, prevNoTime(-5), 90, 0, OK, 5, true, LimitStep, 10},
		{Spec{Min: 0, Max: 180, MaxStep: 10, Policy: Clamp}, prevNoTime(-50), 90, 0, LimitStep, 90, false, LimitStep, 10},
		{Spec{Min: 0, Max: 180, MaxStep: 10, Policy: Clamp}, prevNoTime(300), 200, 0, LimitMax, 200, false, LimitMax, 180},
		// 56-57: a negative range.
		{clampOf(neg), Prev{}, 0, 0, OK, -10, true, LimitMax, -10},
		{clampOf(neg), prevNoTime(-50), -100, 0, OK, -60, true, LimitStep, 10},
		// 58: 0.1+0.2 rounds beyond a step of 0.2 from 0.1; the clamp steps
		// back so the result passes the step check.
		{Spec{Min: 0, Max: 1, MaxStep: 0.2, Policy: Clamp}, prevNoTime(0.1), 1, 0, OK, 0.3, true, LimitStep, 0.2},
		// 59-61: an unvalidated spec with a NaN bound fails closed.
		{Spec{Min: 0, Max: nan}, Prev{}, 1, 0, LimitMax, 1, false, LimitMax, nan},
		{Spec{Min: nan, Max: 1, Policy: Clamp}, Prev{}, 1, 0, LimitMin, 1, false, LimitMin, nan},
		{Spec{Min: 0, Max: 1, MaxStep: nan, Policy: Clamp}, prevNoTime(0), 1, 0, LimitStep, 1, false, LimitStep, nan},
	}
	for i, line := range data {
		v := Check(line.s, line.prev, line.req, at(line.now))
		if v.Code != line.code || !same(v.Value, line.value) || v.Clamped != line.clamped ||
			v.Limit != line.limit || !same(v.Bound, line.bound) || !same(v.Requested, line.req) {
			t.Errorf("#%d: Check(%+v, %+v, %g, +%s) = %+v; want code %q value %g clamped %t limit %q bound %g",
				i, line.s, line.prev, line.req, line.now, v, line.code, line.value, line.clamped, line.limit, line.bound)
		}
		if v.OK() != (line.code == OK) {
			t.Errorf("#%d: OK() = %t with code %q", i, v.OK(), v.Code)
		}
	}
}

// same compares floats treating NaN as equal to NaN.
func same(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }

func TestCheckRecordsPrevAndElapsed(t *testing.T) {
	v := Check(shoulder, prevAt(30), 120, at(500*time.Millisecond))
	if v.Prev != 30 || v.Elapsed != 0 || v.Code != LimitStep {
		t.Fatalf("step: %+v", v)
	}
	v = Check(clampOf(shoulder), prevAt(30), 120, at(250*time.Millisecond))
	if v.Prev != 30 || v.Elapsed != 250*time.Millisecond || v.Limit != LimitSlew || v.Value != 52.5 {
		t.Fatalf("slew clamp: %+v", v)
	}
}

func TestVerdictMessage(t *testing.T) {
	data := []struct {
		name string
		s    Spec
		prev Prev
		req  float64
		now  time.Duration
		want string
	}{
		{"shoulder", shoulder, Prev{}, 200, 0, "shoulder: 200 is above max 180"},
		{"", shoulder, Prev{}, 200, 0, "200 is above max 180"},
		{"", shoulder, Prev{}, -1, 0, "-1 is below min 0"},
		{"", shoulder, Prev{}, nan, 0, "NaN is not a finite number"},
		{"", shoulder, Prev{}, pInf, 0, "+Inf is not a finite number"},
		{"", shoulder, prevAt(nan), 1, 0, "previous value NaN is not a finite number"},
		{"", shoulder, prevNoTime(30), 120, 0, "120 from 30 is a step of 90, above max_step 45"},
		{"", shoulder, prevAt(30), 60, 250 * time.Millisecond, "60 from 30 in 250ms is 120/s, above max_rate 90/s"},
		{"", shoulder, prevAt(30), 31, 0, "31 from 30 with no time elapsed is above max_rate 90/s"},
		{"wrist", shoulder, Prev{}, 90, 0, "wrist: 90 ok"},
		{"", clampOf(shoulder), Prev{}, 200, 0, "200 clamped to 180 by max 180"},
		{"", clampOf(shoulder), Prev{}, -2, 0, "-2 clamped to 0 by min 0"},
		{"", clampOf(shoulder), prevNoTime(30), 120, 0, "120 clamped to 75 by max_step 45 from 30"},
		{"", clampOf(shoulder), prevAt(30), 120, 250 * time.Millisecond, "120 clamped to 52.5 by max_rate 90/s over 250ms from 30"},
	}
	for i, line := range data {
		v := Check(line.s, line.prev, line.req, at(line.now))
		v.Name = line.name
		if got := v.Message(); got != line.want {
			t.Errorf("#%d: Message() = %q; want %q", i, got, line.want)
		}
		if got := v.Error(); got != line.want {
			t.Errorf("#%d: Error() = %q; want %q", i, got, line.want)
		}
	}
	// Codes Check never returns still get a message.
	if got := (Verdict{Code: SupplyLow, Requested: 3}).Message(); got != "3 refused: SUPPLY_LOW" {
		t.Errorf("foreign code: %q", got)
	}
}

func TestVerdictErr(t *testing.T) {
	if err := Check(shoulder, Prev{}, 90, t0).Err(); err != nil {
		t.Fatalf("OK verdict: Err() = %v", err)
	}
	err := Check(shoulder, Prev{}, 200, t0).Err()
	var v Verdict
	if !errors.As(err, &v) || v.Code != LimitMax {
		t.Fatalf("Err() = %v; want a LIMIT_MAX Verdict", err)
	}
}

func TestCheckAllocs(t *testing.T) {
	var sink Verdict
	for i, f := range []func(){
		func() { sink = Check(shoulder, prevAt(90), 100, at(time.Second)) },
		func() { sink = Check(shoulder, prevAt(90), 300, at(time.Second)) },
		func() { sink = Check(clampOf(shoulder), prevAt(90), 300, at(100*time.Millisecond)) },
		func() { sink = Check(clampOf(shoulder), prevAt(90), nan, at(time.Second)) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("#%d: %g allocs per Check; want 0", i, n)
		}
	}
	_ = sink
}

func TestCodes(t *testing.T) {
	// The strings are the wire and journal format: this table must only
	// ever grow.
	data := []struct {
		c    Code
		wire string
	}{
		{OK, ""},
		{LimitMin, "LIMIT_MIN"},
		{LimitMax, "LIMIT_MAX"},
		{LimitStep, "LIMIT_STEP"},
		{LimitSlew, "LIMIT_SLEW"},
		{NotFinite, "NOT_FINITE"},
		{SupplyLow, "SUPPLY_LOW"},
		{SupplyHigh, "SUPPLY_HIGH"},
		{SupplyUnknown, "SUPPLY_UNKNOWN"},
		{SupplyStale, "SUPPLY_STALE"},
		{SupplyTripped, "SUPPLY_TRIPPED"},
	}
	for i, line := range data {
		if string(line.c) != line.wire || !line.c.Valid() {
			t.Errorf("#%d: %q valid=%t; want %q valid", i, line.c, line.c.Valid(), line.wire)
		}
	}
	for i, c := range []Code{"LIMIT", "limit_min", "OK", "SUPPLY"} {
		if c.Valid() {
			t.Errorf("#%d: %q.Valid() = true", i, c)
		}
	}
}

func TestPolicy(t *testing.T) {
	data := []struct {
		s    string
		p    Policy
		fail bool
	}{
		{"reject", Reject, false},
		{"clamp", Clamp, false},
		{"Clamp", Reject, true},
		{"", Reject, true},
	}
	for i, line := range data {
		p, err := ParsePolicy(line.s)
		if (err != nil) != line.fail || p != line.p {
			t.Errorf("#%d: ParsePolicy(%q) = %v, %v", i, line.s, p, err)
			continue
		}
		if line.fail {
			continue
		}
		b, err := p.MarshalText()
		if err != nil || string(b) != line.s || p.String() != line.s {
			t.Errorf("#%d: MarshalText = %q, %v; String = %q", i, b, err, p)
		}
		var q Policy
		if err := q.UnmarshalText(b); err != nil || q != p {
			t.Errorf("#%d: UnmarshalText(%q) = %v, %v", i, b, q, err)
		}
	}
	if _, err := Policy(7).MarshalText(); err == nil {
		t.Error("Policy(7).MarshalText() succeeded")
	}
	q := Clamp
	if err := q.UnmarshalText([]byte("wobble")); err == nil || q != Clamp {
		t.Errorf("UnmarshalText(wobble) = %v, left %v", err, q)
	}
}

func TestSpecValidate(t *testing.T) {
	data := []struct {
		s  Spec
		ok bool
	}{
		{shoulder, true},
		{Spec{}, true},
		{Spec{Min: -90, Max: -10}, true},
		{Spec{Min: 1, Max: 0}, false},
		{Spec{Max: nan}, false},
		{Spec{Min: nInf}, false},
		{Spec{Max: 1, MaxStep: -1}, false},
		{Spec{Max: 1, MaxRate: -1}, false},
		{Spec{Max: 1, MaxRate: pInf}, false},
		{Spec{Max: 1, Policy: 2}, false},
		{Spec{Max: 1, Supply: "motor", SupplyMinVolts: 11}, true},
		{Spec{Max: 1, Supply: "motor", SupplyMinVolts: 12, SupplyMaxVolts: 11}, false},
		{Spec{Max: 1, SupplyMinVolts: 11}, false},
		{Spec{Max: 1, SupplyMaxVolts: 13}, false},
	}
	for i, line := range data {
		if err := line.s.Validate(); (err == nil) != line.ok {
			t.Errorf("#%d: %+v.Validate() = %v", i, line.s, err)
		}
	}
}
