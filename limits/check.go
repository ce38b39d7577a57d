package limits

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Prev is the previous command on an actuator and when it was applied. It is
// what the step and slew limits are measured from.
type Prev struct {
	Value float64
	// At is when Value was applied. The zero time means "no time known"
	// (e.g. an actuator's initial value, assumed at power-up): the step
	// limit still applies but the slew limit does not, because there is no
	// interval to measure a rate over.
	At time.Time
	// Known is false before any command: then neither step nor slew is
	// checked, only Min and Max.
	Known bool
}

// Verdict is the gate's decision on one command. It is a plain value:
// building it allocates nothing, and its message is formatted only when
// asked for.
type Verdict struct {
	// Code is OK when the command may be applied, else why it is refused.
	// A Clamp that moved the value is still OK.
	Code Code
	// Requested is the value that was asked for.
	Requested float64
	// Value is what to apply. It equals Requested unless Clamped. On a
	// refusal it is Requested too, and must not be applied.
	Value float64
	// Clamped is true when the Clamp policy moved the value.
	Clamped bool
	// Limit names the limit that decided the verdict: the refusal code, or
	// for a clamp the last limit that moved the value (LIMIT_MAX, then
	// perhaps LIMIT_STEP). It is OK when no limit was hit.
	Limit Code
	// Bound is the value of that limit: Min, Max, MaxStep or MaxRate (in
	// units/s), for messages and the journal.
	Bound float64
	// Prev is the previous value when it was known, so that a step or slew
	// refusal can be explained and audited.
	Prev float64
	// Elapsed is the time since the previous command when the slew limit
	// decided the verdict (zero or negative means none elapsed).
	Elapsed time.Duration
	// Name optionally names the actuator in Message. Check leaves it empty
	// because the spec has no name; callers that want "shoulder: …" set it.
	Name string
}

// OK reports whether the command may be applied (perhaps clamped).
func (v Verdict) OK() bool { return v.Code == OK }

// Err returns the verdict as an error, or nil when it is OK. Use it rather
// than storing a Verdict in an error variable: a Verdict is an error value
// even when OK, so the interface would never be nil.
func (v Verdict) Err() error {
	if v.OK() {
		return nil
	}
	return v
}

// Error returns Message, so a refusal can travel as an error.
func (v Verdict) Error() string { return v.Message() }

// Message describes the verdict for a person, e.g. "200 is above max 180",
// prefixed by "Name: " when Name is set. It allocates, which is why Check
// does not call it.
func (v Verdict) Message() string {
	var b strings.Builder
	if v.Name != "" {
		b.WriteString(v.Name)
		b.WriteString(": ")
	}
	req := num(v.Requested)
	switch v.Code {
	case OK:
		if !v.Clamped {
			b.WriteString(req + " ok")
			break
		}
		b.WriteString(req + " clamped to " + num(v.Value) + " by ")
		switch v.Limit {
		case LimitMin:
			b.WriteString("min " + num(v.Bound))
		case LimitMax:
			b.WriteString("max " + num(v.Bound))
		case LimitStep:
			b.WriteString("max_step " + num(v.Bound) + " from " + num(v.Prev))
		case LimitSlew:
			b.WriteString("max_rate " + num(v.Bound) + "/s over " + v.Elapsed.String() + " from " + num(v.Prev))
		default:
			b.WriteString(string(v.Limit))
		}
	case NotFinite:
		if isFinite(v.Requested) {
			// Check only refuses a finite request as NOT_FINITE when the
			// previous value is the bad one.
			b.WriteString("previous value " + num(v.Prev) + " is not a finite number")
		} else {
			b.WriteString(req + " is not a finite number")
		}
	case LimitMin:
		b.WriteString(req + " is below min " + num(v.Bound))
	case LimitMax:
		b.WriteString(req + " is above max " + num(v.Bound))
	case LimitStep:
		b.WriteString(req + " from " + num(v.Prev) + " is a step of " + num(math.Abs(v.Requested-v.Prev)) +
			", above max_step " + num(v.Bound))
	case LimitSlew:
		if v.Elapsed <= 0 {
			b.WriteString(req + " from " + num(v.Prev) + " with no time elapsed is above max_rate " + num(v.Bound) + "/s")
			break
		}
		rate := math.Abs(v.Requested-v.Prev) / v.Elapsed.Seconds()
		b.WriteString(req + " from " + num(v.Prev) + " in " + v.Elapsed.String() + " is " + num(rate) +
			"/s, above max_rate " + num(v.Bound) + "/s")
	default:
		b.WriteString(req + " refused: " + string(v.Code))
	}
	return b.String()
}

