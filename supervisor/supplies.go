package supervisor

import (
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/limits"
)

// VoltSource reads one supply's voltage and the time of the reading: a
// simulated supply, MCU telemetry, an I2C monitor.
type VoltSource interface {
	Volts() (volts float64, at time.Time, err error)
}

// SupplyEvent is a supply tripping or clearing, for the supervisor to act
// on with the supply's action.
type SupplyEvent struct {
	Name    string
	Tripped bool // true: tripped now; false: cleared now
	State   limits.SupplyState
	Action  limits.Action
}

type supply struct {
	src     VoltSource
	mon     *limits.Supply
	action  limits.Action
	tripped bool
	readErr error
}

// Supplies watches every supply: readings go through the debounced,
// latched state machines of package limits. It answers the engine's supply
// gate (rollback.Supplies) and reports trips and clears from Poll.
type Supplies struct {
	mu    sync.Mutex
	items map[string]*supply
}

// NewSupplies returns an empty set of supplies.
func NewSupplies() *Supplies { return &Supplies{items: map[string]*supply{}} }

// Add watches a supply.
func (s *Supplies) Add(spec limits.SupplySpec, src VoltSource) error {
	mon, err := limits.NewSupply(spec)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.items[spec.Name]; dup {
		return fmt.Errorf("supervisor: supply %q added twice", spec.Name)
	}
	s.items[spec.Name] = &supply{src: src, mon: mon, action: spec.Action}
	return nil
}

// readLocked takes a fresh reading. A read error leaves the last reading to
// go stale: an unreadable sensor must end in not-ready, never in a frozen
// good value.
func (p *supply) readLocked() {
	v, at, err := p.src.Volts()
	p.readErr = err
	if err == nil {
		p.mon.Observe(v, at)
	}
}

// SupplyState implements rollback.Supplies: it reads the supply afresh, so
// the gate decides on the newest voltage.
func (s *Supplies) SupplyState(name string, now time.Time) (limits.SupplyState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.items[name]
	if p == nil {
		return limits.SupplyState{}, false
	}
	p.readLocked()
	st := p.mon.State(now)
	if p.action == limits.Warn && st.Known && !st.Stale {
		// A warn-only rail that tripped is reported (status, metrics, log)
		// but does not refuse motion; unknown or stale still does, and an
		// actuator's own voltage bounds still apply to the reading.
		st.Tripped, st.Code = false, limits.OK
	}
	return st, true
}

// Poll reads every supply and returns the supplies that tripped or cleared
// since the last Poll, in name order.
func (s *Supplies) Poll(now time.Time) []SupplyEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var evs []SupplyEvent
	for name, p := range s.inOrderLocked() {
		p.readLocked()
		st := p.mon.State(now)
		if st.Tripped != p.tripped {
			p.tripped = st.Tripped
			evs = append(evs, SupplyEvent{Name: name, Tripped: st.Tripped, State: st, Action: p.action})
		}
	}
	return evs
}

// States returns every supply's state, in name order, with the last read
// error if any.
func (s *Supplies) States(now time.Time) []SupplyStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SupplyStatus
	for _, p := range s.inOrderLocked() {
		st := SupplyStatus{SupplyState: p.mon.State(now), Action: p.action}
		if p.readErr != nil {
			st.ReadError = p.readErr.Error()
		}
		out = append(out, st)
	}
	return out
}

// SupplyStatus is a supply's state with its trip action and read error.
type SupplyStatus struct {
	limits.SupplyState
	Action    limits.Action
	ReadError string
}

// inOrderLocked yields every supply with its name, in name order.
func (s *Supplies) inOrderLocked() iter.Seq2[string, *supply] {
	return func(yield func(string, *supply) bool) {
		for _, name := range slices.Sorted(maps.Keys(s.items)) {
			if !yield(name, s.items[name]) {
				return
			}
		}
	}
}

// Specs returns every supply's configuration, in name order.
func (s *Supplies) Specs() []limits.SupplySpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []limits.SupplySpec
	for _, p := range s.inOrderLocked() {
		out = append(out, p.mon.Spec())
	}
	return out
}
