package gpio

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	pgpio "periph.io/x/conn/v3/gpio"
)

func TestOutputSetReadBack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		activeLow bool
		on, off   pgpio.Level
	}{
		{"active-high", false, pgpio.High, pgpio.Low},
		{"active-low", true, pgpio.Low, pgpio.High},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pin := newPin(t, "relay")
			o, err := OpenOutput(OutputConfig{Pin: pin.Name(), ActiveLow: tc.activeLow})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, v := range []float64{1, 0, 1} {
				if err := o.Set(ctx, v); err != nil {
					t.Fatalf("Set(%g): %v", v, err)
				}
				want := tc.off
				if v == 1 {
					want = tc.on
				}
				if l := pin.Read(); l != want {
					t.Fatalf("after Set(%g) the pin is %s, want %s", v, l, want)
				}
				got, err := o.ReadBack(ctx)
				if err != nil || got != v {
					t.Fatalf("ReadBack after Set(%g) = %g, %v", v, got, err)
				}
			}
			// ReadBack reads the pin, not a remembered value.
			setLevel(pin, tc.off)
			if got, err := o.ReadBack(ctx); err != nil || got != 0 {
				t.Fatalf("ReadBack of a pin driven off elsewhere = %g, %v; want 0", got, err)
			}
		})
	}
}

func TestOutputRefusesInvalidValues(t *testing.T) {
	pin := newPin(t, "relay")
	o, err := OpenOutput(OutputConfig{Pin: pin.Name()})
	if err != nil {
		t.Fatal(err)
	}
	// A write of either level shows from one of the two starting levels.
	for _, start := range []pgpio.Level{pgpio.High, pgpio.Low} {
		setLevel(pin, start)
		for _, v := range []float64{0.5, 2, -1, 1.0000001, math.NaN(), math.Inf(1), math.Inf(-1)} {
			if err := o.Set(context.Background(), v); !errors.Is(err, ErrInvalidValue) || !errors.Is(err, actuators.ErrNotApplied) {
				t.Errorf("Set(%g) = %v, want ErrInvalidValue, not applied", v, err)
			}
			if l := pin.Read(); l != start {
				t.Fatalf("refused Set(%g) drove the pin from %s to %s", v, start, l)
			}
		}
	}
}

func TestOutputExpiredContextWritesNothing(t *testing.T) {
	pin := newPin(t, "relay")
	o, err := OpenOutput(OutputConfig{Pin: pin.Name()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, v := range []float64{1, 0} {
		start := pgpio.Level(v == 0) // the level Set(v) would change
		setLevel(pin, start)
		if err := o.Set(ctx, v); !errors.Is(err, context.Canceled) || !errors.Is(err, actuators.ErrNotApplied) {
			t.Fatalf("Set(%g) with a cancelled context = %v, want canceled, not applied", v, err)
		}
		if l := pin.Read(); l != start {
			t.Fatalf("Set(%g) with a cancelled context drove the pin to %s", v, l)
		}
	}
}

func TestOutputHaltGoesInert(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  OutputConfig
		want pgpio.Level
		val  float64
	}{
		{"default", OutputConfig{}, pgpio.Low, 0},
		{"active-low", OutputConfig{ActiveLow: true}, pgpio.High, 0},
		{"inert-on", OutputConfig{InertOn: true}, pgpio.High, 1},
		{"active-low inert-on", OutputConfig{ActiveLow: true, InertOn: true}, pgpio.Low, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pin := newPin(t, "relay")
			tc.cfg.Pin = pin.Name()
			o, err := OpenOutput(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := o.Set(context.Background(), 1-tc.val); err != nil {
				t.Fatal(err)
			}
			if err := o.Halt(); err != nil {
				t.Fatal(err)
			}
			if l := pin.Read(); l != tc.want {
				t.Fatalf("after Halt the pin is %s, want %s", l, tc.want)
			}
			if got, _ := o.ReadBack(context.Background()); got != tc.val {
				t.Fatalf("ReadBack after Halt = %g, want %g", got, tc.val)
			}
		})
	}
}

func TestOutputWriteFailureIsInDoubt(t *testing.T) {
	pin := newFailingPin(t, "relay")
	o, err := OpenOutput(OutputConfig{Pin: pin.Name()})
	if err != nil {
		t.Fatal(err)
	}
	pin.outErr = errors.New("ioctl failed")
	if err := o.Set(context.Background(), 1); !errors.Is(err, actuators.ErrLinkLost) || errors.Is(err, actuators.ErrNotApplied) {
		t.Fatalf("Set on a failing pin = %v, want it in doubt (ErrLinkLost)", err)
	}
	if err := o.Halt(); err == nil {
		t.Fatal("Halt on a failing pin reported success")
	}
}

func TestOpenMissingPin(t *testing.T) {
	if _, err := OpenOutput(OutputConfig{Pin: "NO_SUCH_PIN_42"}); !errors.Is(err, ErrPinNotFound) {
		t.Errorf("OpenOutput(missing) = %v, want ErrPinNotFound", err)
	}
	if _, err := OpenOutput(OutputConfig{}); !errors.Is(err, ErrConfig) {
		t.Errorf("OpenOutput(no name) = %v, want ErrConfig", err)
	}
	if _, err := OpenPinServo("NO_SUCH_PIN_42", ServoConfig{MinPulse: 1, MaxPulse: 2, MaxAngle: 1}); !errors.Is(err, ErrPinNotFound) {
		t.Errorf("OpenPinServo(missing) = %v, want ErrPinNotFound", err)
	}
}
