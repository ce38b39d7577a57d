package rollback

import (
	"errors"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// Shorthands for the records of the rule table.
func rBegin(saga uint64) Record {
	return Record{Type: RecBegin, Saga: saga, Agent: "planner", Lease: "L1", Epoch: 1}
}
func rIntent(saga uint64, step uint32, act string) Record {
	return Record{Type: RecIntent, Saga: saga, Step: step, Actuator: act, Target: float64(step), Prior: float64(step - 1)}
}
func rApplied(saga uint64, step uint32) Record {
	return Record{Type: RecApplied, Saga: saga, Step: step}
}
func rFailed(saga uint64, step uint32, inDoubt bool) Record {
	r := Record{Type: RecFailed, Saga: saga, Step: step, Code: "FAILED", Message: "driver error"}
	if inDoubt {
		r.Code, r.Flags = "IN_DOUBT", FlagInDoubt
	}
	return r
}
func rAbort(saga uint64, why string) Record { return Record{Type: RecAbort, Saga: saga, Message: why} }
func rCompIntent(saga uint64, step uint32, act string, attempt uint32) Record {
	return Record{Type: RecCompIntent, Saga: saga, Step: step, Actuator: act, Target: float64(step - 1), Attempt: attempt}
}
func rCompDone(saga uint64, step uint32, act string, b Bucket) Record {
	return Record{Type: RecCompDone, Saga: saga, Step: step, Actuator: act, Code: string(b), Attempt: 1}
}
func rEnd(saga uint64, verdict string) Record { return Record{Type: RecEnd, Saga: saga, Code: verdict} }
func rCommit(saga uint64) Record              { return Record{Type: RecCommit, Saga: saga} }
func rRecovery(msg string) Record             { return Record{Type: RecRecovery, Message: msg} }

// ruleCases is every rule the rebuild enforces, each shown by a record
// sequence and the record it refuses (refused, 1-based; 0: the sequence is
// one the engine writes and is accepted), and sequences the engine does
// write that lie close to a rule.
var ruleCases = []struct {
	name    string
	recs    []Record
	refused int    // 1-based index of the refused record; 0: all accepted
	why     string // a word of the refusal
}{
	// Sequences the engine writes.
	{"commit", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rIntent(1, 2, "elbow"), rApplied(1, 2), rCommit(1)}, 0, ""},
	{"commit of an empty saga", []Record{rBegin(1), rCommit(1)}, 0, ""},
	{"unwind after a failed step", []Record{rBegin(1), rIntent(1, 1, "base"), rFailed(1, 1, true), rAbort(1, "step 1 in doubt"),
		rCompIntent(1, 1, "base", 1), rCompDone(1, 1, "base", Compensated), rEnd(1, "clean")}, 0, ""},
	{"a failed compensation attempt, then a retry", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rAbort(1, "agent aborted"),
		rCompIntent(1, 1, "base", 1), rCompDone(1, 1, "base", ""), rCompIntent(1, 1, "base", 2), rCompDone(1, 1, "base", Compensated), rEnd(1, "clean")}, 0, ""},
	{"recovery of a step with no outcome", []Record{rBegin(1), rIntent(1, 1, "base"), rRecovery("1 open sagas"), rAbort(1, "supervisor restarted with the saga open"),
		rCompIntent(1, 1, "base", 1), rCompDone(1, 1, "base", Compensated), rEnd(1, "clean"), rRecovery("recovery finished")}, 0, ""},
	{"halt ends a saga unresolved", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), {Type: RecHalt, Message: "operator"},
		rAbort(1, "halted: operator"), rCompDone(1, 1, "base", Unresolved), rEnd(1, "partial")}, 0, ""},
	{"halt wins over an intent", []Record{rBegin(1), rIntent(1, 1, "base"), {Type: RecHalt, Message: "operator"},
		{Type: RecFailed, Saga: 1, Step: 1, Code: "NOT_APPLIED"}, rAbort(1, "halted: operator"), rCompDone(1, 1, "base", Unresolved), rEnd(1, "partial")}, 0, ""},
	{"direct order resumed after a crash between two settlements", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rIntent(1, 2, "base"), rApplied(1, 2),
		rAbort(1, "agent aborted"), rCompIntent(1, 1, "base", 1), rCompDone(1, 1, "base", Compensated), rRecovery("1 open sagas"),
		// The settled step 1 still leads its group: the compensation and a
		// failed attempt are journaled under it.
		rCompIntent(1, 1, "base", 2), {Type: RecCompDone, Saga: 1, Step: 1, Actuator: "base", Attempt: 2, Message: "timeout"},
		rCompIntent(1, 1, "base", 3), rCompDone(1, 2, "base", Compensated), rEnd(1, "clean")}, 0, ""},
	{"an ABORT without a reason, resumed", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rAbort(1, ""), rRecovery("1 open sagas"),
		rCompIntent(1, 1, "base", 1), rCompDone(1, 1, "base", Compensated), rEnd(1, "clean")}, 0, ""},
	{"a refusal may name any saga", []Record{{Type: RecRefused, Saga: 99, Code: "SAGA_UNKNOWN"}, rBegin(1), {Type: RecRefused, Saga: 1, Code: "LIMIT_MAX"}, rCommit(1),
		{Type: RecRefused, Saga: 1, Code: "SAGA_UNKNOWN"}}, 0, ""},

	// BEGIN.
	{"a second BEGIN of an open saga", []Record{rBegin(1), rBegin(1)}, 2, "already open"},
	{"a BEGIN below an earlier one", []Record{rBegin(2), rCommit(2), rBegin(1)}, 3, "begun after saga 2"},
	{"a saga id reused after its commit", []Record{rBegin(1), rCommit(1), rBegin(1)}, 3, "begun after saga 1"},
	// INTENT.
	{"a step of a saga never begun", []Record{rIntent(1, 1, "base")}, 1, "not open"},
	{"a step number skipped", []Record{rBegin(1), rIntent(1, 2, "base")}, 2, "step 2 follows step 0"},
	{"a step while the previous one has no outcome", []Record{rBegin(1), rIntent(1, 1, "base"), rIntent(1, 2, "elbow")}, 3, "no outcome"},
	{"a step after the saga's ABORT", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rAbort(1, "x"), rIntent(1, 2, "base")}, 5, "after its ABORT"},
	// APPLIED, FAILED.
	{"an outcome of a step never begun", []Record{rBegin(1), rApplied(1, 1)}, 2, "no step 1"},
	// A step number of 2^31 or more is a negative int on a 32-bit ARM: it
	// must be refused there too, not index the steps (make test-arm).
	{"an outcome of step 2^31", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1<<31)}, 3, "no step 2147483648"},
	{"an outcome of step 2^32-1", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1<<32-1)}, 3, "no step 4294967295"},
	{"a compensation of step 2^32-1", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rAbort(1, "x"),
		rCompDone(1, 1<<32-1, "base", Compensated)}, 5, "no step 4294967295"},
	{"a second APPLIED", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rApplied(1, 1)}, 4, "already has an outcome"},
	{"FAILED after APPLIED", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rFailed(1, 1, false)}, 4, "already has an outcome"},
	{"APPLIED after FAILED in doubt", []Record{rBegin(1), rIntent(1, 1, "base"), rFailed(1, 1, true), rApplied(1, 1)}, 4, "already has an outcome"},
	{"an outcome after the saga's ABORT", []Record{rBegin(1), rIntent(1, 1, "base"), rAbort(1, "x"), rApplied(1, 1)}, 4, "after its ABORT"},
	// COMMIT.
	{"COMMIT after ABORT", []Record{rBegin(1), rAbort(1, "x"), rCommit(1)}, 3, "after its ABORT"},
	{"COMMIT with a step in flight", []Record{rBegin(1), rIntent(1, 1, "base"), rCommit(1)}, 3, "step 1 has no outcome"},
	{"COMMIT with a step in doubt", []Record{rBegin(1), rIntent(1, 1, "base"), rFailed(1, 1, true), rCommit(1)}, 4, "step 1 in_doubt"},
	{"COMMIT with a failed step", []Record{rBegin(1), rIntent(1, 1, "base"), rFailed(1, 1, false), rCommit(1)}, 4, "step 1 failed"},
	{"COMMIT of a committed saga", []Record{rBegin(1), rCommit(1), rCommit(1)}, 3, "not open"},
	// ABORT.
	{"a second ABORT", []Record{rBegin(1), rAbort(1, "x"), rAbort(1, "y")}, 3, "aborted twice"},
	{"a second ABORT after one without a reason", []Record{rBegin(1), rAbort(1, ""), rAbort(1, "y")}, 3, "aborted twice"},
	// COMP_INTENT, COMP_DONE.
	{"a compensation of a saga never aborted", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rCompIntent(1, 1, "base", 1)}, 4, "never aborted"},
	{"a clean COMP_DONE of a saga never aborted", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rCompDone(1, 1, "base", Compensated)}, 4, "never aborted"},
	{"a failed attempt of a saga never aborted", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rCompDone(1, 1, "base", "")}, 4, "never aborted"},
	{"a step settled twice", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rAbort(1, "x"),
		rCompDone(1, 1, "base", Compensated), rCompDone(1, 1, "base", Unresolved)}, 6, "settled twice"},
	{"an unknown bucket", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rAbort(1, "x"), rCompDone(1, 1, "base", "fine")}, 5, "unknown bucket"},
	// END.
	{"a clean END with no ABORT", []Record{rBegin(1), rEnd(1, "clean")}, 2, "never aborted"},
	{"END with a step not settled", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rAbort(1, "x"), rEnd(1, "partial")}, 5, "step 1 is not settled"},
	{"END clean over a step not compensated", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rAbort(1, "x"),
		rCompDone(1, 1, "base", FallbackSafe), rEnd(1, "clean")}, 6, `"partial"`},
	{"END partial over steps all compensated", []Record{rBegin(1), rIntent(1, 1, "base"), rApplied(1, 1), rAbort(1, "x"),
		rCompDone(1, 1, "base", Compensated), rEnd(1, "partial")}, 6, `"clean"`},
	{"END of an ended saga", []Record{rBegin(1), rAbort(1, "x"), rEnd(1, "clean"), rEnd(1, "clean")}, 4, "not open"},
}

