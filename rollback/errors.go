package rollback

import (
	"errors"
	"fmt"

	"github.com/saga-supervisor/saga-supervisor/limits"
)

// Code is a stable refusal or failure code. Codes appear in replies, in the
// journal and in metrics; they are never renamed. Limit and supply codes come
// from package limits.
type Code string

// The engine's own codes.
const (
	CodeHalted          Code = "HALTED"           // the engine is halted; reset first
	CodeJournalFailed   Code = "JOURNAL_FAILED"   // the journal failed; nothing may move
	CodeSagaUnknown     Code = "SAGA_UNKNOWN"     // no open saga with that id
	CodeSagaNotOwner    Code = "SAGA_NOT_OWNER"   // the saga belongs to another agent or lease
	CodeSagaBusy        Code = "SAGA_BUSY"        // a step of this saga is already in flight
	CodeSagaFull        Code = "SAGA_FULL"        // the saga has carried Config.MaxSagaCommands commands
	CodeTooManySagas    Code = "TOO_MANY_SAGAS"   // the owner holds Config.MaxSagasPerLease open sagas
	CodeActuatorUnknown Code = "ACTUATOR_UNKNOWN" // no actuator by that name
	CodeActuatorBusy    Code = "ACTUATOR_BUSY"    // held by another open saga
	CodeDeadlinePassed  Code = "DEADLINE_PASSED"  // the command's deadline passed before the gate
	CodeDuplicateID     Code = "DUPLICATE_ID"     // this command id was already seen in the saga
	CodeStepFailed      Code = "STEP_FAILED"      // the driver promised nothing moved (actuators.ErrNotApplied); the saga was unwound
	CodeStepInDoubt     Code = "STEP_IN_DOUBT"    // any other driver error: the effect may have happened; unwound, the step too
	CodeBadRequest      Code = "BAD_REQUEST"      // a malformed command (empty id, bad owner)
	CodeDraining        Code = "DRAINING"         // a drain is in force: no new saga
	CodeNotDraining     Code = "NOT_DRAINING"     // a drain was to be ended, but none is in force
	CodeQuarantined     Code = "QUARANTINED"      // the agent is quarantined by an operator
	CodeNotQuarantined  Code = "NOT_QUARANTINED"  // an agent was to be released, but it is not quarantined
	CodeQuarantineFull  Code = "QUARANTINE_FULL"  // MaxQuarantined agents are quarantined already
	CodeUnknownZone     Code = "UNKNOWN_ZONE"     // no zone by that name (a zone halt or reset)
	CodeZoneHalted      Code = "ZONE_HALTED"      // the actuator's zone is halted; a zone reset first
)

// LimitCode converts a limits code to an engine code.
func LimitCode(c limits.Code) Code { return Code(c) }

// Error is a coded refusal or failure returned by the engine. Match it with
// errors.As and read Code.
type Error struct {
	Code    Code
	Message string
	// Report is set when the error ended the saga (STEP_FAILED, STEP_IN_DOUBT).
	Report *Report
	err    error
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.err }

// CodeOf returns the code of an engine error, or "" for other errors.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// ErrClosed is matched (errors.Is) by the error of every call that would
// work or move something on an Engine after Close. Such a call is refused
// with code HALTED (nothing may move, and a client already knows what that
// means); errors.Is(err, ErrClosed) tells the two apart.
var ErrClosed = errors.New("rollback: engine closed")

func errClosed() *Error {
	return &Error{Code: CodeHalted, Message: "engine closed: the supervisor is stopping", err: ErrClosed}
}

func refusal(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
