package sim

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

func TestFailOnNth(t *testing.T) {
	s := NewMemoryWorld().Servo("base", 0, 0)
	s.FailOnNth(2)
	mustSet(t, s, 10)
	if err := s.Set(context.Background(), 20); !errors.Is(err, ErrInjected) {
		t.Fatalf("second Set = %v, want injected", err)
	}
	if c := s.State().Commanded; c != 10 {
		t.Fatalf("a failed Set took effect: commanded %g", c)
	}
	mustSet(t, s, 30) // fires once
	if s.Sets() != 3 {
		t.Fatalf("Sets() = %d, want 3", s.Sets())
	}
}

func TestFailAlwaysAndClear(t *testing.T) {
	s := NewMemoryWorld().Digital("pump", 0)
	s.FailAlways()
	for range 3 {
		if err := s.Set(context.Background(), 1); !errors.Is(err, ErrInjected) {
			t.Fatalf("Set = %v, want injected", err)
		}
	}
	if readBack(t, s) != 0 {
		t.Fatal("failed Sets took effect")
	}
	// Halt must still work: it is the safe action when Set is failing.
	if err := s.Halt(); err != nil {
		t.Fatalf("Halt under FailAlways: %v", err)
	}
	s.Clear()
	mustSet(t, s, 1)
}

func TestFailWhenOnlyTheCompensation(t *testing.T) {
	s := NewMemoryWorld().Servo("elbow", 15, 0)
	// Fail only the Set that would drive back to the prior angle.
	s.FailWhen(func(v float64) bool { return v == 15 })
	mustSet(t, s, 40)
	if err := s.Set(context.Background(), 15); !errors.Is(err, ErrInjected) {
		t.Fatalf("compensation = %v, want injected", err)
	}
	if readBack(t, s) != 40 {
		t.Fatal("the failed compensation moved the servo")
	}
	mustSet(t, s, 20)
	s.FailWhen(nil)
	mustSet(t, s, 15)
}

func TestHangNext(t *testing.T) {
	for _, applied := range []bool{false, true} {
		s := NewMemoryWorld().Servo("base", 0, 0)
		s.HangNext(applied)
		// start is read before the deadline is set, so it is not later
		// than the moment the deadline counts from.
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		err := s.Set(ctx, 50)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("applied=%v: hung Set = %v, want deadline exceeded", applied, err)
		}
		if time.Since(start) < 30*time.Millisecond {
			t.Fatalf("applied=%v: returned before its deadline", applied)
		}
		want := 0.0
		if applied {
			want = 50 // in doubt: it happened, though the caller was not told
		}
		if got := readBack(t, s); got != want {
			t.Fatalf("applied=%v: position %g, want %g", applied, got, want)
		}
		mustSet(t, s, 5) // only the next Set hangs
	}
}