// encodeAll gives the journal's view of records: type and payload.
func encodeAll(recs []Record) (types []uint8, payloads [][]byte) {
	for i := range recs {
		types = append(types, uint8(recs[i].Type))
		payloads = append(payloads, recs[i].AppendEncode(nil))
	}
	return types, payloads
}

// Every rule refuses its record, naming it; the engine's own sequences
// pass. The same refusal comes from the scratch engine of a Validator and
// from engines configured like a daemon's (actuators, either unwind
// order): the validator is not more lenient than the daemon.
func TestRebuildRules(t *testing.T) {
	for _, tc := range ruleCases {
		t.Run(tc.name, func(t *testing.T) {
			types, payloads := encodeAll(tc.recs)
			check := func(who string, apply func(seq uint64, typ uint8, p []byte) error) {
				t.Helper()
				for i := range types {
					err := apply(uint64(i+1), types[i], payloads[i])
					switch {
					case err == nil && i+1 == tc.refused:
						t.Fatalf("%s: record %d (%s) accepted, want refused (%q)", who, i+1, tc.recs[i].Type, tc.why)
					case err == nil:
						continue
					case i+1 != tc.refused:
						t.Fatalf("%s: record %d (%s) refused, want %d: %v", who, i+1, tc.recs[i].Type, tc.refused, err)
					case !strings.Contains(err.Error(), tc.why):
						t.Fatalf("%s: record %d refused with %q, want it to say %q", who, i+1, err, tc.why)
					}
					return
				}
			}
			v := NewValidator()
			check("validator", v.Apply)
			if tc.refused != 0 {
				r := v.Refused()
				if r == nil || r.Seq != uint64(tc.refused) || r.Type != tc.recs[tc.refused-1].Type {
					t.Fatalf("Refused() = %+v, want seq %d", r, tc.refused)
				}
				if !strings.Contains(r.Reason(), tc.why) || strings.HasPrefix(r.Reason(), "record ") {
					t.Errorf("Reason() = %q, want the rule's words alone", r.Reason())
				}
				if err := v.Apply(uint64(tc.refused+1), uint8(RecRecovery), nil); !errors.Is(err, r) {
					t.Fatalf("after a refusal: %v, want the same refusal", err)
				}
			} else if v.Accepted() != uint64(len(tc.recs)) {
				t.Fatalf("accepted %d of %d", v.Accepted(), len(tc.recs))
			}
			for _, order := range []Order{Retrace, Direct} {
				r := newRig(t, func(c *Config) { c.Order = order })
				check("daemon's engine, "+order.String(), r.e.Apply)
			}
		})
	}
}

