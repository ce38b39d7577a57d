package gpio

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	pgpio "periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/physic"
)

const us = time.Microsecond

// sg90 is a typical hobby servo calibration.
var sg90 = ServoConfig{MinPulse: 500 * us, MaxPulse: 2500 * us, MinAngle: -90, MaxAngle: 90}

func TestDutyFor(t *testing.T) {
	for i, tc := range []struct {
		width, period time.Duration
		want          float64 // fraction of DutyMax, before rounding
	}{
		{1500 * us, 20 * time.Millisecond, 1.5 / 20},
		{500 * us, 20 * time.Millisecond, 0.5 / 20},
		{2500 * us, 20 * time.Millisecond, 2.5 / 20},
		{1 * time.Millisecond, 3 * time.Millisecond, 1.0 / 3},
		{0, 20 * time.Millisecond, 0},
		{20 * time.Millisecond, 20 * time.Millisecond, 1},
		{30 * time.Millisecond, 20 * time.Millisecond, 1}, // clamped
		{-1, 20 * time.Millisecond, 0},                    // clamped
		{1 * time.Millisecond, 0, 0},                      // no period
	} {
		want := pgpio.Duty(math.Round(float64(pgpio.DutyMax) * tc.want))
		if got := DutyFor(tc.width, tc.period); got != want {
			t.Errorf("#%d: DutyFor(%s, %s) = %d, want %d", i, tc.width, tc.period, got, want)
		}
	}
	// A servo's centre pulse, spelled out: 1.5 ms at 50 Hz.
	if got, want := DutyFor(1500*us, 20*time.Millisecond), pgpio.Duty(1258291); got != want {
		t.Errorf("1.5 ms at 50 Hz = %d, want DutyMax*1.5/20 = %d", got, want)
	}
}

func TestServoPulseFor(t *testing.T) {
	zero180 := ServoConfig{MinPulse: 1000 * us, MaxPulse: 2000 * us, MinAngle: 0, MaxAngle: 180}
	reversed := ServoConfig{MinPulse: 2500 * us, MaxPulse: 500 * us, MinAngle: -90, MaxAngle: 90}
	for i, tc := range []struct {
		cfg   ServoConfig
		angle float64
		want  time.Duration
	}{
		{sg90, -90, 500 * us},
		{sg90, 0, 1500 * us},
		{sg90, 90, 2500 * us},
		{sg90, 45, 2000 * us},
		{sg90, 0.0001, 1500*us + 1}, // 0.0001° is 1.1 ns: rounded to the nanosecond
		{zero180, 0, 1000 * us},
		{zero180, 90, 1500 * us},
		{zero180, 180, 2000 * us},
		{reversed, -90, 2500 * us},
		{reversed, 45, 1000 * us},
	} {
		got, err := tc.cfg.PulseFor(tc.angle)
		if err != nil || got != tc.want {
			t.Errorf("#%d: PulseFor(%g) = %s, %v; want %s", i, tc.angle, got, err, tc.want)
			continue
		}
		if back := tc.cfg.AngleFor(got); math.Abs(back-tc.angle) > 1e-3 {
			t.Errorf("#%d: AngleFor(%s) = %g, want %g", i, got, back, tc.angle)
		}
	}
	for _, a := range []float64{-90.0001, 90.0001, 1e9, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := sg90.PulseFor(a); !errors.Is(err, ErrInvalidValue) {
			t.Errorf("PulseFor(%g) = %v, want ErrInvalidValue", a, err)
		}
	}
}

func TestServoConfigRefused(t *testing.T) {
	ok := sg90
	for name, mod := range map[string]func(c *ServoConfig){
		"negative period":   func(c *ServoConfig) { c.Period = -time.Millisecond },
		"period over 1s":    func(c *ServoConfig) { c.Period = 2 * time.Second },
		"no pulse range":    func(c *ServoConfig) { c.MinPulse, c.MaxPulse = 0, 0 },
		"empty pulse range": func(c *ServoConfig) { c.MaxPulse = c.MinPulse },
		"pulse over period": func(c *ServoConfig) { c.MaxPulse = 25 * time.Millisecond },
		"inverted angles":   func(c *ServoConfig) { c.MinAngle, c.MaxAngle = 90, -90 },
		"empty angles":      func(c *ServoConfig) { c.MaxAngle = c.MinAngle },
		"NaN angle":         func(c *ServoConfig) { c.MaxAngle = math.NaN() },
	} {
		c := ok
		mod(&c)
		if _, err := NewServo("s", &PinPWM{}, c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: NewServo = %v, want ErrConfig", name, err)
		}
	}
	if s, err := NewServo("s", &PinPWM{}, ok); err != nil || s.Config().Period != DefaultPeriod {
		t.Fatalf("NewServo(sg90) = %v, period %s", err, s.Config().Period)
	}
}

// sentinel is a PWM state no servo writes: still there, it shows that
// nothing was written.
const sentinelDuty, sentinelFreq = pgpio.Duty(12345), 7 * physic.Hertz

