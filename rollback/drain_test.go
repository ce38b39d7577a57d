package rollback

import (
	"errors"
	"testing"
	"time"
)

func codeOf(t *testing.T, err error) Code {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not an *Error", err)
	}
	return e.Code
}

// A drain refuses new sagas (DRAINING) but lets open ones step and commit
// until its deadline, when UnwindDrained unwinds them; ending it admits
// new sagas again.
func TestDrainRefusesNewSagasAndUnwindsAtTheDeadline(t *testing.T) {
	r := newRig(t, nil)
	open := r.begin(t)
	r.step(t, open, "a", "base", 5)
	done := r.begin(t)
	d, err := r.e.StartDrain(time.Minute, "http test: maintenance")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Begin(r.owner); codeOf(t, err) != CodeDraining {
		t.Fatalf("Begin while draining: %v, want DRAINING", err)
	}
	r.step(t, done, "b", "shoulder", 20)
	if err := r.e.Commit(done, r.owner); err != nil {
		t.Fatalf("Commit while draining: %v", err)
	}
	r.step(t, open, "c", "base", 6)
	reps := r.e.UnwindDrained(d)
	if len(reps) != 1 || reps[0].Saga != open || !reps[0].Clean() {
		t.Fatalf("deadline unwound %v, want saga %d, clean", reps, open)
	}
	if got := r.w.snapshot()["base"]; got != 0 {
		t.Fatalf("base at %g after the drain's unwind, want 0 (its prior)", got)
	}
	if got := r.w.snapshot()["shoulder"]; got != 20 {
		t.Fatalf("shoulder at %g: the committed saga was unwound", got)
	}
	if err := r.e.EndDrain("http test"); err != nil {
		t.Fatal(err)
	}
	if err := r.e.EndDrain("http test"); codeOf(t, err) != CodeNotDraining {
		t.Fatalf("second EndDrain: %v, want NOT_DRAINING", err)
	}
	r.begin(t)
	// A stale deadline (of a drain ended or replaced) unwinds nothing.
	if reps := r.e.UnwindDrained(d); len(reps) != 0 {
		t.Fatalf("a stale drain's deadline unwound %d sagas", len(reps))
	}
}

func TestDrainGraceBounds(t *testing.T) {
	r := newRig(t, nil)
	for _, g := range []time.Duration{-time.Second, MaxDrainGrace + time.Second} {
		if _, err := r.e.StartDrain(g, "x"); codeOf(t, err) != CodeBadRequest {
			t.Fatalf("grace %s: %v, want BAD_REQUEST", g, err)
		}
	}
	if _, on := r.e.Draining(); on {
		t.Fatal("a refused drain is in force")
	}
}

// Halt is not delayed or refused by a drain, and a drain may begin while
// halted.
func TestHaltDuringDrain(t *testing.T) {
	r := newRig(t, nil)
	s := r.begin(t)
	r.step(t, s, "a", "shoulder", 30)
	if _, err := r.e.StartDrain(time.Hour, "test"); err != nil {
		t.Fatal(err)
	}
	r.e.Halt("test halt")
	if h, _ := r.e.Halted(); !h {
		t.Fatal("halt did not latch during a drain")
	}
	if _, err := r.e.StartDrain(time.Hour, "again"); err != nil {
		t.Fatalf("drain while halted: %v", err)
	}
}

