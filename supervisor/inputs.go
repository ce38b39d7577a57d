package supervisor

import (
	"fmt"
	"strings"
	"sync"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// Input is a safety input the supervisor watches: an e-stop, a link to a
// controller board. While Ready returns an error the supervisor is not
// ready, and its status says why.
type Input interface {
	Name() string
	Ready() error
}

// HaltLine carries halts from inputs that exist before the Supervisor does
// (an e-stop's press callback is wired when the pin is opened, the HTTP
// start-up handler serves while recovery runs) to the Supervisor once New
// has made it. It goes through three stages, and a halt is never lost
// between them:
//
//   - before crash recovery has an engine, a halt is kept (pending);
//     recovery asks for it before it finishes any open saga, so a robot
//     whose e-stop is found pressed at start is halted before recovery
//     moves anything;
//   - from that moment until New returns, a halt latches the recovering
//     engine at once (rollback.Engine.Latch: an atomic latch, no I/O),
//     which Recover checks before every compensation it drives;
//   - then it halts the Supervisor.
type HaltLine struct {
	mu      sync.Mutex
	sup     *Supervisor
	eng     *rollback.Engine // the recovering engine, until sup is bound
	pending string
	// Zones binds sources to zones (estop.zone): their halts halt the
	// zone. Set before the line is used. A zone's halt triggered before
	// the Supervisor exists halts everything: before recovery the zone
	// cannot be halted on its own, and the safe side is the full halt.
	Zones map[string]string
}

// maxPendingReason bounds the reasons a pending halt keeps: a flood of
// halts before recovery keeps the latch, not every reason.
const maxPendingReason = 1024

// Trigger halts the supervisor, or remembers the halt until there is one.
// It never waits on I/O: at every stage it takes one short lock and, at
// most, latches.
func (h *HaltLine) Trigger(source, reason string) {
	why := source
	if reason != "" {
		why += ": " + reason
	}
	h.mu.Lock()
	sup, eng := h.sup, h.eng
	if z := h.Zones[source]; z != "" && sup != nil {
		h.mu.Unlock()
		sup.HaltZone(z, source, reason)
		return
	}
	if sup == nil && eng == nil {
		switch {
		case h.pending == "" || strings.HasPrefix(why, h.pending+": "):
			h.pending = why // the first halt, or a fuller account of it (a reason read after the latch)
		case len(h.pending)+len(why) < maxPendingReason:
			h.pending += "; " + why
		}
	}
	h.mu.Unlock()
	switch {
	case sup != nil:
		sup.Halt(source, reason)
	case eng != nil:
		eng.Latch(why)
	}
}

// Latched reports whether a halt has been triggered on the line before
// the Supervisor exists (pending, or latched on the recovering engine),
// and why. With the Supervisor bound, its status says.
func (h *HaltLine) Latched() (bool, string) {
	h.mu.Lock()
	pending, eng := h.pending, h.eng
	h.mu.Unlock()
	if pending != "" {
		return true, pending
	}
	if eng != nil {
		return eng.Halted()
	}
	return false, ""
}

// latchOn returns a halt triggered before recovery had an engine, and
// makes later triggers latch e at once until bind.
func (h *HaltLine) latchOn(e *rollback.Engine) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.pending
	h.pending = ""
	h.eng = e
	return p
}

// bind delivers later triggers to s, and a halt that arrived between
// latchOn and now (none: latchOn's engine took those).
func (h *HaltLine) bind(s *Supervisor) {
	h.mu.Lock()
	h.sup, h.eng = s, nil
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
