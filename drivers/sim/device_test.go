package sim

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

func TestServoSlew(t *testing.T) {
	clk := newFakeClock()
	w := NewMemoryWorld(WithClock(clk.Now))
	s := w.Servo("base", 0, 60)

	mustSet(t, s, 90)
	// The command is recorded at once; the position follows at 60°/s.
	steps := []struct {
		after time.Duration
		want  float64
	}{
		{0, 0},
		{500 * time.Millisecond, 30},
		{500 * time.Millisecond, 60},
		{250 * time.Millisecond, 75},
		{time.Second, 90}, // arrived; it does not overshoot
	}
	for _, st := range steps {
		clk.Advance(st.after)
		if got := readBack(t, s); !near(got, st.want) {
			t.Fatalf("position = %g, want %g", got, st.want)
		}
		if c := s.State().Commanded; c != 90 {
			t.Fatalf("commanded = %g, want 90", c)
		}
	}

	// A command that interrupts a move starts from where the servo is.
	mustSet(t, s, 0)
	clk.Advance(500 * time.Millisecond)
	mustSet(t, s, 90) // at 60 now, heading back up
	clk.Advance(250 * time.Millisecond)
	if got := readBack(t, s); !near(got, 75) {
		t.Fatalf("after reversal position = %g, want 75", got)
	}
}

func TestServoInstantWithoutSlew(t *testing.T) {
	w := NewMemoryWorld()
	s := w.Servo("gripper", 10, 0)
	mustSet(t, s, -40)
	if got := readBack(t, s); got != -40 {
		t.Fatalf("position = %g, want -40 at once", got)
	}
}

func TestServoHaltDetaches(t *testing.T) {
	clk := newFakeClock()
	w := NewMemoryWorld(WithClock(clk.Now))
	s := w.Servo("elbow", 0, 100)
	mustSet(t, s, 100)
	clk.Advance(400 * time.Millisecond)
	if err := s.Halt(); err != nil {
		t.Fatal(err)
	}
	// No pulses: it stays where it physically was, short of the command.
	clk.Advance(10 * time.Second)
	st := s.State()
	if !st.Detached || !near(st.Position, 40) || st.Commanded != 100 {
		t.Fatalf("after halt = %+v, want detached at 40 with command 100", st)
	}
	// The next Set re-attaches and moves on from there.
	mustSet(t, s, 0)
	clk.Advance(100 * time.Millisecond)
	st = s.State()
	if st.Detached || !near(st.Position, 30) {
		t.Fatalf("after re-set = %+v, want attached at 30", st)
	}
}

func TestDigital(t *testing.T) {
	w := NewMemoryWorld()
	d := w.Digital("pump", 0)
	mustSet(t, d, 1)
	if got := readBack(t, d); got != 1 {
		t.Fatalf("read back %g, want 1", got)
	}
	if err := d.Set(context.Background(), 0.5); err == nil || !strings.Contains(err.Error(), "0 or 1") {
		t.Fatalf("Set(0.5) = %v, want a 0-or-1 error", err)
	}
	if got := readBack(t, d); got != 1 {
		t.Fatalf("a refused Set changed the output to %g", got)
	}
	if err := d.Halt(); err != nil {
		t.Fatal(err)
	}
	st := d.State()
	if readBack(t, d) != 0 || !st.Detached || st.Commanded != 1 {
		t.Fatalf("after halt: %+v, want de-energised (0), detached, command kept", st)
	}
	if e := w.Digital("bad", 2).Err(); e == nil {
		t.Fatal("initial 2 accepted for a digital output")
	}
}

func TestSetpoint(t *testing.T) {
	w := NewMemoryWorld()
	p := w.Setpoint("fan", 0.25)
	if got := readBack(t, p); got != 0.25 {
		t.Fatalf("initial %g, want 0.25", got)
	}
	mustSet(t, p, -3.5)
	if got := readBack(t, p); got != -3.5 {
		t.Fatalf("read back %g, want -3.5", got)
	}
	if err := p.Halt(); err != nil {
		t.Fatal(err)
	}
	if st := p.State(); !st.Detached || st.Position != -3.5 {
		t.Fatalf("after halt %+v, want detached, value held", st)
	}
	if err := p.Set(context.Background(), math.NaN()); err == nil {
		t.Fatal("NaN accepted")
	}
}

