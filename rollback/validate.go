package rollback

import (
	"errors"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// Validator checks journal records against the rebuild's rules with the
// very code the daemon runs at start: a scratch Engine, never served, fed
// every record through Apply. recovery.Open applies the records to the
// engine it serves; verify and certify
// (cmd/saga-supervisor/internal/journaltool) feed them to a Validator. So
// a journal the daemon would refuse to start on is refused by verify, and
// the other way round: there is one set of rules, in applyLocked.
//
// The scratch engine has no actuators. That costs nothing: Apply's rules
// never depend on the configuration — an actuator the journal names but
// the configuration no longer has only loses its commanded value, and the
// unwind order only shapes unwind progress, never a refusal — because a
// journal the engine wrote stays valid whatever the configuration of the
// process that rebuilds from it.
type Validator struct {
	e       *Engine
	refused *Refusal
	n       uint64
}

// Refusal is the first record the rebuild refuses: the daemon does not
// start on a journal holding it.
type Refusal struct {
	Seq  uint64     // the record's sequence number
	Type RecordType // its type as the journal stores it
	Err  error      // Apply's error, naming the record and the rule
}

func (r *Refusal) Error() string { return r.Err.Error() }

// Unwrap gives access to Apply's error.
func (r *Refusal) Unwrap() error { return r.Err }

// Reason is why the record was refused, without the record's name that
// Apply's error starts with.
func (r *Refusal) Reason() string {
	if inner := errors.Unwrap(r.Err); inner != nil {
		return inner.Error()
	}
	return r.Err.Error()
}

// NewValidator returns a Validator that has seen no record: the journal it
// checks must start at its first record.
func NewValidator() *Validator {
	reg, _ := actuators.NewRegistry() // empty: cannot fail
	e, err := New(Config{Journal: noJournal{}, Actuators: reg})
	if err != nil {
		panic("rollback: the validator's engine: " + err.Error()) // New refuses only a nil journal or registry
	}
	return &Validator{e: e}
}

// NewValidatorFrom returns a Validator that starts from a checkpoint's
// snapshot (see Engine.Snapshot): for a journal whose first records
// retention deleted, the records after the checkpoint are checked against
// the state the checkpoint holds, as the daemon applies them at start. A
// snapshot that does not decode is an error wrapping ErrBadSnapshot.
func NewValidatorFrom(snapshot []byte) (*Validator, error) {
	v := NewValidator()
	// The validator's engine has no actuators: the snapshot's are dropped
	// (ErrSnapshotMismatch), which changes no rule.
	if err := v.e.Restore(snapshot); err != nil && !errors.Is(err, ErrSnapshotMismatch) {
		v.e.Close()
		return nil, err
	}
	return v, nil
}

// Apply checks the next record. It returns a *Refusal for the first record
// the rebuild refuses, and that same refusal for every record after it:
// what follows a refused record is not checked.
func (v *Validator) Apply(seq uint64, typ uint8, payload []byte) error {
	if v.refused != nil {
		return v.refused
	}
	if err := v.e.Apply(seq, typ, payload); err != nil {
		v.refused = &Refusal{Seq: seq, Type: RecordType(typ), Err: err}
		return v.refused
	}
	v.n++
	return nil
}

// Accepted is how many records were checked and accepted.
func (v *Validator) Accepted() uint64 { return v.n }

// Refused is the first refusal, or nil.
func (v *Validator) Refused() *Refusal { return v.refused }

// errNoJournal is what the validator's engine would get from its journal:
// Apply never writes, and nothing else is ever called on that engine.
var errNoJournal = errors.New("rollback: the validator's engine writes nothing")

// noJournal is the scratch engine's journal: it refuses every write.
type noJournal struct{}

func (noJournal) Enqueue(uint8, []byte) (uint64, error) { return 0, errNoJournal }
func (noJournal) Sync() error                           { return errNoJournal }