func TestPinServo(t *testing.T) {
	pin := newPin(t, "servo")
	s, err := OpenPinServo(pin.Name(), sg90)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.ReadBack(ctx); !errors.Is(err, ErrNotDriven) {
		t.Fatalf("ReadBack before any Set = %v, want ErrNotDriven", err)
	}
	for _, tc := range []struct {
		angle float64
		width time.Duration
	}{{0, 1500 * us}, {90, 2500 * us}, {-90, 500 * us}, {-45, 1000 * us}} {
		if err := s.Set(ctx, tc.angle); err != nil {
			t.Fatalf("Set(%g): %v", tc.angle, err)
		}
		d, f := pwm(pin)
		if want := DutyFor(tc.width, 20*time.Millisecond); d != want || f != 50*physic.Hertz {
			t.Fatalf("Set(%g): pin PWM(%d, %s), want PWM(%d, 50Hz)", tc.angle, d, f, want)
		}
		if got, err := s.ReadBack(ctx); err != nil || got != tc.angle {
			t.Fatalf("ReadBack after Set(%g) = %g, %v", tc.angle, got, err)
		}
	}

	// Refused angles write nothing and leave the read-back alone.
	setPWM(pin, sentinelDuty, sentinelFreq)
	setLevel(pin, pgpio.High)
	for _, a := range []float64{91, -91, math.NaN(), math.Inf(1)} {
		if err := s.Set(ctx, a); !errors.Is(err, ErrInvalidValue) || !errors.Is(err, actuators.ErrNotApplied) {
			t.Errorf("Set(%g) = %v, want ErrInvalidValue, not applied", a, err)
		}
	}
	if d, f := pwm(pin); d != sentinelDuty || f != sentinelFreq || pin.Read() != pgpio.High {
		t.Fatalf("refused angles wrote the pin: PWM(%d, %s), level %s", d, f, pin.Read())
	}
	if got, _ := s.ReadBack(ctx); got != -45 {
		t.Fatalf("ReadBack after refused angles = %g, want -45", got)
	}

	// Halt detaches by driving the pin Low (which stops PWM on a real pin;
	// gpiotest keeps D, so an untouched sentinel shows that the 0% duty
	// fallback was not used), and there is no angle to report.
	if err := s.Halt(); err != nil {
		t.Fatal(err)
	}
	if d, _ := pwm(pin); pin.Read() != pgpio.Low || d != sentinelDuty {
		t.Fatalf("after Halt the pin is %s with duty %d, want Low by Out", pin.Read(), d)
	}
	if _, err := s.ReadBack(ctx); !errors.Is(err, ErrNotDriven) {
		t.Fatalf("ReadBack after Halt = %v, want ErrNotDriven", err)
	}
}

