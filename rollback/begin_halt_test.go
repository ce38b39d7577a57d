package rollback

import (
	"errors"
	"sync"
	"syscall"
	"testing"
)

// haltOnBeginSync is a Journal that, once, while the first BEGIN is being
// synced, runs at: a halt landing between a saga's registration and its
// BEGIN's durability. With fail set, that sync (and every write after it)
// fails, as a disk gone EIO does, and the BEGIN never becomes durable.
type haltOnBeginSync struct {
	*memJournal
	e    **Engine
	fail bool
	reps []*Report
	once sync.Once
}

func (j *haltOnBeginSync) Sync() error {
	recs := j.all()
	if len(recs) == 0 || recs[len(recs)-1].Type != RecBegin {
		return j.memJournal.Sync()
	}
	j.once.Do(func() {
		if j.fail {
			j.memJournal.mu.Lock()
			j.memJournal.failErr = syscall.EIO
			j.memJournal.mu.Unlock()
		}
		j.reps, _ = (*j.e).Halt("e-stop")
	})
	return j.memJournal.Sync()
}

// TestNoReportForABeginThatNeverBecameDurable (the hour's soak, seed 4: 50
// violations "saga 9514 of soak-gripper committed, yet a rollback report
// says it was unwound"). The disk failed while a BEGIN was synced; the
// halt that failure latched closed the saga and published a report for
// it. The BEGIN was never durable, so after the restart the rebuild handed
// the same id out again, and the new saga committed. A saga whose BEGIN
// is not durable did not exist: no report may name it.
func TestNoReportForABeginThatNeverBecameDurable(t *testing.T) {
	var e *Engine
	j := &haltOnBeginSync{memJournal: &memJournal{}, e: &e, fail: true}
	r := newRig(t, func(c *Config) { c.Journal = j })
	e = r.e
	id, err := r.e.Begin(r.owner)
	var ee *Error
	if !errors.As(err, &ee) || ee.Code != CodeJournalFailed {
		t.Fatalf("Begin on a failing disk: saga %d, err %v; want %s", id, err, CodeJournalFailed)
	}
	if ee.Report != nil {
		t.Errorf("Begin's refusal carries a report for a saga that never existed: %+v", ee.Report)
	}
	for _, rep := range j.reps {
		t.Errorf("the halt reported saga %d (%s), whose BEGIN never became durable: after a restart its id is handed out again", rep.Saga, rep.Reason)
	}
	for _, rec := range j.durableRecords() {
		if rec.Type == RecBegin {
			t.Fatalf("the BEGIN became durable after all: %+v", rec)
		}
	}
	// The id is free again after a restart, which is why no report may
	// name it.
	next := newRig(t, nil)
	j.rebuildInto(t, next.e, len(j.durableRecords()))
	if again := next.begin(t); again != 1 {
		t.Fatalf("after the restart the first saga is %d, want 1 (the rebuild counts durable BEGINs)", again)
	}
}

// TestBeginDurableWhileAHaltPassedIsEnded: the BEGIN became durable, but a
// halt's pass ran while it was synced. The agent must not be handed a
// saga that is already ended (or, worse, one left open under a latched
// halt): Begin answers HALTED with the saga's report, and the journal
// ends the saga it begins.
func TestBeginDurableWhileAHaltPassedIsEnded(t *testing.T) {
	var e *Engine
	j := &haltOnBeginSync{memJournal: &memJournal{}, e: &e}
	r := newRig(t, func(c *Config) { c.Journal = j })
	e = r.e
	id, err := r.e.Begin(r.owner)
	var ee *Error
	if !errors.As(err, &ee) || ee.Code != CodeHalted {
		t.Fatalf("Begin while a halt passed: saga %d, err %v; want %s", id, err, CodeHalted)
	}
	if ee.Report == nil || ee.Report.Saga != 1 {
		t.Fatalf("HALTED without the ended saga's report: %+v", ee.Report)
	}
	for _, rep := range j.reps {
		if rep.Saga == 1 {
			t.Errorf("the halt's pass ended saga 1 while its BEGIN was being synced")
		}
	}
	if err := r.e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.memJournal.Sync(); err != nil { // as closing the wal flushes
		t.Fatal(err)
	}
	var begun, ended bool
	for _, rec := range j.durableRecords() {
		switch {
		case rec.Type == RecBegin && rec.Saga == 1:
			begun = true
		case rec.Type == RecEnd && rec.Saga == 1:
			ended = true
		}
	}
	if !begun || !ended {
		t.Fatalf("journal: BEGIN %v, END %v for saga 1; want both", begun, ended)
	}
	next := newRig(t, nil)
	j.rebuildInto(t, next.e, len(j.durableRecords()))
	if open := next.e.OpenSagas(); len(open) != 0 {
		t.Fatalf("the rebuild finds sagas open: %v", open)
	}
}
