package rollback

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/limits"
)

// memJournal is an in-memory Journal that knows which records are durable.
type memJournal struct {
	mu      sync.Mutex
	recs    []Record
	raw     [][]byte
	types   []uint8
	durable int   // records [0,durable) are synced
	failAt  int   // fail the Enqueue that would make record failAt+1 (0: never)
	failErr error // sticky once failed
}

func (j *memJournal) Enqueue(typ uint8, p []byte) (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failErr != nil {
		return 0, j.failErr
	}
	if j.failAt > 0 && len(j.recs)+1 == j.failAt {
		j.failErr = errors.New("injected write error")
		return 0, j.failErr
	}
	r, err := DecodeRecord(typ, p)
	if err != nil {
		panic(err)
	}
	j.recs = append(j.recs, r)
	j.raw = append(j.raw, append([]byte(nil), p...))
	j.types = append(j.types, typ)
	return uint64(len(j.recs)), nil
}

func (j *memJournal) Sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failErr != nil {
		return j.failErr
	}
	j.durable = len(j.recs)
	return nil
}

func (j *memJournal) durableRecords() []Record {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Record(nil), j.recs[:j.durable]...)
}

func (j *memJournal) all() []Record {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Record(nil), j.recs...)
}

// rebuildInto feeds the first n records (durable ones by default) to e.
func (j *memJournal) rebuildInto(t *testing.T, e *Engine, n int) {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := 0; i < n; i++ {
		if err := e.Apply(uint64(i+1), j.types[i], j.raw[i]); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
}

// setCall is one driver call seen by fakeDriver.
type setCall struct {
	Actuator string
	Value    float64
}

// fakeDriver records sets and can fail them. It checks the step protocol:
// when check is set, every Set must find its intent durable.
type fakeDriver struct {
	name  string
	world *fakeWorld
	fail  func(value float64, n int) error // n counts this driver's Sets from 1
	n     int
	halts int
}

type fakeWorld struct {
	mu    sync.Mutex
	calls []setCall
	value map[string]float64
	check func(actuator string, value float64) // run inside Set
}

func (d *fakeDriver) Set(ctx context.Context, v float64) error {
	d.world.mu.Lock()
	d.n++
	n := d.n
	fail := d.fail
	check := d.world.check
	d.world.mu.Unlock()
	if check != nil {
		check(d.name, v)
	}
	if fail != nil {
		if err := fail(v, n); err != nil {
			// A timeout hangs until the deadline, unless the driver says
			// it sent nothing: then there is nothing to wait for.
			if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, actuators.ErrNotApplied) {
				<-ctx.Done()
				return fmt.Errorf("hung: %w", ctx.Err())
			}
			return err
		}
	}
	d.world.mu.Lock()
	defer d.world.mu.Unlock()
	d.world.calls = append(d.world.calls, setCall{d.name, v})
	d.world.value[d.name] = v
	return nil
}

func (d *fakeDriver) Halt() error {
	d.world.mu.Lock()
	defer d.world.mu.Unlock()
	d.halts++
	return nil
}

func (w *fakeWorld) snapshot() map[string]float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := make(map[string]float64, len(w.value))
	for k, v := range w.value {
		m[k] = v
	}
	return m
}

func (w *fakeWorld) setCalls() []setCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]setCall(nil), w.calls...)
}

// rig is an engine on four servos (an arm), a pulse and a fake journal.
type rig struct {
	j       *memJournal
	w       *fakeWorld
	drivers map[string]*fakeDriver
	reg     *actuators.Registry
	e       *Engine
	owner   Owner
}

func newRig(t testing.TB, mod func(*Config)) *rig {
	t.Helper()
	r := &rig{j: &memJournal{}, w: &fakeWorld{value: map[string]float64{}}, drivers: map[string]*fakeDriver{}}
	var list []*actuators.Actuator
	add := func(name string, kind actuators.Kind, initial float64, spec limits.Spec, safe actuators.SafePolicy) {
		d := &fakeDriver{name: name, world: r.w}
		r.drivers[name] = d
		r.w.value[name] = initial
		list = append(list, &actuators.Actuator{Name: name, Kind: kind, Limits: spec, Safe: safe, Initial: initial, Driver: d, Timeout: 50e6})
	}
	servo := limits.Spec{Min: -90, Max: 90}
	add("base", actuators.Servo, 0, servo, actuators.SafePolicy{Mode: actuators.SafeHold})
	add("shoulder", actuators.Servo, 10, servo, actuators.SafePolicy{Mode: actuators.SafeValue, Value: 0})
	add("elbow", actuators.Servo, 20, servo, actuators.SafePolicy{Mode: actuators.SafeValue, Value: 0})
	add("gripper", actuators.Servo, 0, limits.Spec{Min: 0, Max: 1}, actuators.SafePolicy{Mode: actuators.SafeDetach})
	add("kicker", actuators.Pulse, 0, limits.Spec{Min: 0, Max: 1}, actuators.SafePolicy{})
	reg, err := actuators.NewRegistry(list...)
	if err != nil {
		t.Fatal(err)
	}
	r.reg = reg
	cfg := Config{Journal: r.j, Actuators: reg, RetryBackoff: 1}
	if mod != nil {
		mod(&cfg)
	}
	r.e, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.owner = Owner{Agent: "planner", Lease: "L1", Epoch: 1}
	return r
}

func (r *rig) begin(t *testing.T) uint64 {
	t.Helper()
	id, err := r.e.Begin(r.owner)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return id
}

func (r *rig) step(t *testing.T, saga uint64, id, act string, v float64) {
	t.Helper()
	if _, err := r.e.Step(saga, r.owner, Command{ID: id, Actuator: act, Value: v}); err != nil {
		t.Fatalf("Step %s %s=%g: %v", id, act, v, err)
	}
}
