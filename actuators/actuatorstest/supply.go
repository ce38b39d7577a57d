package actuatorstest

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

// VoltSource is how the supervisor reads a supply (supervisor.VoltSource):
// the voltage and the time of the reading, or an error.
type VoltSource interface {
	Volts() (volts float64, at time.Time, err error)
}

// SupplyInstance is one fresh supply monitor on fresh fake hardware.
type SupplyInstance struct {
	Source VoltSource
	// Volts is what the fake reports now.
	Volts float64
	// SetVolts makes the fake report v from now on (nil: it cannot); the
	// suite then waits up to SupplySubject.Wait for the reading to follow.
	SetVolts func(v float64)
	// Fail makes readings fail — a dead bus, a lost link, a stale or
	// unknown reading — until restore (nil: the fake cannot).
	Fail func() (restore func())
	// Close closes the monitor or what it reads through (nil: nothing to
	// close).
	Close func() error
}

// SupplySubject is one supply monitor under test.
type SupplySubject struct {
	New       func(t *testing.T) SupplyInstance
	Tolerance float64 // of a reading (the monitor's resolution)
	// Wait is how long a changed voltage may take to show (telemetry
	// period); 0: at once.
	Wait time.Duration
	// Others are voltages SetVolts is tried with.
	Others []float64
	// Goroutines reading at once in the concurrent subtest (0: 8), each
	// making Rounds reads (0: 20).
	Goroutines, Rounds int
}

// RunSupply runs the supply suite: a reading is the fake's voltage with the
// time it was taken; a failed or stale reading is an error, never a zero or
// a frozen value; concurrent reads are safe; closing ends the readings.
func RunSupply(t *testing.T, s SupplySubject) {
	t.Helper()
	if s.New == nil {
		t.Fatal("actuatorstest: SupplySubject.New is nil")
	}
	if s.Goroutines == 0 {
		s.Goroutines = 8
	}
	if s.Rounds == 0 {
		s.Rounds = 20
	}
	t.Run("read", s.read)
	t.Run("failed", s.failed)
	t.Run("concurrent", s.concurrent)
	t.Run("close", s.close)
}

func (s *SupplySubject) near(a, b float64) bool { return math.Abs(a-b) <= s.Tolerance }

func (s *SupplySubject) volts(t *testing.T, src VoltSource) (v float64, at time.Time, err error) {
	t.Helper()
	bounded(t, "Volts", 5*time.Second, func() { v, at, err = src.Volts() })
	return v, at, err
}

// wantVolts waits up to s.Wait for a reading of want, dated by when it was
// taken: not zero, not in the future, not older than the wait allows.
func (s *SupplySubject) wantVolts(t *testing.T, src VoltSource, want float64) {
	t.Helper()
	deadline := time.Now().Add(s.Wait)
	for {
		before := time.Now()
		v, at, err := s.volts(t, src)
		if err == nil && s.near(v, want) {
			if at.IsZero() || at.After(time.Now()) || before.Sub(at) > s.Wait+time.Second {
				t.Fatalf("reading of %g V is dated %v (read at %v)", v, at, before)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Volts = %g, %v; want %g ± %g", v, err, want, s.Tolerance)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *SupplySubject) read(t *testing.T) {
	in := s.New(t)
	s.wantVolts(t, in.Source, in.Volts)
	if in.SetVolts == nil {
		return
	}
	for _, v := range s.Others {
		in.SetVolts(v)
		s.wantVolts(t, in.Source, v)
	}
}

func (s *SupplySubject) failed(t *testing.T) {
	in := s.New(t)
	if in.Fail == nil {
		t.Skip("the fake cannot fail")
	}
	s.wantVolts(t, in.Source, in.Volts)
	restore := in.Fail()
	deadline := time.Now().Add(s.Wait)
	for {
		v, at, err := s.volts(t, in.Source)
		if err != nil {
			if v != 0 || !at.IsZero() {
				t.Errorf("a failed reading also returned %g V at %v", v, at)
			}
			break
		}
		if time.Now().After(deadline) {
			restore()
			t.Fatalf("Volts while failing = %g V at %v, nil; want an error, never a zero or the last good value", v, at)
		}
		time.Sleep(5 * time.Millisecond)
	}
	restore()
	s.wantVolts(t, in.Source, in.Volts)
}

func (s *SupplySubject) concurrent(t *testing.T) {
	in := s.New(t)
	s.wantVolts(t, in.Source, in.Volts)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	for range s.Goroutines {
		wg.Go(func() {
			for range s.Rounds {
				v, _, err := in.Source.Volts()
				if err != nil || !s.near(v, in.Volts) {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%g V, %v", v, err))
					mu.Unlock()
				}
			}
		})
	}
	bounded(t, "the concurrent readers", 10*time.Second, wg.Wait)
	for _, b := range bad {
		t.Errorf("concurrent Volts = %s; want %g", b, in.Volts)
	}
}

func (s *SupplySubject) close(t *testing.T) {
	in := s.New(t)
	if in.Close == nil {
		t.Skip("nothing to close")
	}
	s.wantVolts(t, in.Source, in.Volts)
	bounded(t, "Close", 5*time.Second, func() {
		if err := in.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if v, at, err := s.volts(t, in.Source); err == nil {
		t.Errorf("Volts after Close = %g V at %v, nil; want an error", v, at)
	}
	bounded(t, "a second Close", 5*time.Second, func() { _ = in.Close() })
}
