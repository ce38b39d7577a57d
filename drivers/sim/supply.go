package sim

import (
	"fmt"
	"slices"
	"time"
)

// Supply is a simulated voltage source, such as the battery the servos draw
// from, whose voltage a test sets or scripts so that the gate's supply checks
// can be exercised. It is not an actuator. Of its Faults only a lost link
// applies: Volts then fails as a real ADC behind a dead bus would.
type Supply struct {
	Faults
	device
}

// ScriptPoint is one point of a supply's voltage script: Volts at At after
// the script starts.
type ScriptPoint struct {
	At    time.Duration
	Volts float64
}

// Supply returns the supply named name, made at volts. As with Servo, an
// existing device's voltage wins over volts.
func (w *World) Supply(name string, volts float64) *Supply {
	s := &Supply{}
	if !finite(volts) {
		s.err = fmt.Errorf("sim: supply %s: voltage %g is not finite", name, volts)
	}
	return attach(w, s, &s.Faults, &s.device, name, kindSupply, state{commanded: volts, from: volts})
}

// SetVolts sets the voltage at once, ending any script.
func (s *Supply) SetVolts(v float64) error {
	if s.err != nil {
		return s.err
	}
	if !finite(v) {
		return s.fail("set volts", v, fmt.Errorf("value is not finite"))
	}
	r := s.rec
	if r.w.closed.Load() {
		return s.fail("set volts", v, ErrWorldClosed)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.st
	st.commanded, st.from, st.since = v, v, r.w.now()
	if err := r.commitLocked(&st); err != nil {
		return s.fail("set volts", v, err)
	}
	r.script = nil
	return nil
}

// Script makes the voltage follow points from now on, in straight lines
// between them, starting from the present voltage and holding the last
// point's voltage after it; two points at the same At make a step. At must
// not decrease from one point to the next. A script models a sag under load
// in a test; it belongs to this process and is not kept in the world file,
// which keeps the voltage of the last SetVolts. An empty script ends the
// current one.
func (s *Supply) Script(points []ScriptPoint) error {
	if s.err != nil {
		return s.err
	}
	for i, p := range points {
		switch {
		case p.At < 0:
			return fmt.Errorf("sim: supply %s: script point %d: negative time %v", s.name, i, p.At)
		case i > 0 && p.At < points[i-1].At:
			return fmt.Errorf("sim: supply %s: script point %d: time %v is before the previous point's %v", s.name, i, p.At, points[i-1].At)
		case !finite(p.Volts):
			return fmt.Errorf("sim: supply %s: script point %d: voltage %g is not finite", s.name, i, p.Volts)
		}
	}
	r := s.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.w.now()
	start := r.volts(now)
	if len(points) == 0 {
		r.script = nil
		return nil
	}
	// The script starts from the present voltage, which may be partway
	// through an earlier script; keeping it as an implicit first point
	// avoids a jump at the start.
	r.script = append([]ScriptPoint{{At: 0, Volts: start}}, slices.Clone(points)...)
	r.scriptStart = now
	return nil
}

// Volts returns the voltage and the time it was read.
func (s *Supply) Volts() (float64, time.Time, error) {
	if s.err != nil {
		return 0, time.Time{}, s.err
	}
	if _, err := s.Faults.link(); err != nil {
		return 0, time.Time{}, fmt.Errorf("sim: supply %s: read volts: %w", s.name, err)
	}
	r := s.rec
	if r.w.closed.Load() {
		return 0, time.Time{}, fmt.Errorf("sim: supply %s: read volts: %w", s.name, ErrWorldClosed)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.w.clock()
	return r.volts(t.UnixNano()), t, nil
}

// volts is the supply's voltage at now. The caller holds r.mu.
func (r *record) volts(now int64) float64 {
	if len(r.script) == 0 {
		return r.st.commanded
	}
	elapsed := time.Duration(max(now-r.scriptStart, 0))
	prev := r.script[0]
	for _, p := range r.script[1:] {
		if elapsed < p.At {
			frac := float64(elapsed-prev.At) / float64(p.At-prev.At)
			return prev.Volts + frac*(p.Volts-prev.Volts)
		}
		prev = p
	}
	return prev.Volts
}