// journalOf is what a memJournal holds, as the wal would store it.
type journalOf struct {
	types    []uint8
	payloads [][]byte
}

func (j *memJournal) stored() journalOf {
	j.mu.Lock()
	defer j.mu.Unlock()
	return journalOf{append([]uint8(nil), j.types...), append([][]byte(nil), j.raw...)}
}

func (a journalOf) prefix(n int) journalOf { return journalOf{a.types[:n:n], a.payloads[:n:n]} }

func (a journalOf) then(b journalOf) journalOf {
	return journalOf{append(a.types, b.types...), append(a.payloads, b.payloads...)}
}

// recoverFrom rebuilds a new engine of the same configuration from j, lets
// it finish what was left open, and returns what that recovery journaled.
func recoverFrom(t *testing.T, order Order, j journalOf) journalOf {
	t.Helper()
	r := newRig(t, func(c *Config) { c.Order = order })
	for i := range j.types {
		if err := r.e.Apply(uint64(i+1), j.types[i], j.payloads[i]); err != nil {
			t.Fatalf("the daemon's rebuild refused a journal its engine wrote: %v", err)
		}
	}
	if _, err := r.e.Recover(); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	r.e.Close()
	return r.j.stored()
}

func validate(j journalOf) error {
	v := NewValidator()
	for i := range j.types {
		if err := v.Apply(uint64(i+1), j.types[i], j.payloads[i]); err != nil {
			return err
		}
	}
	return nil
}

