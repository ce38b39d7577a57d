package limits

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// checkInvariants checks, for one input, the properties the gate relies on
// under both policies. s must be valid.
func checkInvariants(t *testing.T, s Spec, prev Prev, req float64, now time.Time) {
	t.Helper()
	rej, cl := s, s
	rej.Policy, cl.Policy = Reject, Clamp
	vr := Check(rej, prev, req, now)
	vc := Check(cl, prev, req, now)
	fail := func(what string, v Verdict) {
		t.Helper()
		t.Fatalf("%s\nspec %+v\nprev %+v req %v now +%s\nverdict %+v", what, s, prev, req, now.Sub(t0), v)
	}

	badInput := !isFinite(req) || (prev.Known && !isFinite(prev.Value))
	for _, v := range []Verdict{vr, vc} {
		if badInput != (v.Code == NotFinite) {
			fail("NOT_FINITE if and only if an input is not finite", v)
		}
		if !v.Code.Valid() || v.Code == SupplyLow || v.Code == SupplyHigh || v.Code == SupplyUnknown ||
			v.Code == SupplyStale || v.Code == SupplyTripped {
			fail("Check returned a code it does not own", v)
		}
		if !same(v.Requested, req) {
			fail("Requested is not the request", v)
		}
		if !v.OK() && (!same(v.Value, req) || v.Clamped || v.Limit != v.Code) {
			fail("a refusal must carry the request, unclamped, with Limit = Code", v)
		}
		if v.Message() == "" {
			fail("empty message", v)
		}
	}

	// Reject: an OK verdict applies exactly what was asked.
	if vr.OK() && (vr.Value != req || vr.Clamped) {
		fail("Reject OK changed the value", vr)
	}
	// Policies agree on what is admissible.
	if vr.OK() && (!vc.OK() || vc.Clamped || vc.Value != req) {
		fail("Clamp moved or refused a value Reject accepts", vc)
	}

	if !vc.OK() {
		if badInput {
			return
		}
		// Clamp refuses a finite request only when no value is reachable:
		// the previous value lies outside [Min, Max].
		if !prev.Known || (prev.Value >= s.Min && prev.Value <= s.Max) {
			fail("Clamp refused although prev is inside the range", vc)
		}
		if vc.Code != vr.Code {
			fail("Clamp refused with a different code than Reject", vc)
		}
		return
	}
	x := vc.Value
	if !isFinite(x) || x < s.Min || x > s.Max {
		fail("Clamp value not finite or outside [Min, Max]", vc)
	}
	if vc.Clamped != (x != req) {
		fail("Clamped does not say whether the value moved", vc)
	}
	if prev.Known && s.MaxStep != 0 && math.Abs(x-prev.Value) > s.MaxStep {
		fail("Clamp value beyond MaxStep of prev", vc)
	}
	if prev.Known && s.MaxRate != 0 && !prev.At.IsZero() {
		el := now.Sub(prev.At)
		if el <= 0 && x != prev.Value {
			fail("Clamp moved with no time elapsed", vc)
		}
		if el > 0 && math.Abs(x-prev.Value) > s.MaxRate*el.Seconds() {
			fail("Clamp value beyond MaxRate", vc)
		}
	}
	// The strongest form: the clamped value passes the Reject gate.
	if again := Check(rej, prev, x, now); !again.OK() {
		fail("Reject refuses the clamped value: "+string(again.Code), vc)
	}
	// Clamping never moves a value away from the request.
	if vc.Clamped && math.Abs(x-req) > math.Abs(prev.Value-req) && prev.Known &&
		prev.Value >= s.Min && prev.Value <= s.Max {
		fail("Clamp moved further from the request than prev", vc)
	}
}

// pick draws a float that is often a value tests care about: a bound, one
// ulp either side of it, zero, a huge value or a non-finite one.
func pick(r *rand.Rand, near ...float64) float64 {
	switch k := r.IntN(10); {
	case k < 4 && len(near) > 0:
		b := near[r.IntN(len(near))]
		switch r.IntN(3) {
		case 0:
			return math.Nextafter(b, math.Inf(-1))
		case 1:
			return math.Nextafter(b, math.Inf(1))
		}
		return b
	case k == 4:
		return []float64{0, math.Copysign(0, -1), 1e308, -1e308, 5e-324, math.NaN(), math.Inf(1), math.Inf(-1)}[r.IntN(8)]
	}
	return (r.Float64()*2 - 1) * math.Pow(10, float64(r.IntN(7)-2))
}

func randomSpec(r *rand.Rand) Spec {
	for {
		s := Spec{Min: pick(r), Max: pick(r)}
		if s.Min > s.Max {
			s.Min, s.Max = s.Max, s.Min
		}
		if r.IntN(3) > 0 {
			s.MaxStep = math.Abs(pick(r))
		}
		if r.IntN(3) > 0 {
			s.MaxRate = math.Abs(pick(r))
		}
		if s.Validate() == nil {
			return s
		}
	}
}

// TestCheckProperties runs checkInvariants over a seeded stream of inputs
// biased toward bounds and their neighbours. The seed is fixed so a failure
// reproduces; FuzzCheck explores further.
func TestCheckProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 200000
	if testing.Short() {
		n = 20000
	}
	for range n {
		s := randomSpec(r)
		var prev Prev
		if r.IntN(4) > 0 {
			prev.Known = true
			prev.Value = pick(r, s.Min, s.Max)
			if r.IntN(20) == 0 {
				prev.Value = math.NaN()
			}
			if r.IntN(5) > 0 {
				prev.At = t0
			}
		}
		edges := []float64{s.Min, s.Max}
		if prev.Known {
			edges = append(edges, prev.Value+s.MaxStep, prev.Value-s.MaxStep)
		}
		req := pick(r, edges...)
		var dt time.Duration
		switch r.IntN(4) {
		case 0: // the same instant
		case 1:
			dt = -time.Duration(r.Int64N(int64(time.Second)))
		default:
			dt = time.Duration(r.Int64N(int64(2 * time.Second)))
		}
		checkInvariants(t, s, prev, req, at(dt))
	}
}

// FuzzCheck checks the same invariants on inputs the fuzzer chooses. The
// Makefile's fuzz target runs it in CI for a bounded time.
func FuzzCheck(f *testing.F) {
	f.Add(0.0, 180.0, 45.0, 90.0, true, true, 90.0, int64(250*time.Millisecond), 200.0)
	f.Add(0.0, 1.0, 0.2, 0.0, true, false, 0.1, int64(0), 1.0)
	f.Add(0.0, 180.0, 10.0, 0.0, true, false, -50.0, int64(0), 90.0)
	f.Add(-90.0, -10.0, 10.0, 5.0, true, true, -50.0, int64(-time.Second), 0.0)
	f.Add(0.0, 180.0, 45.0, 90.0, false, false, 0.0, int64(0), math.NaN())
	f.Fuzz(func(t *testing.T, lo, hi, step, rate float64, known, timed bool, pv float64, dt int64, req float64) {
		s := Spec{Min: lo, Max: hi, MaxStep: step, MaxRate: rate}
		if s.Validate() != nil {
			return
		}
		prev := Prev{Value: pv, Known: known}
		if timed {
			prev.At = t0
		}
		checkInvariants(t, s, prev, req, t0.Add(time.Duration(dt)))
	})
}