func TestPinServoFailures(t *testing.T) {
	pin := newFailingPin(t, "servo")
	s, err := OpenPinServo(pin.Name(), sg90)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Set(ctx, 10); err != nil {
		t.Fatal(err)
	}
	pin.pwmErr = errors.New("not implemented") // as periph says on a Pi 5
	if err := s.Set(ctx, 20); !errors.Is(err, actuators.ErrLinkLost) || errors.Is(err, actuators.ErrNotApplied) {
		t.Fatalf("Set on a failing PWM = %v, want in doubt (ErrLinkLost)", err)
	}
	// The servo may be at 10, at 20 or limp: ReadBack must not report an
	// angle, nor "not driven" (which the supervisor does not count against
	// readiness).
	if v, err := s.ReadBack(ctx); err == nil || errors.Is(err, ErrNotDriven) || errors.Is(err, actuators.ErrNoReading) {
		t.Fatalf("ReadBack after an in-doubt Set = %g, %v; want an error that is not ErrNoReading", v, err)
	}
	// Halt still works when PWM is failing; and when Out fails it falls
	// back to a 0% duty cycle.
	pin.pwmErr = nil
	pin.outErr = errors.New("busy")
	if err := s.Halt(); err != nil {
		t.Fatalf("Halt with Out failing: %v", err)
	}
	if d, _ := pwm(pin.Pin); d != 0 {
		t.Fatalf("Halt left duty %d", d)
	}
	if _, err := s.ReadBack(ctx); !errors.Is(err, ErrNotDriven) {
		t.Fatalf("ReadBack after a successful Halt = %v, want ErrNotDriven", err)
	}
	pin.pwmErr = errors.New("dead")
	if err := s.Halt(); err == nil {
		t.Fatal("Halt reported success with both Out and PWM failing")
	}
	// The pulses may still be running.
	if _, err := s.ReadBack(ctx); err == nil || errors.Is(err, actuators.ErrNoReading) {
		t.Fatalf("ReadBack after a failed Halt = %v; want an error that is not ErrNoReading", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	pin.pwmErr, pin.outErr = nil, nil
	setPWM(pin.Pin, sentinelDuty, sentinelFreq)
	setLevel(pin.Pin, pgpio.High)
	if err := s.Set(cctx, 0); !errors.Is(err, context.Canceled) || !errors.Is(err, actuators.ErrNotApplied) {
		t.Fatalf("Set with a cancelled context = %v, want canceled, not applied", err)
	}
	if d, f := pwm(pin.Pin); d != sentinelDuty || f != sentinelFreq || pin.Read() != pgpio.High {
		t.Fatal("Set with a cancelled context wrote the pin")
	}
	// A successful Set ends the doubt.
	if err := s.Set(ctx, 30); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadBack(ctx); err != nil || got != 30 {
		t.Fatalf("ReadBack after a good Set = %g, %v; want 30", got, err)
	}
}

// scriptedPulse is a PulseOutput whose SetPulse fails with err (nil:
// succeeds) and that cannot read its pulse back.
type scriptedPulse struct{ err error }

func (p *scriptedPulse) SetPulse(ctx context.Context, width, period time.Duration) error {
	return p.err
}
func (p *scriptedPulse) Detach() error { return nil }

// TestServoPulseErrorDoubt: a pulse output's failure is in doubt unless it
// wraps actuators.ErrNotApplied. In doubt, the servo's Set says so and its
// read-back stops reporting the angle it had; not applied, both stay.
func TestServoPulseErrorDoubt(t *testing.T) {
	for _, tt := range []struct {
		name       string
		err        error
		notApplied bool
	}{
		{"not applied", fmt.Errorf("channel busy, nothing written: %w", actuators.ErrNotApplied), true},
		{"link lost", fmt.Errorf("write failed: %w", actuators.ErrLinkLost), false},
		{"plain error", errors.New("driver bug"), false},
		{"canceled", context.Canceled, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := &scriptedPulse{}
			s, err := NewServo("test", out, sg90)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := s.Set(ctx, 10); err != nil {
				t.Fatal(err)
			}
			out.err = tt.err
			err = s.Set(ctx, 20)
			if !errors.Is(err, tt.err) {
				t.Fatalf("Set = %v, want it to wrap %v", err, tt.err)
			}
			if got := errors.Is(err, actuators.ErrNotApplied); got != tt.notApplied {
				t.Errorf("Set = %v: wraps ErrNotApplied %v, want %v", err, got, tt.notApplied)
			}
			v, rerr := s.ReadBack(ctx)
			switch {
			case tt.notApplied && (rerr != nil || v != 10):
				t.Errorf("ReadBack after a Set not applied = %g, %v; want 10", v, rerr)
			case !tt.notApplied && (rerr == nil || errors.Is(rerr, actuators.ErrNoReading)):
				t.Errorf("ReadBack after an in-doubt Set = %g, %v; want an error that is not ErrNoReading", v, rerr)
			}
		})
	}
}

// A servo that is not being driven has nothing to read back: the
// supervisor recognises that as actuators.ErrNoReading, for both outputs.
// Other read-back failures must not look like it.
func TestServoNotDrivenIsNoReading(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, s *Servo) {
		t.Helper()
		if _, err := s.ReadBack(ctx); !errors.Is(err, actuators.ErrNoReading) || !errors.Is(err, ErrNotDriven) {
			t.Fatalf("ReadBack of a never-driven servo = %v, want ErrNotDriven and actuators.ErrNoReading", err)
		}
		if err := s.Set(ctx, 45); err != nil {
			t.Fatal(err)
		}
		if got, err := s.ReadBack(ctx); err != nil || got != 45 {
			t.Fatalf("ReadBack of a driven servo = %g, %v; want 45", got, err)
		}
		if err := s.Halt(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadBack(ctx); !errors.Is(err, actuators.ErrNoReading) || !errors.Is(err, ErrNotDriven) {
			t.Fatalf("ReadBack of a detached servo = %v, want ErrNotDriven and actuators.ErrNoReading", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.ReadBack(cctx); err == nil || errors.Is(err, actuators.ErrNoReading) {
			t.Fatalf("ReadBack with a cancelled context = %v; want an error that is not ErrNoReading", err)
		}
	}
	t.Run("pin", func(t *testing.T) {
		s, err := OpenPinServo(newPin(t, "servo").Name(), sg90)
		if err != nil {
			t.Fatal(err)
		}
		check(t, s)
	})
	t.Run("sysfs", func(t *testing.T) {
		root := fakeChip(t, 0, 1)
		chip := filepath.Join(root, "pwmchip0")
		fakeChannel(t, chip, 0)
		s, err := OpenSysfsServo(SysfsConfig{Root: root}, sg90)
		if err != nil {
			t.Fatal(err)
		}
		check(t, s)
		mustWrite(t, filepath.Join(chip, "pwm0", "enable"), "2\n")
		if _, err := s.ReadBack(ctx); !errors.Is(err, ErrBadSysfs) || errors.Is(err, actuators.ErrNoReading) {
			t.Fatalf("ReadBack of a garbled enable file = %v; want ErrBadSysfs, not ErrNoReading", err)
		}
	})
}
