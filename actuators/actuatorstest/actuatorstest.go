// Package actuatorstest is the conformance suite every actuator driver
// passes: what package actuators promises of a Driver — set and read back,
// Halt and the safe state, in-doubt versus not-applied errors, the context,
// concurrent calls, limits at the edges, closing — checked the same way for
// each driver on its fake hardware. RunSupply does the same for the voltage
// sources the supervisor reads supplies through.
//
// It is a test-support package: import it only from _test files. A driver
// package runs it from one test:
//
//	func TestConformance(t *testing.T) {
//		actuatorstest.Run(t, actuatorstest.Subject{
//			Kind:   actuators.Servo,
//			Min:    -90, Max: 90,
//			Values: []float64{-90, 0, 45.5, 90},
//			New: func(t *testing.T) actuatorstest.Instance {
//				d := ... // a fresh driver on fresh fake hardware, closed by t.Cleanup
//				return actuatorstest.Instance{Driver: d, Break: ..., Refuse: ...}
//			},
//			...
//		})
//	}
//
// Each subtest makes its own Instance, so one subtest's faults never leak
// into the next.
package actuatorstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// AfterHalt is what a driver's ReadBack documents after Halt.
type AfterHalt int

const (
	// HaltNoReading: ReadBack fails with an error wrapping
	// actuators.ErrNoReading (a PWM servo no longer pulsed).
	HaltNoReading AfterHalt = iota + 1
	// HaltInert: ReadBack reads Subject.Inert (a relay's sense line).
	HaltInert
	// HaltHolds: ReadBack reads the last value set (an output left where
	// it was, such as a detached servo that stays put).
	HaltHolds
)

func (a AfterHalt) String() string {
	switch a {
	case HaltNoReading:
		return "no reading"
	case HaltInert:
		return "inert value"
	case HaltHolds:
		return "holds the last value"
	}
	return fmt.Sprintf("AfterHalt(%d)", int(a))
}

// Instance is one fresh driver on fresh fake hardware, with the handles the
// suite needs on that hardware.
type Instance struct {
	Driver actuators.Driver
	// Break makes Sets fail the way a lost link or a timeout does — in
	// doubt — until the returned restore is called; restore must leave the
	// driver usable again (reconnected, ready). nil: the fake cannot.
	Break func() (restore func())
	// Refuse makes the device refuse Sets before acting on them (a NAK, an
	// ack with ok:false: errors wrapping actuators.ErrNotApplied) until
	// restore. nil: the device has no way to refuse.
	Refuse func() (restore func())
	// Close closes what the driver talks through (its own connection, its
	// link, its world). nil: the Driver's own Close if it is an io.Closer,
	// else the close subtest is skipped.
	Close func() error
}

// Subject is one driver under test and what the suite may expect of it.
type Subject struct {
	// New returns a fresh driver on fresh (fake) hardware; the test's
	// Cleanup closes it. It may skip the test (a tool not installed).
	New  func(t *testing.T) Instance
	Kind actuators.Kind
	// Min and Max are the values the driver accepts.
	Min, Max float64
	// Values are set and read back in turn: within Min..Max, both edges
	// included, and at least two distinct values.
	Values []float64
	// ReadBack: the driver implements actuators.ReadBacker and reads back
	// what was set, within Tolerance.
	ReadBack  bool
	Tolerance float64
	// ReadBackWait is how long a read-back may take to show a Set that
	// succeeded (a retained state message arriving after the ack); 0
	// means it shows at once.
	ReadBackWait time.Duration
	// AfterHalt is what ReadBack documents after Halt (ReadBack drivers
	// only), and Inert the value for HaltInert.
	AfterHalt AfterHalt
	Inert     float64
	// OutOfRange are values the driver refuses with an error wrapping
	// actuators.ErrNotApplied (NaN, ±Inf, beyond its range).
	OutOfRange []float64
	// HaltWhileBroken: Halt succeeds even while Break is in force (the
	// fault is on the Set path only). Otherwise Halt while broken must
	// only return within the bound, and succeed once restored.
	HaltWhileBroken bool
	// Timeout bounds each Set the suite makes (its context's deadline);
	// 0 means 2s, stretched by testtool.Slow. A call that has not returned Timeout+Slack after it was
	// made has hung.
	Timeout time.Duration
	Slack   time.Duration // 0 means 2s
	// Goroutines is how many callers the concurrent subtest runs (0: 8),
	// each making Rounds rounds of Set, ReadBack and Halt (0: 5).
	Goroutines, Rounds int
}

