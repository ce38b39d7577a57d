package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// clock is the replay's virtual clock: the engine and the simulated world
// read it, and the replay sets it to each record's journal time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

// Now is the virtual time.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// set moves the clock to a record's wall time. A record without one (none
// the engine writes) leaves it where it is.
func (c *clock) set(unixNano int64) {
	if unixNano == 0 {
		return
	}
	c.mu.Lock()
	c.t = time.Unix(0, unixNano)
	c.mu.Unlock()
}

// nominalSupplies answers every configured supply as known, fresh and in
// range: the journal holds no voltages.
type nominalSupplies map[string]float64

// SupplyState implements rollback.Supplies.
func (n nominalSupplies) SupplyState(name string, now time.Time) (limits.SupplyState, bool) {
	v, ok := n[name]
	if !ok {
		return limits.SupplyState{}, false
	}
	return limits.SupplyState{Name: name, Known: true, Volts: v, At: now, Since: now}, true
}

// nominalVolts picks, for each supply, the middle of the band that the
// supply and every actuator drawing from it accept. When the bands do not
// overlap the supply's own middle is taken, and the note says so.
func nominalVolts(cfg *config.Config) (nominalSupplies, []string) {
	out := nominalSupplies{}
	var notes []string
	for _, name := range cfg.SupplyNames() {
		s := cfg.Supplies[name]
		lo, hi := s.MinVolts, s.MaxVolts
		for _, an := range cfg.ActuatorNames() {
			a := cfg.Actuators[an]
			if a.Supply != name {
				continue
			}
			if a.SupplyMinVolts != 0 {
				lo = max(lo, a.SupplyMinVolts)
			}
			if a.SupplyMaxVolts != 0 {
				hi = min(hi, a.SupplyMaxVolts)
			}
		}
		v := (lo + hi) / 2
		if lo > hi {
			v = (s.MinVolts + s.MaxVolts) / 2
			notes = append(notes, fmt.Sprintf("supply %s: no voltage suits every actuator on it; taken as %g V, its own middle", name, v))
		}
		out[name] = v
	}
	return out, notes
}

// faults makes the simulated drivers fail where the journal shows the real
// ones failed. A step's failure is armed just before its Step and taken by
// its effect; a compensation attempt's outcome is looked up by the saga and
// actuator of the COMP_INTENT the engine journaled just before the attempt.
type faults struct {
	mu    sync.Mutex
	armed map[string]error // actuator → the error its next Set returns (a step)
	// compSaga: the replay saga whose COMP_INTENT on the actuator was the
	// last record journaled, so the next Set on it is that compensation.
	compSaga map[string]uint64
	origOf   map[uint64]uint64 // replay saga id → the journal's
	script   map[compKey][]compAttempt
	injected int // failures made to happen (steps and compensations)
}

func newFaults(script map[compKey][]compAttempt) *faults {
	return &faults{armed: map[string]error{}, compSaga: map[string]uint64{}, origOf: map[uint64]uint64{}, script: script}
}

func (f *faults) arm(actuator string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.armed, actuator)
		return
	}
	f.armed[actuator] = err
}

// journaled is told of every record the replay's engine journals, in
// order. Only a COMP_INTENT is immediately followed by the Set it
// announces; any other record ends that expectation.
func (f *faults) journaled(r *rollback.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.compSaga)
	if r.Type == rollback.RecCompIntent {
		f.compSaga[r.Actuator] = r.Saga
	}
}

// take returns the error the next Set on actuator must return, or nil.
func (f *faults) take(actuator string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.armed[actuator]; err != nil {
		delete(f.armed, actuator)
		f.injected++
		return err
	}
	saga, ok := f.compSaga[actuator]
	if !ok {
		return nil
	}
	delete(f.compSaga, actuator)
	k := compKey{saga: f.origOf[saga], actuator: actuator}
	q := f.script[k]
	if len(q) == 0 {
		return nil
	}
	f.script[k] = q[1:]
	if !q[0].failed {
		return nil
	}
	f.injected++
	return fmt.Errorf("replayed from the journal: compensation attempt failed then: %s", q[0].message)
}

// scriptedDriver is a simulated driver that fails where the journal says.
type scriptedDriver struct {
	name  string
	inner actuators.Driver
	f     *faults
}

// Set fails as the journal says, or sets the simulated device.
func (d *scriptedDriver) Set(ctx context.Context, v float64) error {
	if err := d.f.take(d.name); err != nil {
		return err
	}
	return d.inner.Set(ctx, v)
}

// Halt detaches the simulated device.
func (d *scriptedDriver) Halt() error { return d.inner.Halt() }

