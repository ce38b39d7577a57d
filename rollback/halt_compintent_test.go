package rollback

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// latchOnCompIntent is a Journal that runs at (once) while the first
// COMP_INTENT is being synced: a halt latched there lands between a
// compensation's durable intent and its effect. at defaults to a full
// halt's latch.
type latchOnCompIntent struct {
	*memJournal
	e    **Engine
	at   func(*Engine)
	once sync.Once
}

func (j *latchOnCompIntent) Sync() error {
	err := j.memJournal.Sync()
	recs := j.all()
	if len(recs) > 0 && recs[len(recs)-1].Type == RecCompIntent {
		j.once.Do(func() {
			if j.at == nil {
				(*j.e).Latch("e-stop")
				return
			}
			j.at(*j.e)
		})
	}
	return err
}

// TestRebuildAgreesWhenHaltLandsBetweenCompIntentAndEffect (the soak, seed
// 4, fault #8 supply-sag): an unwind journals COMP_INTENT, a halt latches
// before the effect, the step is settled unresolved ("not attempted:
// halted") and nothing moved. The live engine keeps the actuator where it
// was; the rebuild must too.
func TestRebuildAgreesWhenHaltLandsBetweenCompIntentAndEffect(t *testing.T) {
	var e *Engine
	j := &latchOnCompIntent{memJournal: &memJournal{}, e: &e}
	r := newRig(t, func(c *Config) { c.Journal = j })
	e = r.e
	s := r.begin(t)
	r.step(t, s, "1", "base", 30)
	r.step(t, s, "2", "base", 60)
	rep, err := r.e.Abort(s, r.owner, "test")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Steps[0].Bucket != Unresolved {
		t.Fatalf("the halt did not land between the intent and the effect: %+v", rep)
	}
	if _, err := r.e.Halt("e-stop"); err != nil { // waits for the latched halt's pass
		t.Fatal(err)
	}
	next := newRig(t, nil)
	j.rebuildInto(t, next.e, len(j.all()))
	for _, name := range []string{"base", "shoulder", "elbow"} {
		live, _ := r.e.Commanded(name)
		rebuilt, _ := next.e.Commanded(name)
		if live != rebuilt {
			t.Errorf("%s: the live engine says %g, the rebuild %g (the world: %g)", name, live, rebuilt, r.w.snapshot()[name])
		}
	}
}

type readsBack struct {
	*fakeDriver
	v float64
}

func (d readsBack) ReadBack(context.Context) (float64, error) { return d.v, nil }