func (s *Subject) defaults() {
	// Stretched on a slow machine (testtool.Slow): a set that must succeed
	// is not a race the suite means to test.
	if s.Timeout == 0 {
		s.Timeout = testtool.Slow(2 * time.Second)
	}
	if s.Slack == 0 {
		s.Slack = testtool.Slow(2 * time.Second)
	}
	if s.Goroutines == 0 {
		s.Goroutines = 8
	}
	if s.Rounds == 0 {
		s.Rounds = 5
	}
}

func (s *Subject) validate(t *testing.T) {
	t.Helper()
	switch {
	case s.New == nil:
		t.Fatal("actuatorstest: Subject.New is nil")
	case !s.Kind.Valid():
		t.Fatalf("actuatorstest: Subject.Kind %q is not a known kind", s.Kind)
	case !(s.Min <= s.Max):
		t.Fatalf("actuatorstest: Min %g > Max %g", s.Min, s.Max)
	case len(s.Values) < 2:
		t.Fatal("actuatorstest: Subject.Values needs at least two values")
	case !slices.Contains(s.Values, s.Min) || !slices.Contains(s.Values, s.Max):
		t.Fatalf("actuatorstest: Values %v must include both edges %g and %g", s.Values, s.Min, s.Max)
	case s.ReadBack && s.AfterHalt == 0:
		t.Fatal("actuatorstest: a ReadBack subject must say what it reads after Halt (AfterHalt)")
	case s.Kind == actuators.Pulse && s.ReadBack:
		t.Fatal("actuatorstest: a pulse output has nothing to read back")
	}
	for _, v := range s.Values {
		if v < s.Min || v > s.Max {
			t.Fatalf("actuatorstest: value %g outside Min..Max %g..%g", v, s.Min, s.Max)
		}
	}
}

// Run runs the conformance suite on s, one subtest per check.
func Run(t *testing.T, s Subject) {
	t.Helper()
	s.defaults()
	s.validate(t)
	t.Run("set_and_read_back", s.setAndReadBack)
	t.Run("halt", s.halt)
	t.Run("not_applied", s.notApplied)
	t.Run("in_doubt", s.inDoubt)
	t.Run("context", s.context)
	t.Run("concurrent", s.concurrent)
	t.Run("close", s.close)
}

// bounded runs f and fails the test if it panics or has not returned
// within bound. A hung call is left behind; the test is failed at once
// rather than left to hang the package.
func bounded(t *testing.T, what string, bound time.Duration, f func()) {
	t.Helper()
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		f()
	}()
	select {
	case p := <-done:
		if p != nil {
			t.Fatalf("%s panicked: %v", what, p)
		}
	case <-time.After(bound):
		t.Fatalf("%s has not returned after %v: hung", what, bound)
	}
}

func (s *Subject) bound() time.Duration { return s.Timeout + s.Slack }

func (s *Subject) set(t *testing.T, d actuators.Driver, v float64) (err error) {
	t.Helper()
	bounded(t, fmt.Sprintf("Set(%g)", v), s.bound(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
		defer cancel()
		err = d.Set(ctx, v)
	})
	return err
}

func (s *Subject) mustSet(t *testing.T, d actuators.Driver, v float64) {
	t.Helper()
	if err := s.set(t, d, v); err != nil {
		t.Fatalf("Set(%g): %v", v, err)
	}
}

// settle sets v and, for a ReadBack subject, waits for it to read back, so
// that a later "unchanged" check compares against the output's real state.
func (s *Subject) settle(t *testing.T, d actuators.Driver, v float64) {
	t.Helper()
	s.mustSet(t, d, v)
	if s.ReadBack {
		s.wantRead(t, d, v, fmt.Sprintf("Set(%g)", v))
	}
}

func (s *Subject) haltErr(t *testing.T, d actuators.Driver) (err error) {
	t.Helper()
	bounded(t, "Halt", s.bound(), func() { err = d.Halt() })
	return err
}

func (s *Subject) readBack(t *testing.T, d actuators.Driver) (v float64, err error) {
	t.Helper()
	rb, ok := d.(actuators.ReadBacker)
	if !ok {
		t.Fatalf("%T does not implement actuators.ReadBacker", d)
	}
	bounded(t, "ReadBack", s.bound(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
		defer cancel()
		v, err = rb.ReadBack(ctx)
	})
	return v, err
}

func (s *Subject) near(a, b float64) bool { return math.Abs(a-b) <= s.Tolerance }