func TestHangEndsWithWorld(t *testing.T) {
	w := NewMemoryWorld()
	s := w.Servo("base", 0, 0)
	s.HangNext(false)
	res := make(chan error, 1)
	go func() { res <- s.Set(context.Background(), 1) }()
	for s.Sets() == 0 {
		time.Sleep(time.Millisecond)
	}
	w.Close()
	select {
	case err := <-res:
		if !errors.Is(err, ErrWorldClosed) {
			t.Fatalf("hung Set ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a hung Set")
	}
}

func TestLoseLink(t *testing.T) {
	for _, applied := range []bool{false, true} {
		w := NewMemoryWorld()
		s := w.Servo("shoulder", 0, 0)
		s.LoseLink(applied)
		if err := s.Set(context.Background(), 70); !errors.Is(err, actuators.ErrLinkLost) {
			t.Fatalf("Set over a lost link = %v", err)
		}
		if _, err := s.ReadBack(context.Background()); !errors.Is(err, actuators.ErrLinkLost) {
			t.Fatalf("ReadBack over a lost link = %v", err)
		}
		st := w.Snapshot()["shoulder"]
		if !st.LinkLost {
			t.Fatal("snapshot does not show the lost link")
		}
		want := 0.0
		if applied {
			want = 70
		}
		if st.Commanded != want {
			t.Fatalf("applied=%v: commanded %g, want %g", applied, st.Commanded, want)
		}
		// The safe action does not depend on the data link.
		if err := s.Halt(); err != nil {
			t.Fatalf("Halt over a lost link: %v", err)
		}
		s.RestoreLink()
		mustSet(t, s, 10)
		if readBack(t, s) != 10 {
			t.Fatal("restored link does not work")
		}
	}
}

func TestSupplyLinkLost(t *testing.T) {
	b := NewMemoryWorld().Supply("battery", 7.4)
	b.LoseLink(false)
	if _, _, err := b.Volts(); !errors.Is(err, actuators.ErrLinkLost) {
		t.Fatalf("Volts over a lost link = %v", err)
	}
	b.Clear()
	if v, _, err := b.Volts(); err != nil || v != 7.4 {
		t.Fatalf("Volts after Clear = %g, %v", v, err)
	}
}

func TestFailHalt(t *testing.T) {
	s := NewMemoryWorld().Servo("base", 0, 0)
	s.FailHalt()
	if err := s.Halt(); !errors.Is(err, ErrInjected) {
		t.Fatalf("Halt = %v, want injected", err)
	}
	if s.State().Detached {
		t.Fatal("a failed Halt detached the servo")
	}
	s.Clear()
	if err := s.Halt(); err != nil {
		t.Fatal(err)
	}
}

func TestFaultsOnFileWorldLeaveFileUnchanged(t *testing.T) {
	path := worldPath(t)
	w := openWorld(t, path)
	s := w.Servo("base", 0, 0)
	mustSet(t, s, 10)
	s.FailAlways()
	s.Set(context.Background(), 99)
	w.Close()
	if c := openWorld(t, path).Snapshot()["base"].Commanded; c != 10 {
		t.Fatalf("file has %g after a failed Set, want 10", c)
	}
}

// TestNotApplied checks which failed Sets promise that nothing moved
// (actuators.ErrNotApplied) and that the promise holds; the others must
// leave the step in doubt, whether or not their effect happened.
func TestNotApplied(t *testing.T) {
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		name       string
		arm        func(s *Servo)
		ctx        context.Context
		dev        string // "servo" (the default), "digital" or "clash" (made with an error)
		value      float64
		notApplied bool
		moved      bool
	}{
		{name: "FailOnNth", arm: func(s *Servo) { s.FailOnNth(1) }, value: 30, notApplied: true},
		{name: "FailAlways", arm: func(s *Servo) { s.FailAlways() }, value: 30, notApplied: true},
		{name: "FailWhen", arm: func(s *Servo) { s.FailWhen(func(v float64) bool { return v == 30 }) }, value: 30, notApplied: true},
		{name: "not finite", value: math.NaN(), notApplied: true},
		{name: "digital neither 0 nor 1", dev: "digital", value: 0.5, notApplied: true},
		{name: "deadline passed before sending", ctx: expired, value: 30, notApplied: true},
		{name: "device made with an error", dev: "clash", value: 1, notApplied: true},
		{name: "hang, not applied", arm: func(s *Servo) { s.HangNext(false) }, value: 30},
		{name: "hang, applied", arm: func(s *Servo) { s.HangNext(true) }, value: 30, moved: true},
		{name: "link lost, not applied", arm: func(s *Servo) { s.LoseLink(false) }, value: 30},
		{name: "link lost, applied", arm: func(s *Servo) { s.LoseLink(true) }, value: 30, moved: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := NewMemoryWorld()
			s, d := w.Servo("base", 10, 0), w.Digital("pump", 0)
			if tt.arm != nil {
				tt.arm(s)
			}
			ctx := tt.ctx
			if ctx == nil {
				c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				defer cancel()
				ctx = c
			}
			var dev interface {
				actuators.Driver
				State() DeviceState
			} = s
			switch tt.dev {
			case "digital":
				dev = d
			case "clash":
				dev = w.Digital("base", 0) // the world has base as a servo
			}
			before := dev.State().Commanded
			err := dev.Set(ctx, tt.value)
			if err == nil {
				t.Fatal("Set succeeded")
			}
			if got := errors.Is(err, actuators.ErrNotApplied); got != tt.notApplied {
				t.Errorf("Set = %v: wraps ErrNotApplied %v, want %v", err, got, tt.notApplied)
			}
			after := dev.State().Commanded
			if moved := after != before; moved != tt.moved {
				t.Errorf("commanded %g → %g: moved %v, want %v", before, after, moved, tt.moved)
			}
		})
	}
}
