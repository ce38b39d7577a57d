package supervisor

import (
	"fmt"
	"sync"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/api"
)

// Input is a safety input the supervisor watches: an e-stop, a link to a
// controller board. While Ready returns an error the supervisor is not
// ready, and its status says why.
type Input interface {
	Name() string
	Ready() error
}

// HaltLine carries halts from inputs that exist before the Supervisor does
// (an e-stop's press callback is wired when the pin is opened) to the
// Supervisor once New has made it. A halt triggered before then is kept:
// New asks for it before crash recovery, so that a robot whose e-stop is
// found pressed at start is halted before recovery moves anything.
type HaltLine struct {
	mu      sync.Mutex
	sup     *Supervisor
	pending string
	// Zones binds sources to zones (estop.zone): their halts halt the
	// zone. Set before the line is used. A zone's halt triggered before
	// the Supervisor exists halts everything: before recovery the zone
	// cannot be halted on its own, and the safe side is the full halt.
	Zones map[string]string
}

// Trigger halts the supervisor, or remembers the halt until there is one.
func (h *HaltLine) Trigger(source, reason string) {
	h.mu.Lock()
	sup := h.sup
	if z := h.Zones[source]; z != "" && sup != nil {
		h.mu.Unlock()
		sup.HaltZone(z, source, reason)
		return
	}
	if sup == nil && h.pending == "" {
		h.pending = source
		if reason != "" {
			h.pending += ": " + reason
		}
	}
	h.mu.Unlock()
	if sup != nil {
		sup.Halt(source, reason)
	}
}

// take returns a halt triggered before the supervisor existed.
func (h *HaltLine) take() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.pending
	h.pending = ""
	return p
}

// bind delivers later triggers to s, and a halt that arrived between take
// and now.
func (h *HaltLine) bind(s *Supervisor) {
	h.mu.Lock()
	h.sup = s
	p := h.pending
	h.pending = ""
	h.mu.Unlock()
	if p != "" {
		s.Halt(p, "")
	}
}

// polledEStop is an input that carries an e-stop the supervisor has to
// poll (a button wired to a controller board, reported in its telemetry).
// A press — a change to pressed — halts. (An e-stop on the supervisor's
// own pins reports presses itself, through the HaltLine.)
type polledEStop interface {
	EStopPressed() bool
}

// pollEStops halts on a newly pressed polled e-stop.
func (s *Supervisor) pollEStops() {
	for _, in := range s.opt.Inputs {
		p, ok := in.(polledEStop)
		if !ok {
			continue
		}
		down := p.EStopPressed()
		s.mu.Lock()
		was := s.pressed[in.Name()]
		s.pressed[in.Name()] = down
		s.mu.Unlock()
		if down && !was {
			s.Halt(in.Name(), "e-stop pressed")
		}
	}
}

// adoptDrift takes, as commanded, the values of outputs their devices moved
// on their own (a board's watchdog, restart or e-stop), so that the next
// step records the true prior and is limited from the true position.
func (s *Supervisor) adoptDrift() {
	for _, name := range s.reg.Names() {
		d, ok := s.reg.Get(name).Driver.(actuators.Drifter)
		if !ok {
			continue
		}
		adopted, err := s.engine.Adopt(name, d.Drifted, "the device reports the output elsewhere than commanded (its watchdog, restart or e-stop moved it)")
		if err != nil {
			s.log.Error("adopting a device's value", "actuator", name, "err", err)
		}
		if adopted {
			v, _ := s.engine.Commanded(name)
			s.publishEvent(api.Event{Kind: api.EventDrift, Actuator: name, Value: &v})
		}
	}
}

// inputReasons lists why inputs are not ready. An input bound to a zone
// holds only its zone's reset (zoneHeld), not the supervisor's readiness.
func inputReasons(inputs []Input, zones map[string]string) []string {
	var out []string
	for _, in := range inputs {
		if zones[in.Name()] != "" {
			continue
		}
		if err := in.Ready(); err != nil {
			out = append(out, fmt.Sprintf("input %s: %v", in.Name(), err))
		}
	}
	return out
}