// Check decides whether requested may be applied to an actuator with spec s,
// whose previous command was prev, at time now. The checks run in the order
// NOT_FINITE, LIMIT_MIN, LIMIT_MAX, LIMIT_STEP, LIMIT_SLEW and the first one
// that fails decides (see the package documentation); with the Clamp policy
// the value is moved instead, except for NOT_FINITE which is always refused.
//
// On the slew limit: a change of Δ at elapsed time dt is allowed when
// |Δ| ≤ MaxRate·dt. When dt ≤ 0 no change but zero is allowed. dt = 0 means
// two commands at the same instant, a jump no finite rate permits; dt < 0
// means the clock went backwards or prev is from the future, and then the
// elapsed time is unknown, so the safe reading is "no time has passed". A
// repeat of the same value is always allowed, so holding never trips it.
//
// Check does not validate s (call Spec.Validate at start-up), but it fails
// closed: a NaN bound refuses every command instead of allowing it.
// It allocates nothing.
func Check(s Spec, prev Prev, requested float64, now time.Time) Verdict {
	v := Verdict{Requested: requested, Value: requested}
	if prev.Known {
		v.Prev = prev.Value
	}
	if !isFinite(requested) || (prev.Known && !isFinite(prev.Value)) {
		// A NaN previous value would make every step comparison false,
		// i.e. allow anything; refusing is the only safe answer.
		v.Code, v.Limit = NotFinite, NotFinite
		return v
	}
	if s.Policy == Clamp {
		clamp(&s, &prev, now, &v)
		return v
	}
	v.Code, v.Bound, v.Elapsed = violation(&s, &prev, requested, now)
	v.Limit = v.Code
	return v
}

// clamp is Check for the Clamp policy: it completes the verdict v, which
// holds the fields Check set. Everything is passed by pointer only to spare
// copying ~200 bytes per call on the gate's hot path.
func clamp(s *Spec, prev *Prev, now time.Time, v *Verdict) {
	requested := v.Requested
	x := requested
	switch {
	case x < s.Min:
		x, v.Limit, v.Bound = s.Min, LimitMin, s.Min
	case x > s.Max:
		x, v.Limit, v.Bound = s.Max, LimitMax, s.Max
	}
	if prev.Known {
		// w is the largest change allowed from prev: the tighter of the
		// step and the slew limits. On a tie the step limit is named, as
		// it comes first in the check order.
		w, wl, wb := math.Inf(1), OK, 0.0
		var el time.Duration
		if s.MaxStep != 0 {
			w, wl, wb = s.MaxStep, LimitStep, s.MaxStep
		}
		if s.MaxRate != 0 && !prev.At.IsZero() {
			el = now.Sub(prev.At)
			if r := slewAllowance(s.MaxRate, el); r < w {
				w, wl, wb = r, LimitSlew, s.MaxRate
			}
		}
		// Measure the change exactly as violation does, so a value the
		// Reject checks accept is never moved.
		if math.Abs(x-prev.Value) > w {
			x = toward(prev.Value, x, w)
			v.Limit, v.Bound = wl, wb
			if wl == LimitSlew {
				v.Elapsed = el
			}
		}
	}
	// Re-check the result as Reject would. It fails only when no value
	// satisfies every limit (prev is out of range and beyond one step of
	// it) or the spec has a NaN bound; both refuse, reported as Reject
	// would report the requested value so the code does not depend on
	// the policy.
	if code, _, _ := violation(s, prev, x, now); code != OK {
		v.Code, v.Bound, v.Elapsed = violation(s, prev, requested, now)
		if v.Code == OK {
			// Unreachable when x differs from requested only by the
			// moves above, but never let a refusal turn into an OK.
			v.Code, v.Bound, v.Elapsed = violation(s, prev, x, now)
		}
		v.Limit = v.Code
		return
	}
	v.Value = x
	v.Clamped = x != requested
}

// violation runs the Reject checks after NOT_FINITE, in order, on value x.
// Each comparison is written as "not within" so that a NaN bound refuses.
func violation(s *Spec, prev *Prev, x float64, now time.Time) (code Code, bound float64, elapsed time.Duration) {
	if !(x >= s.Min) {
		return LimitMin, s.Min, 0
	}
	if !(x <= s.Max) {
		return LimitMax, s.Max, 0
	}
	if !prev.Known {
		return OK, 0, 0
	}
	d := math.Abs(x - prev.Value)
	if s.MaxStep != 0 && !(d <= s.MaxStep) {
		return LimitStep, s.MaxStep, 0
	}
	if s.MaxRate != 0 && !prev.At.IsZero() {
		el := now.Sub(prev.At)
		if !(d <= slewAllowance(s.MaxRate, el)) {
			return LimitSlew, s.MaxRate, el
		}
	}
	return OK, 0, 0
}

// slewAllowance is the largest change the rate limit allows over el. Both
// Check paths use it so a clamped value re-checks with the same arithmetic.
// The explicit conversion rounds the product: without it the compiler may
// fuse it into a later add or compare (FMA, as on arm64), and the clamp and
// the re-check could then disagree in the last bit.
func slewAllowance(rate float64, el time.Duration) float64 {
	if el <= 0 {
		return 0
	}
	return float64(rate * el.Seconds())
}

// toward returns the value w away from p in the direction of x. Float
// rounding can make p+w land a hair beyond w from p (0.1+0.2−0.1 > 0.2), so
// the result is stepped back one ulp at a time until the re-check, which
// computes |result − p|, accepts it. It takes at most a couple of steps.
func toward(p, x, w float64) float64 {
	if x > p {
		y := p + w
		for y-p > w {
			y = math.Nextafter(y, p)
		}
		return y
	}
	y := p - w
	for p-y > w {
		y = math.Nextafter(y, p)
	}
	return y
}

func isFinite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// num formats a number as briefly as it round-trips, so messages show the
// value that was checked, not a rounded one.
func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