// The engine never writes a record the rebuild's rules refuse: every
// journal a run leaves — cut by a crash after any record — then finished by
// a recovery, and that recovery cut by a crash after any of its own records
// and finished by another, passes the validator, in either unwind order.
// (It fails if an ABORT without a reason is rebuilt as no ABORT at all:
// recovery then journals a second one.)
func TestEngineWritesOnlyWhatRebuildAccepts(t *testing.T) {
	jammed := errors.New("jammed")
	scenarios := []struct {
		name string
		run  func(t *testing.T, r *rig)
	}{
		{"commit", func(t *testing.T, r *rig) {
			s := r.begin(t)
			r.step(t, s, "1", "base", 30)
			r.step(t, s, "2", "elbow", 40)
			if err := r.e.Commit(s, r.owner); err != nil {
				t.Fatal(err)
			}
		}},
		{"abort", func(t *testing.T, r *rig) {
			s := r.begin(t)
			r.step(t, s, "1", "base", 30)
			r.step(t, s, "2", "elbow", 40)
			r.step(t, s, "3", "base", 35)
			r.e.Abort(s, r.owner, "agent aborted")
		}},
		{"abort without a reason", func(t *testing.T, r *rig) {
			s := r.begin(t)
			r.step(t, s, "1", "base", 30)
			r.step(t, s, "2", "base", 40)
			r.e.AbortAgent(r.owner.Agent, "")
		}},
		{"a step in doubt, a compensation retried", func(t *testing.T, r *rig) {
			s := r.begin(t)
			r.step(t, s, "1", "base", 30)
			r.step(t, s, "2", "elbow", 40)
			r.step(t, s, "3", "base", 50)
			r.drivers["base"].fail = func(v float64, n int) error {
				if n == 3 || n == 4 { // the fourth step, then its first compensation
					return jammed
				}
				return nil
			}
			r.e.Step(s, r.owner, Command{ID: "4", Actuator: "base", Value: 60})
		}},
		{"a step not applied", func(t *testing.T, r *rig) {
			s := r.begin(t)
			r.step(t, s, "1", "elbow", 30)
			r.drivers["shoulder"].fail = func(float64, int) error { return actuators.ErrNotApplied }
			r.e.Step(s, r.owner, Command{ID: "2", Actuator: "shoulder", Value: 5})
		}},
		{"a failed compensation halts and ends the other saga", func(t *testing.T, r *rig) {
			other := Owner{Agent: "mover", Lease: "L2", Epoch: 2}
			s := r.begin(t)
			r.step(t, s, "1", "elbow", 30)
			r.step(t, s, "2", "base", 20)
			o, err := r.e.Begin(other)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.e.Step(o, other, Command{ID: "1", Actuator: "shoulder", Value: 5}); err != nil {
				t.Fatal(err)
			}
			r.drivers["elbow"].fail = func(v float64, _ int) error {
				if v == 20 {
					return jammed
				}
				return nil
			}
			r.e.Abort(s, r.owner, "agent aborted")
		}},
		{"halt, reset, commit", func(t *testing.T, r *rig) {
			s := r.begin(t)
			r.step(t, s, "1", "base", 30)
			r.e.Halt("operator")
			if err := r.e.Reset("operator", r.e.HaltGen()); err != nil {
				t.Fatal(err)
			}
			s = r.begin(t)
			r.step(t, s, "1", "shoulder", 30)
			if err := r.e.Commit(s, r.owner); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, sc := range scenarios {
		for _, order := range []Order{Retrace, Direct} {
			t.Run(sc.name+"/"+order.String(), func(t *testing.T) {
				r := newRig(t, func(c *Config) { c.Order = order })
				sc.run(t, r)
				r.e.Close()
				run := r.j.stored()
				if err := validate(run); err != nil {
					t.Fatalf("the run's own journal: %v", err)
				}
				for k := 0; k <= len(run.types); k++ {
					cut := run.prefix(k)
					rec := recoverFrom(t, order, cut)
					if err := validate(cut.then(rec)); err != nil {
						t.Fatalf("crash after record %d, then recovery: %v", k, err)
					}
					for m := 0; m < len(rec.types); m++ {
						again := cut.then(rec.prefix(m))
						if err := validate(again.then(recoverFrom(t, order, again))); err != nil {
							t.Fatalf("crash after record %d, recovery cut after its record %d, recovery again: %v", k, m, err)
						}
					}
				}
			})
		}
	}
}

// An ABORT journaled without a reason still aborts the saga in the
// rebuild: recovery resumes its unwind and journals no second ABORT.
func TestAbortWithoutReasonRebuildsAsAborted(t *testing.T) {
	r := newRig(t, nil)
	s := r.begin(t)
	r.step(t, s, "1", "base", 30)
	r.e.AbortAgent(r.owner.Agent, "")
	r.e.Close()
	run := r.j.stored()
	abort := -1
	for i, typ := range run.types {
		if RecordType(typ) == RecAbort {
			abort = i
		}
	}
	if abort < 0 {
		t.Fatal("the run journaled no ABORT")
	}
	rec := recoverFrom(t, Retrace, run.prefix(abort+1)) // a crash just after the ABORT
	for i, typ := range rec.types {
		if RecordType(typ) == RecAbort {
			t.Errorf("recovery journaled a second ABORT (its record %d)", i+1)
		}
	}
}