// Quarantine unwinds the agent's sagas and refuses its begins and steps;
// other agents go on; release lets it in again.
func TestQuarantineAgent(t *testing.T) {
	r := newRig(t, nil)
	other := Owner{Agent: "arm", Lease: "L2", Epoch: 2}
	s := r.begin(t)
	r.step(t, s, "a", "base", 7)
	os, err := r.e.Begin(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Step(os, other, Command{ID: "o1", Actuator: "elbow", Value: 25}); err != nil {
		t.Fatal(err)
	}
	reps, already, err := r.e.QuarantineAgent("planner", "http test: misbehaving")
	if err != nil || already {
		t.Fatalf("QuarantineAgent: %v already=%v", err, already)
	}
	if len(reps) != 1 || reps[0].Saga != s || !reps[0].Clean() {
		t.Fatalf("quarantine unwound %v, want saga %d", reps, s)
	}
	if got := r.w.snapshot()["base"]; got != 0 {
		t.Fatalf("base at %g, want 0", got)
	}
	if _, err := r.e.Begin(r.owner); codeOf(t, err) != CodeQuarantined {
		t.Fatalf("Begin of a quarantined agent: %v", err)
	}
	if _, err := r.e.Step(s, r.owner, Command{ID: "b", Actuator: "base", Value: 1}); codeOf(t, err) != CodeQuarantined {
		t.Fatalf("Step of a quarantined agent: %v", err)
	}
	if _, err := r.e.Step(os, other, Command{ID: "o2", Actuator: "elbow", Value: 26}); err != nil {
		t.Fatalf("another agent's step: %v", err)
	}
	if _, already, _ := r.e.QuarantineAgent("planner", "again"); !already {
		t.Fatal("a second quarantine was not reported as already")
	}
	if err := r.e.ReleaseAgent("arm", "x"); codeOf(t, err) != CodeNotQuarantined {
		t.Fatalf("release of an agent not quarantined: %v", err)
	}
	if err := r.e.ReleaseAgent("planner", "http test"); err != nil {
		t.Fatal(err)
	}
	r.begin(t)
}

// Drain and quarantine are rebuilt from the journal, and from a snapshot
// of it; a journal that ends one never begun is refused.
func TestDrainAndQuarantineRebuild(t *testing.T) {
	r := newRig(t, nil)
	r.begin(t)
	if _, err := r.e.StartDrain(90*time.Second, "ops: maintenance"); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"planner", "rogue", "gone"} {
		if _, _, err := r.e.QuarantineAgent(a, "ops: bad"); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.e.ReleaseAgent("gone", "ops"); err != nil {
		t.Fatal(err)
	}
	n := len(r.j.all())
	e, _ := freshEngine(t, r, Retrace)
	r.j.rebuildInto(t, e, n)
	check := func(e *Engine, how string) {
		d, on := e.Draining()
		if !on || d.Grace != 90*time.Second || d.Why != "ops: maintenance" || !d.Recovered {
			t.Fatalf("%s: drain %+v %v", how, d, on)
		}
		var names []string
		for _, q := range e.Quarantined() {
			names = append(names, q.Agent)
		}
		if len(names) != 2 || names[0] != "planner" || names[1] != "rogue" {
			t.Fatalf("%s: quarantined %v", how, names)
		}
		if _, err := e.Begin(Owner{Agent: "other", Lease: "x", Epoch: 9}); codeOf(t, err) != CodeDraining {
			t.Fatalf("%s: Begin: %v, want DRAINING", how, err)
		}
	}
	check(e, "rebuild")
	snap := mustSnapshot(t, e)
	got, _ := freshEngine(t, r, Retrace)
	if err := got.Restore(snap); err != nil {
		t.Fatal(err)
	}
	check(got, "snapshot")

	bad, _ := freshEngine(t, r, Retrace)
	for _, rec := range []Record{{Type: RecUndrain}, {Type: RecRelease, Agent: "x"}, {Type: RecQuarantine}} {
		if err := bad.Apply(1, uint8(rec.Type), rec.AppendEncode(nil)); err == nil {
			t.Fatalf("Apply of a lone %s succeeded", rec.Type)
		}
	}
}

// A version 1 snapshot (written before drains existed) still restores.
func TestSnapshotV1Restores(t *testing.T) {
	r := newRig(t, nil)
	s := r.begin(t)
	r.step(t, s, "a", "base", 3)
	e, _ := freshEngine(t, r, Retrace)
	r.j.rebuildInto(t, e, len(r.j.all()))
	v2 := mustSnapshot(t, e)
	// Version 2 with neither a drain nor a quarantine is version 1 plus
	// two zero bytes (no drain, no agents).
	if v2[0] != 2 || v2[len(v2)-2] != 0 || v2[len(v2)-1] != 0 {
		t.Fatalf("unexpected v2 tail % x", v2[len(v2)-2:])
	}
	v1 := append([]byte{1}, v2[1:len(v2)-2]...)
	got, _ := freshEngine(t, r, Retrace)
	if err := got.Restore(v1); err != nil {
		t.Fatalf("Restore of a v1 snapshot: %v", err)
	}
	if again := mustSnapshot(t, got); string(again) != string(v2) {
		t.Fatal("v1 restored differs from the v2 of the same state")
	}
}