// drop forgets the next scripted attempt on the journal's saga and
// actuator: the replay took it from the journal (inherited work) and does
// not make it.
func (f *faults) drop(k compKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if q := f.script[k]; len(q) > 0 {
		f.script[k] = q[1:]
	}
}

// stepError is the error a step's effect returns now because it failed
// then: not applied (the driver promised nothing moved) or in doubt.
func stepError(sf stepFailure) error {
	if sf.inDoubt {
		return fmt.Errorf("replayed from the journal: in doubt then: %s", sf.message)
	}
	return fmt.Errorf("replayed from the journal: failed then: %s: %w", sf.message, actuators.ErrNotApplied)
}

// simWorld is the replay's world: a simulated device per configured
// actuator (whatever its real driver), each behind the fault script.
type simWorld struct {
	world    *sim.World
	registry *actuators.Registry
	supplies nominalSupplies
	notes    []string
}

func buildWorld(cfg *config.Config, clk *clock, f *faults) (*simWorld, error) {
	w := sim.NewMemoryWorld(sim.WithClock(clk.Now))
	var list []*actuators.Actuator
	for _, name := range cfg.ActuatorNames() {
		a := cfg.Actuators[name]
		slew := 0.0
		if s, ok := a.Section.(*config.SimActuator); ok {
			slew = s.Slew
		}
		d, ok := w.ForKind(name, a.Kind, a.Initial, slew)
		if !ok {
			w.Close()
			return nil, fmt.Errorf("actuator %s: kind %q has no simulated device", name, a.Kind)
		}
		if err := d.Err(); err != nil {
			w.Close()
			return nil, fmt.Errorf("actuator %s: %w", name, err)
		}
		list = append(list, a.Actuator(name, &scriptedDriver{name: name, inner: d, f: f}))
	}
	reg, err := actuators.NewRegistry(list...)
	if err != nil {
		w.Close()
		return nil, err
	}
	sup, notes := nominalVolts(cfg)
	return &simWorld{world: w, registry: reg, supplies: sup, notes: notes}, nil
}

// scratch is the replay engine's journal: in memory, never the real one.
// It keeps every record (a restart rebuilds the engine from them) and tells
// the replay of each as it is written.
type scratch struct {
	mu     sync.Mutex
	types  []uint8
	ends   []int // ends[i] is where record i's payload ends in data
	data   []byte
	onRec  func(rollback.Record)
	broken error
}

// Enqueue implements rollback.Journal: the record is kept, in order.
func (j *scratch) Enqueue(typ uint8, p []byte) (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	r, err := rollback.DecodeRecord(typ, p)
	if err != nil {
		// The engine wrote it: a record it cannot read back is a bug, and
		// the replay must not go on as if it were fine.
		j.broken = fmt.Errorf("the replay's engine wrote a record it cannot read back: %w", err)
		return 0, j.broken
	}
	j.types = append(j.types, typ)
	j.data = append(j.data, p...)
	j.ends = append(j.ends, len(j.data))
	if j.onRec != nil {
		j.onRec(r)
	}
	return uint64(len(j.types)), nil
}

// Sync implements rollback.Journal: memory is as durable as it gets.
func (j *scratch) Sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.broken
}

// keep adds a record the replay took from the journal, as if its engine
// had journaled it, so that a restart rebuilds from it too; the hook is
// not told (the record is not the engine's own decision).
func (j *scratch) keep(typ uint8, p []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.types = append(j.types, typ)
	j.data = append(j.data, p...)
	j.ends = append(j.ends, len(j.data))
}

// each calls fn for every record journaled so far, in order.
func (j *scratch) each(fn func(seq uint64, typ uint8, p []byte) error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	start := 0
	for i, typ := range j.types {
		if err := fn(uint64(i+1), typ, j.data[start:j.ends[i]]); err != nil {
			return err
		}
		start = j.ends[i]
	}
	return nil
}

// discard is the journal of the engine that only reads the journal (the
// journal's view): Apply writes nothing, so nothing arrives here.
type discard struct{}

// Enqueue refuses: the view is built with Apply only.
func (discard) Enqueue(uint8, []byte) (uint64, error) {
	return 0, errors.New("replay: the journal's view never journals")
}

// Sync has nothing to do.
func (discard) Sync() error { return nil }

// tolerance is, per actuator, how far a value may differ and still count as
// the same: max_rate × the time tolerance, because the journal's times are
// taken a moment after the gate read its clock. Without a rate limit time
// decides nothing, and values must match exactly.
func tolerance(cfg *config.Config, slack time.Duration) map[string]float64 {
	out := map[string]float64{}
	for _, name := range cfg.ActuatorNames() {
		out[name] = cfg.Actuators[name].MaxRate * slack.Seconds()
	}
	return out
}

func same(a, b, tol float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= tol
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