// TestRestartAfterHaltBetweenCompIntentAndEffect: the same journal, taken
// over by a restart whose drivers read back the world (base at 60). The
// reconcile accepts 60 as the journal's second value and the restart then
// believes base is at 30: the next saga's step records 30 as its prior,
// and a clean abort drives base to 30, where it never was.
func TestRestartAfterHaltBetweenCompIntentAndEffect(t *testing.T) {
	var e *Engine
	j := &latchOnCompIntent{memJournal: &memJournal{}, e: &e}
	r := newRig(t, func(c *Config) { c.Journal = j })
	e = r.e
	s := r.begin(t)
	r.step(t, s, "1", "base", 30)
	r.step(t, s, "2", "base", 60)
	if _, err := r.e.Abort(s, r.owner, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Halt("e-stop"); err != nil {
		t.Fatal(err)
	}
	next := newRig(t, nil)
	j.rebuildInto(t, next.e, len(j.all()))
	world := r.w.snapshot()
	for name, a := range map[string]float64{"base": world["base"], "shoulder": world["shoulder"], "elbow": world["elbow"]} {
		act := next.reg.Get(name)
		act.Driver = readsBack{fakeDriver: next.drivers[name], v: a}
	}
	ms, err := next.e.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := next.e.Commanded("base")
	t.Logf("world base=%g; after the restart's reconcile: mismatches %v, believed %g", world["base"], ms, got)
	if got != world["base"] {
		t.Errorf("after the restart the engine believes base at %g; it is at %g, and no mismatch was reported (%v)", got, world["base"], ms)
	}
	if _, err := next.e.Recover(); err != nil {
		t.Fatal(err)
	}
	if err := next.e.Reset("operator", next.e.HaltGen()); err != nil {
		t.Fatal(err)
	}
	s2 := next.begin(t)
	next.step(t, s2, "3", "base", 50)
	if _, err := next.e.Abort(s2, next.owner, "test"); err != nil {
		t.Fatal(err)
	}
	calls := next.w.setCalls()
	t.Logf("the next saga: base 60 -> 50, aborted; the driver's sets: %v", calls)
	if last := calls[len(calls)-1]; last.Actuator == "base" && last.Value != world["base"] {
		t.Errorf("a clean abort of the next saga drove base to %g; it was at %g before the saga", last.Value, world["base"])
	}
}

// TestReconcileAdoptsTheValueBeforeAMoveThatDidNotTake: the journal ends
// at a COMP_INTENT (a crash before its outcome), and the actuator reads
// back at the value before it: the move did not take. Reconcile accepts
// that (it is the journal's second value) and must believe it from then
// on, or the next saga records the intent's target as its prior and its
// clean abort drives the actuator to a place it never was.
func TestReconcileAdoptsTheValueBeforeAMoveThatDidNotTake(t *testing.T) {
	var e *Engine
	j := &latchOnCompIntent{memJournal: &memJournal{}, e: &e}
	r := newRig(t, func(c *Config) { c.Journal = j })
	e = r.e
	s := r.begin(t)
	r.step(t, s, "1", "base", 30)
	r.step(t, s, "2", "base", 60)
	if _, err := r.e.Abort(s, r.owner, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Halt("e-stop"); err != nil { // waits for the latched halt's pass
		t.Fatal(err)
	}
	n := 0
	for i, rec := range j.all() {
		if rec.Type == RecCompIntent {
			n = i + 1
			break
		}
	}
	if n == 0 {
		t.Fatal("no COMP_INTENT journaled")
	}
	// The crash: nothing after the intent but the halt that latched
	// during its sync (so that recovery moves nothing).
	next := newRig(t, nil)
	j.rebuildInto(t, next.e, n)
	halted := false
	j.mu.Lock()
	for i := n; i < len(j.types) && !halted; i++ {
		if RecordType(j.types[i]) == RecHalt {
			if err := next.e.Apply(uint64(n+1), j.types[i], j.raw[i]); err != nil {
				t.Fatal(err)
			}
			halted = true
		}
	}
	j.mu.Unlock()
	if !halted {
		t.Fatal("no HALT journaled after the intent")
	}
	world := r.w.snapshot()
	if world["base"] != 60 {
		t.Fatalf("base moved to %g: the halt did not come before the effect", world["base"])
	}
	for name, a := range map[string]float64{"base": world["base"], "shoulder": world["shoulder"], "elbow": world["elbow"]} {
		next.reg.Get(name).Driver = readsBack{fakeDriver: next.drivers[name], v: a}
	}
	ms, err := next.e.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// (The halt's safe moves of the others, after the crash point, are
	// mismatches of their own: the world saw them, this journal did not.)
	for _, m := range ms {
		if m.Actuator == "base" {
			t.Errorf("base reported as a mismatch (%v): 60 is the journal's second value", m)
		}
	}
	if got, _ := next.e.Commanded("base"); got != 60 {
		t.Fatalf("after reconcile: base believed at %g; it reads 60", got)
	}
	if _, err := next.e.Recover(); err != nil {
		t.Fatal(err)
	}
	if err := next.e.Reset("operator", next.e.HaltGen()); err != nil && !errors.Is(err, ErrClosed) {
		t.Logf("reset: %v", err)
	}
	s2 := next.begin(t)
	next.step(t, s2, "3", "base", 50)
	if _, err := next.e.Abort(s2, next.owner, "test"); err != nil {
		t.Fatal(err)
	}
	calls := next.w.setCalls()
	if last := calls[len(calls)-1]; last.Actuator != "base" || last.Value != 60 {
		t.Errorf("a clean abort of the next saga ended with %+v; base was at 60 before the saga (sets %v)", last, calls)
	}
}

// The same for a zone halt landing between a compensation's intent and
// its effect: the rebuild agrees with the engine that nothing moved.
func TestRebuildAgreesWhenAZoneHaltLandsBetweenCompIntentAndEffect(t *testing.T) {
	var e *Engine
	j := &latchOnCompIntent{memJournal: &memJournal{}, e: &e, at: func(e *Engine) { e.ZoneLatch("base", "zone e-stop") }}
	zones := func(c *Config) {
		c.Zones = map[string][]string{"arm": {"shoulder", "elbow"}, "base": {"base"}}
	}
	r := newRig(t, func(c *Config) { zones(c); c.Journal = j })
	e = r.e
	s := r.begin(t)
	r.step(t, s, "1", "base", 30)
	r.step(t, s, "2", "base", 60)
	rep, err := r.e.Abort(s, r.owner, "test")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Steps[0].Bucket != Unresolved {
		t.Fatalf("the zone halt did not land between the intent and the effect: %+v", rep)
	}
	if _, err := r.e.ZoneHalt("base", "zone e-stop"); err != nil {
		t.Fatal(err)
	}
	next := newRig(t, zones)
	j.rebuildInto(t, next.e, len(j.all()))
	live, _ := r.e.Commanded("base")
	rebuilt, _ := next.e.Commanded("base")
	if live != rebuilt || live != 60 {
		t.Errorf("base: the live engine says %g, the rebuild %g (the world: %g)", live, rebuilt, r.w.snapshot()["base"])
	}
}

// A halt's SAFE record lands between a compensation's COMP_INTENT and its
// withdrawn COMP_DONE: the safe value is where the actuator is, and the
// rebuild must not put it back at the value before the intent (the soak:
// journal elbow 70, world and engine 45).
func TestRebuildKeepsASafeMoveBeforeAWithdrawnCompensation(t *testing.T) {
	var e *Engine
	// The halt latches while the COMP_INTENT syncs, and that sync returns
	// only once the halt's pass has journaled a SAFE record: the order the
	// soak saw (seed 4, fault #89).
	safe := false
	var j *latchOnCompIntent
	j = &latchOnCompIntent{memJournal: &memJournal{}, e: &e, at: func(e *Engine) {
		e.Latch("supply rail tripped")
		for deadline := time.Now().Add(5 * time.Second); !safe && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			for _, r := range j.all() {
				safe = safe || r.Type == RecSafe
			}
		}
	}}
	r := newRig(t, func(c *Config) { c.Journal = j })
	e = r.e
	s := r.begin(t)
	r.step(t, s, "1", "shoulder", 30)
	r.step(t, s, "2", "shoulder", 60)
	rep, err := r.e.Abort(s, r.owner, "test")
	if err != nil {
		t.Fatal(err)
	}
	if !safe {
		t.Fatal("no SAFE journaled while the COMP_INTENT was syncing: the order under test did not happen")
	}
	if rep.Steps[0].Bucket != Unresolved {
		t.Fatalf("the halt did not land between the intent and the effect: %+v", rep)
	}
	if _, err := r.e.Halt("supply rail tripped"); err != nil {
		t.Fatal(err)
	}
	next := newRig(t, nil)
	j.rebuildInto(t, next.e, len(j.all()))
	live, _ := r.e.Commanded("shoulder")
	rebuilt, _ := next.e.Commanded("shoulder")
	if live != rebuilt || live != r.w.snapshot()["shoulder"] {
		t.Errorf("shoulder: the live engine says %g, the rebuild %g, the world %g", live, rebuilt, r.w.snapshot()["shoulder"])
	}
}