// wantRead waits up to ReadBackWait for ReadBack to read want.
func (s *Subject) wantRead(t *testing.T, d actuators.Driver, want float64, after string) {
	t.Helper()
	deadline := time.Now().Add(s.ReadBackWait)
	for {
		v, err := s.readBack(t, d)
		if err == nil && s.near(v, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ReadBack after %s = %g, %v; want %g ± %g", after, v, err, want, s.Tolerance)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *Subject) instance(t *testing.T) Instance {
	t.Helper()
	in := s.New(t)
	if in.Driver == nil {
		t.Fatal("actuatorstest: New returned no Driver")
	}
	_, isRB := in.Driver.(actuators.ReadBacker)
	if s.ReadBack && !isRB {
		t.Fatalf("Subject.ReadBack, but %T does not implement actuators.ReadBacker", in.Driver)
	}
	return in
}

// setAndReadBack sets every value, edges included, in both directions, and
// reads each back.
func (s *Subject) setAndReadBack(t *testing.T) {
	in := s.instance(t)
	values := append(slices.Clone(s.Values), s.Values...)
	slices.Reverse(values[len(s.Values):])
	for _, v := range values {
		s.mustSet(t, in.Driver, v)
		if s.ReadBack {
			s.wantRead(t, in.Driver, v, fmt.Sprintf("Set(%g)", v))
		}
	}
}

// checkHalted checks the read-back after a Halt, as the subject documents.
func (s *Subject) checkHalted(t *testing.T, d actuators.Driver, last float64) {
	t.Helper()
	if !s.ReadBack {
		return
	}
	switch s.AfterHalt {
	case HaltNoReading:
		v, err := s.readBack(t, d)
		if !errors.Is(err, actuators.ErrNoReading) {
			t.Fatalf("ReadBack after Halt = %g, %v; want an error wrapping actuators.ErrNoReading", v, err)
		}
	case HaltInert:
		s.wantRead(t, d, s.Inert, "Halt")
	case HaltHolds:
		s.wantRead(t, d, last, "Halt")
	}
}

// halt: Halt works, is idempotent, leaves the documented read-back, and a
// Set after it drives the output again. After a Break it returns within
// the bound, and works once the fault is gone (or at once, with
// HaltWhileBroken).
func (s *Subject) halt(t *testing.T) {
	in := s.instance(t)
	last := s.Values[len(s.Values)/2]
	s.mustSet(t, in.Driver, last)
	for i := range 3 {
		if err := s.haltErr(t, in.Driver); err != nil {
			t.Fatalf("Halt #%d: %v", i+1, err)
		}
		s.checkHalted(t, in.Driver, last)
	}
	// Set re-attaches.
	s.mustSet(t, in.Driver, s.Values[0])
	if s.ReadBack {
		s.wantRead(t, in.Driver, s.Values[0], "Set after Halt")
	}
	if in.Break == nil {
		return
	}
	restore := in.Break()
	if err := s.set(t, in.Driver, s.Values[1]); err == nil {
		restore()
		t.Fatal("Set while broken succeeded")
	}
	err := s.haltErr(t, in.Driver)
	restore()
	if s.HaltWhileBroken && err != nil {
		t.Fatalf("Halt while Set is failing: %v (the subject says Halt works then)", err)
	}
	if err := s.haltErr(t, in.Driver); err != nil {
		t.Fatalf("Halt once the fault is gone: %v", err)
	}
	// Where the broken Set left the output is in doubt: only the
	// documented read-back of an inert state can be checked.
	if s.AfterHalt != HaltHolds {
		s.checkHalted(t, in.Driver, math.NaN())
	}
}

// notApplied: every out-of-range value is refused with ErrNotApplied, and
// the output is unchanged as read back.
func (s *Subject) notApplied(t *testing.T) {
	if len(s.OutOfRange) == 0 {
		t.Skip("the subject lists no out-of-range values")
	}
	in := s.instance(t)
	held := s.Values[len(s.Values)-1]
	s.settle(t, in.Driver, held)
	for _, v := range s.OutOfRange {
		err := s.set(t, in.Driver, v)
		if !errors.Is(err, actuators.ErrNotApplied) {
			t.Errorf("Set(%g) = %v; want an error wrapping actuators.ErrNotApplied", v, err)
		}
		if s.ReadBack {
			if got, err := s.readBack(t, in.Driver); err != nil || !s.near(got, held) {
				t.Errorf("after the refused Set(%g), ReadBack = %g, %v; want %g unchanged", v, got, err, held)
			}
		}
	}
}

// inDoubt: a Set the fake breaks (a lost link, a timeout) fails with an
// error that does NOT wrap ErrNotApplied; a Set the device refuses fails
// with one that does, and leaves the output as it was.
func (s *Subject) inDoubt(t *testing.T) {
	in := s.instance(t)
	if in.Break == nil && in.Refuse == nil {
		t.Skip("the fake can neither break nor refuse")
	}
	held := s.Values[0]
	s.settle(t, in.Driver, held)
	other := s.Values[len(s.Values)-1]
	if in.Break != nil {
		restore := in.Break()
		err := s.set(t, in.Driver, other)
		restore()
		switch {
		case err == nil:
			t.Error("Set while broken succeeded")
		case errors.Is(err, actuators.ErrNotApplied):
			t.Errorf("Set while broken = %v: wraps actuators.ErrNotApplied, but its effect is in doubt", err)
		}
		// Usable again once restored.
		s.settle(t, in.Driver, held)
	}
	if in.Refuse != nil {
		restore := in.Refuse()
		err := s.set(t, in.Driver, other)
		if !errors.Is(err, actuators.ErrNotApplied) {
			t.Errorf("Set refused by the device = %v; want an error wrapping actuators.ErrNotApplied", err)
		}
		if s.ReadBack {
			if got, err := s.readBack(t, in.Driver); err != nil || !s.near(got, held) {
				t.Errorf("after the refused Set, ReadBack = %g, %v; want %g unchanged", got, err, held)
			}
		}
		restore()
		s.mustSet(t, in.Driver, other)
	}
}

// context: a Set on a context already cancelled, or past its deadline,
// returns promptly with an error. If that error promises nothing changed,
// the read-back agrees.
func (s *Subject) context(t *testing.T) {
	in := s.instance(t)
	held := s.Values[0]
	s.settle(t, in.Driver, held)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for name, ctx := range map[string]context.Context{"cancelled": cancelled, "expired": expired} {
		var err error
		start := time.Now()
		bounded(t, "Set on a "+name+" context", s.Slack, func() { err = in.Driver.Set(ctx, s.Values[len(s.Values)-1]) })
		if err == nil {
			t.Errorf("Set on a %s context succeeded", name)
			continue
		}
		if took := time.Since(start); took > s.Slack/2 {
			t.Errorf("Set on a %s context took %v", name, took)
		}
		if s.ReadBack && errors.Is(err, actuators.ErrNotApplied) {
			if got, rerr := s.readBack(t, in.Driver); rerr != nil || !s.near(got, held) {
				t.Errorf("Set on a %s context = %v (not applied), but ReadBack = %g, %v; want %g", name, err, got, rerr, held)
			}
		}
	}
	if rb, ok := in.Driver.(actuators.ReadBacker); ok {
		bounded(t, "ReadBack on a cancelled context", s.Slack, func() { _, _ = rb.ReadBack(cancelled) })
	}
}

// concurrent: callers Set, ReadBack and Halt at once (run it with -race):
// no race, no panic, every call returns, and the driver works afterwards.
func (s *Subject) concurrent(t *testing.T) {
	in := s.instance(t)
	rb, _ := in.Driver.(actuators.ReadBacker)
	var wg sync.WaitGroup
	errs := make(chan error, s.Goroutines*s.Rounds*3)
	for g := range s.Goroutines {
		wg.Go(func() {
			for r := range s.Rounds {
				v := s.Values[(g+r)%len(s.Values)]
				ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
				if err := in.Driver.Set(ctx, v); err != nil && !errors.Is(err, context.DeadlineExceeded) {
					// Contention may time a Set out; anything else is a
					// driver that cannot take concurrent callers.
					errs <- fmt.Errorf("Set(%g): %w", v, err)
				}
				if rb != nil {
					_, _ = rb.ReadBack(ctx)
				}
				cancel()
				if (g+r)%3 == 0 {
					if err := in.Driver.Halt(); err != nil {
						errs <- fmt.Errorf("Halt: %w", err)
					}
				}
			}
		})
	}
	bounded(t, "the concurrent callers", time.Duration(s.Rounds)*3*s.bound(), wg.Wait)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	last := s.Values[1]
	s.mustSet(t, in.Driver, last)
	if s.ReadBack {
		s.wantRead(t, in.Driver, last, "the concurrent calls and a last Set")
	}
}

// close: once closed, Set fails with an error and nothing panics; closing
// again is harmless.
func (s *Subject) close(t *testing.T) {
	in := s.instance(t)
	closeFn := in.Close
	if closeFn == nil {
		c, ok := in.Driver.(io.Closer)
		if !ok {
			t.Skip("nothing to close")
		}
		closeFn = c.Close
	}
	s.mustSet(t, in.Driver, s.Values[0])
	bounded(t, "Close", s.bound(), func() {
		if err := closeFn(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := s.set(t, in.Driver, s.Values[1]); err == nil {
		t.Error("Set after Close succeeded")
	}
	if rb, ok := in.Driver.(actuators.ReadBacker); ok {
		bounded(t, "ReadBack after Close", s.bound(), func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
			defer cancel()
			_, _ = rb.ReadBack(ctx)
		})
	}
	_ = s.haltErr(t, in.Driver) // may fail; must return
	bounded(t, "a second Close", s.bound(), func() { _ = closeFn() })
}
