package actuators_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/limits"
)

// recorder is a Driver that records its calls and fails as told.
type recorder struct {
	sets     []float64
	deadline time.Duration // of the last Set's context, from when it was called
	halts    int
	err      error
}

func (r *recorder) Set(ctx context.Context, v float64) error {
	r.sets = append(r.sets, v)
	if d, ok := ctx.Deadline(); ok {
		r.deadline = time.Until(d)
	} else {
		r.deadline = -1
	}
	return r.err
}

func (r *recorder) Halt() error { r.halts++; return r.err }

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		k          actuators.Kind
		valid, rev bool
	}{
		{actuators.Servo, true, true},
		{actuators.PWM, true, true},
		{actuators.Digital, true, true},
		{actuators.Setpoint, true, true},
		{actuators.Pulse, true, false},
		{"", false, true},
		{"Servo", false, true},
		{"relay", false, true},
	} {
		if got := tc.k.Valid(); got != tc.valid {
			t.Errorf("Kind(%q).Valid() = %v, want %v", tc.k, got, tc.valid)
		}
		if got := tc.k.Reversible(); got != tc.rev {
			t.Errorf("Kind(%q).Reversible() = %v, want %v", tc.k, got, tc.rev)
		}
	}
}

func TestSafePolicyString(t *testing.T) {
	for _, tc := range []struct {
		p    actuators.SafePolicy
		want string
	}{
		{actuators.SafePolicy{}, "hold"},
		{actuators.SafePolicy{Mode: actuators.SafeHold}, "hold"},
		{actuators.SafePolicy{Mode: actuators.SafeDetach}, "detach"},
		{actuators.SafePolicy{Mode: actuators.SafeValue, Value: 90}, "value:90"},
		{actuators.SafePolicy{Mode: actuators.SafeValue, Value: -0.25}, "value:-0.25"},
		// Value means nothing outside SafeValue.
		{actuators.SafePolicy{Mode: actuators.SafeDetach, Value: 3}, "detach"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.p, got, tc.want)
		}
	}
}

func TestDriverTimeout(t *testing.T) {
	if actuators.DefaultTimeout != 500*time.Millisecond {
		t.Errorf("DefaultTimeout = %v; DESIGN and the docs say 500ms", actuators.DefaultTimeout)
	}
	for _, tc := range []struct{ set, want time.Duration }{
		{0, actuators.DefaultTimeout},
		{-time.Second, actuators.DefaultTimeout},
		{time.Millisecond, time.Millisecond},
		{3 * time.Second, 3 * time.Second},
	} {
		a := &actuators.Actuator{Timeout: tc.set}
		if got := a.DriverTimeout(); got != tc.want {
			t.Errorf("Timeout %v: DriverTimeout() = %v, want %v", tc.set, got, tc.want)
		}
	}
}

func TestGoSafe(t *testing.T) {
	ctx := context.Background()
	t.Run("hold does nothing", func(t *testing.T) {
		for _, mode := range []actuators.SafeMode{"", actuators.SafeHold} {
			r := &recorder{}
			a := &actuators.Actuator{Name: "arm", Safe: actuators.SafePolicy{Mode: mode}, Driver: r}
			if err := a.GoSafe(ctx); err != nil || len(r.sets) != 0 || r.halts != 0 {
				t.Errorf("mode %q: GoSafe = %v; sets %v, halts %d", mode, err, r.sets, r.halts)
			}
		}
	})
	t.Run("value sets it within the driver timeout", func(t *testing.T) {
		r := &recorder{}
		a := &actuators.Actuator{Name: "arm", Safe: actuators.SafePolicy{Mode: actuators.SafeValue, Value: 90}, Timeout: 200 * time.Millisecond, Driver: r}
		if err := a.GoSafe(ctx); err != nil || !slices.Equal(r.sets, []float64{90}) || r.halts != 0 {
			t.Fatalf("GoSafe = %v; sets %v, halts %d", err, r.sets, r.halts)
		}
		if r.deadline <= 0 || r.deadline > 200*time.Millisecond {
			t.Errorf("the safe Set's context has %v left, want at most the 200ms driver timeout", r.deadline)
		}
	})
	t.Run("detach halts", func(t *testing.T) {
		r := &recorder{}
		a := &actuators.Actuator{Name: "arm", Safe: actuators.SafePolicy{Mode: actuators.SafeDetach}, Driver: r}
		if err := a.GoSafe(ctx); err != nil || r.halts != 1 || len(r.sets) != 0 {
			t.Fatalf("GoSafe = %v; sets %v, halts %d", err, r.sets, r.halts)
		}
	})
	t.Run("errors name the actuator and wrap the cause", func(t *testing.T) {
		for _, p := range []actuators.SafePolicy{{Mode: actuators.SafeValue, Value: 1}, {Mode: actuators.SafeDetach}} {
			r := &recorder{err: actuators.ErrLinkLost}
			a := &actuators.Actuator{Name: "gripper", Safe: p, Driver: r}
			err := a.GoSafe(ctx)
			if !errors.Is(err, actuators.ErrLinkLost) || !strings.Contains(err.Error(), "gripper") {
				t.Errorf("%v: GoSafe = %v", p, err)
			}
		}
	})
}

func TestRegistry(t *testing.T) {
	d := &recorder{}
	ok := func(name string) *actuators.Actuator {
		return &actuators.Actuator{Name: name, Kind: actuators.Servo, Limits: limits.Spec{Min: -90, Max: 90}, Driver: d}
	}
	r, err := actuators.NewRegistry(ok("wrist"), ok("base"), ok("elbow"))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Names(); !slices.Equal(got, []string{"base", "elbow", "wrist"}) {
		t.Errorf("Names() = %v, want sorted", got)
	}
	if a := r.Get("elbow"); a == nil || a.Name != "elbow" {
		t.Errorf("Get(elbow) = %v", a)
	}
	if a := r.Get("knee"); a != nil {
		t.Errorf("Get(knee) = %v, want nil", a)
	}
	empty, err := actuators.NewRegistry()
	if err != nil || len(empty.Names()) != 0 || empty.Get("x") != nil {
		t.Errorf("empty registry: %v, %v", empty, err)
	}

	for _, tc := range []struct {
		name string
		list []*actuators.Actuator
		want string
	}{
		{"nil", []*actuators.Actuator{nil}, "nil actuator"},
		{"no name", []*actuators.Actuator{ok("")}, "no name"},
		{"bad kind", []*actuators.Actuator{{Name: "x", Kind: "relay", Driver: d}}, `unknown kind "relay"`},
		{"no kind", []*actuators.Actuator{{Name: "x", Driver: d}}, "unknown kind"},
		{"no driver", []*actuators.Actuator{{Name: "x", Kind: actuators.Digital}}, "no driver"},
		{"twice", []*actuators.Actuator{ok("a"), ok("b"), ok("a")}, "a: defined twice"},
		{"bad limits", []*actuators.Actuator{{Name: "x", Kind: actuators.Servo, Limits: limits.Spec{Min: 1, Max: 0}, Driver: d}}, "x: limits: min 1 > max 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := actuators.NewRegistry(tc.list...)
			if err == nil || r != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewRegistry = %v, %v; want an error with %q", r, err, tc.want)
			}
		})
	}
}

func TestErrorsAreDistinct(t *testing.T) {
	errs := []error{actuators.ErrLinkLost, actuators.ErrNotApplied, actuators.ErrNoReading}
	for i, a := range errs {
		for j, b := range errs {
			if (i == j) != errors.Is(a, b) {
				t.Errorf("errors.Is(%v, %v) = %v", a, b, i != j)
			}
		}
	}
}
