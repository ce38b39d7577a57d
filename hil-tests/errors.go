//go:build !saga_lean

package hil

import (
	"errors"
	"fmt"
)

// Codes of the errors this package returns.
const (
	// CodeRigFile: the rig file cannot be read, is not valid YAML, has an
	// unknown or mistyped key, or describes a rig the scenarios cannot run
	// on (no read-back URL, fewer than two actuators under test, ...).
	CodeRigFile = "HIL_RIG_FILE"
	// CodeRigConfig: the supervisor config the rig file names does not fit
	// the rig file (an actuator it lists does not exist, no HTTP listener,
	// no operator token).
	CodeRigConfig = "HIL_RIG_CONFIG"
	// CodeState: the read-back channel answered with something that is not
	// a valid /state document.
	CodeState = "HIL_READBACK_STATE"
	// CodeReadBack: the read-back or control endpoint could not be reached
	// or answered with an HTTP error.
	CodeReadBack = "HIL_READBACK_HTTP"
	// CodeNoCapability: an injection the rig file does not list was asked
	// for.
	CodeNoCapability = "HIL_NO_CAPABILITY"
)

// Error is an error of this package: a stable Code, a message that says
// where and why, and the cause, if any.
type Error struct {
	Code string
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("hil: %s: %v [%s]", e.Msg, e.Err, e.Code)
	}
	return fmt.Sprintf("hil: %s [%s]", e.Msg, e.Code)
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(code string, cause error, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// CodeOf returns the Code of the *Error in err's chain, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
