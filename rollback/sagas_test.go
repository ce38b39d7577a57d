package rollback

import (
	"errors"
	"reflect"
	"testing"
)

// Sagas lists the open sagas in id order with their owners, abort reasons
// and steps — a step whose outcome the journal lacks has none, a step an
// unwind settled has its bucket — the same after Apply of a journal's
// prefix and after Restore of that prefix's snapshot; closed sagas are not
// listed, and the list is a copy.
func TestSagasListsOpenSagasWithOwnersAndSteps(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Order = Retrace })
	other := Owner{Agent: "controller", Lease: "L2", Epoch: 3}
	done := r.begin(t)
	r.step(t, done, "d1", "base", 5)
	if err := r.e.Commit(done, r.owner); err != nil {
		t.Fatal(err)
	}
	a := r.begin(t)
	r.step(t, a, "a1", "shoulder", 30)
	r.step(t, a, "a2", "elbow", 40)
	b, err := r.e.Begin(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Step(b, other, Command{ID: "b1", Actuator: "base", Value: 7}); err != nil {
		t.Fatal(err)
	}
	// a's unwind: elbow's compensation fails once and then succeeds.
	r.drivers["elbow"].fail = func(v float64, n int) error {
		if v == 20 && n == 2 {
			return errors.New("stuck")
		}
		return nil
	}
	if _, err := r.e.Abort(a, r.owner, "changed its mind"); err != nil {
		t.Fatal(err)
	}
	recs := r.j.all()
	if got := r.e.Sagas(); len(got) != 1 || got[0].ID != b || got[0].Owner != other {
		t.Fatalf("the serving engine's open sagas: %+v, want saga %d of %+v alone", got, b, other)
	}

	// Cut the journal just after a's elbow compensation was settled: a is
	// aborted, elbow compensated, shoulder not yet; b's step has no outcome
	// when the cut falls between its INTENT and APPLIED.
	at := func(match func(Record) bool) int {
		for i, rec := range recs {
			if match(rec) {
				return i + 1
			}
		}
		t.Fatalf("no such record in %+v", recs)
		return 0
	}
	bIntent := at(func(rec Record) bool { return rec.Type == RecIntent && rec.CmdID == "b1" })
	elbowSettled := at(func(rec Record) bool {
		return rec.Type == RecCompDone && rec.Saga == a && rec.Code == string(Compensated)
	})
	cuts := []struct {
		n    int
		want []OpenSaga
	}{
		{bIntent, []OpenSaga{
			{ID: a, Owner: r.owner, Steps: []OpenStep{{1, "shoulder", Applied, "", 30}, {2, "elbow", Applied, "", 40}}},
			{ID: b, Owner: other, Steps: []OpenStep{{1, "base", "", "", 7}}},
		}},
		{elbowSettled, []OpenSaga{
			{ID: a, Owner: r.owner, AbortReason: "changed its mind",
				Steps: []OpenStep{{1, "shoulder", Applied, "", 30}, {2, "elbow", Applied, Compensated, 40}}},
			{ID: b, Owner: other, Steps: []OpenStep{{1, "base", Applied, "", 7}}},
		}},
		{len(recs), []OpenSaga{{ID: b, Owner: other, Steps: []OpenStep{{1, "base", Applied, "", 7}}}}},
	}
	for _, c := range cuts {
		e, _ := freshEngine(t, r, Retrace)
		r.j.rebuildInto(t, e, c.n)
		if got := e.Sagas(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("after %d records: %+v\nwant %+v", c.n, got, c.want)
		}
		restored, _ := freshEngine(t, r, Retrace)
		if err := restored.Restore(mustSnapshot(t, e)); err != nil {
			t.Fatal(err)
		}
		if got := restored.Sagas(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("restored from the snapshot after %d records: %+v\nwant %+v", c.n, got, c.want)
		}
		got := e.Sagas()
		got[0].Owner.Agent, got[0].Steps[0].Actuator = "someone else", "wrist"
		if again := e.Sagas(); !reflect.DeepEqual(again, c.want) {
			t.Errorf("changing the list changed the engine: %+v", again)
		}
	}
}
