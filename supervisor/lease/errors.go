package lease

import (
	"errors"
	"fmt"
)

// Code is a stable refusal code. Codes travel in replies to agents and in
// the journal's refusal records; they are never renamed.
type Code string

// Refusal codes.
const (
	// CodeExpired: the lease ended (expiry, bye, will, superseded,
	// shutdown), its TTL passed, or the epoch is not the lease's own (a
	// stale fencing token). The agent must say hello again.
	CodeExpired Code = "LEASE_EXPIRED"
	// CodeUnknown: no lease with that id was granted, or it ended so long
	// ago that neither its id nor the request's epoch identifies it.
	CodeUnknown Code = "LEASE_UNKNOWN"
	// CodeNotHolder: the lease is live but held by another agent.
	CodeNotHolder Code = "LEASE_NOT_HOLDER"
	// CodeBadRequest: an empty agent id or a TTL outside the bounds.
	CodeBadRequest Code = "BAD_REQUEST"
	// CodeTooManyLeases: Options.MaxLeases leases are live.
	CodeTooManyLeases Code = "TOO_MANY_LEASES"
	// CodeShutdown: the manager is closed and grants nothing.
	CodeShutdown Code = "SHUTTING_DOWN"
)

// Error is a coded refusal. Match it with errors.As and read Code, or use
// CodeOf.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// CodeOf returns the code of a lease refusal, or "" for any other error
// (nil included).
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func refuse(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
