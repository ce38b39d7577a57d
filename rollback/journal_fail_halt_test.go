package rollback

import (
	"errors"
	"syscall"
	"testing"
)

// failOnSync is a Journal whose disk dies (EIO, sticky) at the first sync
// of a record of type typ: the failure latches the halt, whose pass runs
// on the engine's goroutine while the saga that was syncing is busy.
type failOnSync struct {
	*memJournal
	typ RecordType
}

func (j *failOnSync) Sync() error {
	recs := j.all()
	if len(recs) > 0 && recs[len(recs)-1].Type == j.typ {
		j.memJournal.mu.Lock()
		if j.memJournal.failErr == nil {
			j.memJournal.failErr = syscall.EIO
		}
		j.memJournal.mu.Unlock()
	}
	return j.memJournal.Sync()
}

// endedByTheJournalsHalt checks that err is JOURNAL_FAILED with the
// saga's report, and that once the halt the failure latched is applied
// no saga is left open.
func endedByTheJournalsHalt(t *testing.T, r *rig, saga uint64, err error) {
	t.Helper()
	var ee *Error
	if !errors.As(err, &ee) || ee.Code != CodeJournalFailed {
		t.Fatalf("err %v, want %s", err, CodeJournalFailed)
	}
	if ee.Report == nil || ee.Report.Saga != saga {
		t.Errorf("JOURNAL_FAILED without saga %d's report (%+v): whether the halt the failure latched ended the saga depended on which goroutine took the lock first", saga, ee.Report)
	}
	r.e.WaitHalts()
	if open := r.e.OpenSagas(); len(open) != 0 {
		t.Errorf("sagas %v open after the journal's halt was applied", open)
	}
}

// The model check (a zone's halt at a step's INTENT sync, the disk dying
// there: n1.b1.order2.expire1.zsync3-arm.eio) ran one case two ways: the
// halt the disk's failure latched ended the saga whose INTENT failed to
// sync in one run and left it open, with no report, in the other. Step
// ends it itself, as the halt would, and answers with its report.
func TestStepWhoseIntentSyncFailsEndsItsSaga(t *testing.T) {
	j := &failOnSync{memJournal: &memJournal{}, typ: RecIntent}
	r := newRig(t, func(c *Config) { c.Journal = j })
	s := r.begin(t)
	_, err := r.e.Step(s, r.owner, Command{ID: "1", Actuator: "shoulder", Value: 30})
	endedByTheJournalsHalt(t, r, s, err)
}

// The same for a commit whose COMMIT fails to sync.
func TestCommitWhoseSyncFailsEndsItsSaga(t *testing.T) {
	j := &failOnSync{memJournal: &memJournal{}, typ: RecCommit}
	r := newRig(t, func(c *Config) { c.Journal = j })
	s := r.begin(t)
	r.step(t, s, "1", "shoulder", 30)
	err := r.e.Commit(s, r.owner)
	endedByTheJournalsHalt(t, r, s, err)
}