func TestPulseCountsKicks(t *testing.T) {
	w := NewMemoryWorld()
	p := w.Pulse("kicker")
	for range 3 {
		mustSet(t, p, 1)
	}
	if p.Kicks() != 3 {
		t.Fatalf("kicks = %d, want 3", p.Kicks())
	}
}

func TestSupplyScript(t *testing.T) {
	clk := newFakeClock()
	w := NewMemoryWorld(WithClock(clk.Now))
	b := w.Supply("battery", 8.4)
	v, at, err := b.Volts()
	if err != nil || v != 8.4 || !at.Equal(clk.Now()) {
		t.Fatalf("Volts() = %g, %v, %v; want 8.4 at the clock's now", v, at, err)
	}
	start := clk.Now()
	// A sag from 8.4 V to 6.0 V over 2 s, a step back to 7.0 V at 3 s.
	err = b.Script([]ScriptPoint{
		{At: 2 * time.Second, Volts: 6.0},
		{At: 3 * time.Second, Volts: 6.0},
		{At: 3 * time.Second, Volts: 7.0},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{
		{0, 8.4},
		{time.Second, 7.2},
		{2 * time.Second, 6.0},
		{2999 * time.Millisecond, 6.0},
		{3 * time.Second, 7.0},
		{time.Hour, 7.0},
	} {
		clk.Set(start.Add(c.at))
		if v, _, _ := b.Volts(); !near(v, c.want) {
			t.Errorf("at %v volts = %g, want %g", c.at, v, c.want)
		}
	}
	if err := b.SetVolts(5); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := b.Volts(); v != 5 {
		t.Fatalf("SetVolts did not end the script: %g", v)
	}
	if err := b.Script([]ScriptPoint{{At: 2 * time.Second}, {At: time.Second}}); err == nil {
		t.Fatal("a script going back in time was accepted")
	}
}

func TestSameNameSameDevice(t *testing.T) {
	w := NewMemoryWorld()
	a := w.Servo("base", 0, 0)
	if b := w.Servo("base", 50, 10); b != a {
		t.Fatal("asking twice gave two devices, which would split their faults")
	}
	// A name cannot change kind; the mistake surfaces on use, not as a panic.
	d := w.Digital("base", 0)
	if d.Err() == nil || !strings.Contains(d.Err().Error(), "already has base as a servo") {
		t.Fatalf("kind clash error = %v", d.Err())
	}
	if err := d.Set(context.Background(), 1); !errors.Is(err, d.Err()) || !errors.Is(err, actuators.ErrNotApplied) {
		t.Fatalf("Set on a clashing device = %v, want its Err, not applied", err)
	}
	if err := d.Halt(); err == nil {
		t.Fatal("Halt on a clashing device succeeded")
	}
}

func TestBadNames(t *testing.T) {
	w := NewMemoryWorld()
	for _, n := range []string{"", "a\nb", strings.Repeat("x", maxName+1), "\xff"} {
		if w.Servo(n, 0, 0).Err() == nil {
			t.Errorf("name %q accepted", n)
		}
	}
	if w.Servo(strings.Repeat("x", maxName), 0, 0).Err() != nil {
		t.Errorf("a name of exactly %d bytes refused", maxName)
	}
}

func TestClosedWorld(t *testing.T) {
	w := NewMemoryWorld()
	s := w.Servo("base", 0, 0)
	w.Close()
	if err := s.Set(context.Background(), 1); !errors.Is(err, ErrWorldClosed) {
		t.Fatalf("Set after Close = %v", err)
	}
	if _, err := s.ReadBack(context.Background()); !errors.Is(err, ErrWorldClosed) {
		t.Fatalf("ReadBack after Close = %v", err)
	}
	if err := w.Servo("other", 0, 0).Err(); !errors.Is(err, ErrWorldClosed) {
		t.Fatalf("new device after Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestCancelledContextSendsNothing(t *testing.T) {
	w := NewMemoryWorld()
	s := w.Servo("base", 0, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Set(ctx, 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("Set with a done context = %v", err)
	}
	if s.State().Commanded != 0 {
		t.Fatal("a Set whose context was done took effect")
	}
}
