package serial

import (
	"errors"
	"fmt"
)

// Code classifies an error of this package. It is stable: logs, metrics and
// tests may match on it.
type Code string

// Codes of errors that promise nothing was changed: the value never left the
// host, or the MCU refused it. A Set's error with one of them wraps
// actuators.ErrNotApplied.
const (
	CodeValueRange Code = "SERIAL_VALUE_RANGE" // not finite, or does not fit the wire encoding; nothing sent
	CodeNoChannel  Code = "SERIAL_NO_CHANNEL"  // the MCU has no such channel; nothing sent
	CodeBusy       Code = "SERIAL_BUSY"        // the window stayed full until the context ended; nothing sent
	CodeNak        Code = "SERIAL_NAK"         // the MCU refused the request (Error.Nak says why); nothing changed. NAK NO_SESSION is CodeLinkLost
)

// Codes of errors that leave the effect in doubt: they do not wrap
// actuators.ErrNotApplied, so the rollback engine reads them as "may have
// happened". Their errors wrap actuators.ErrLinkLost,
// context.DeadlineExceeded or ErrMismatch, which say why.
const (
	CodeLinkLost Code = "SERIAL_LINK_LOST" // no session with the MCU (port gone, silent, reset, closed; a NAK NO_SESSION)
	CodeNoAck    Code = "SERIAL_NO_ACK"    // no answer within the retries or before the context ended
	CodeMismatch Code = "SERIAL_MISMATCH"  // the MCU's read-back differs from the target by more than the tolerance; wraps ErrMismatch
)

// Codes of errors from reading state and from readiness.
const (
	CodeStale     Code = "SERIAL_STALE"      // no report from the MCU recent enough
	CodeNoReading Code = "SERIAL_NO_READING" // the MCU reports that it cannot read the supply
	CodeNoSupply  Code = "SERIAL_NO_SUPPLY"  // the MCU reports no such supply
	CodeVersion   Code = "SERIAL_VERSION"    // the MCU speaks another protocol version
	CodeHandshake Code = "SERIAL_HANDSHAKE"  // the MCU's HELLO_ACK is unusable
	CodeMCUFault  Code = "SERIAL_MCU_FAULT"  // the MCU reports fault flags
	CodeConfig    Code = "SERIAL_CONFIG"     // the Config is invalid
	CodeTable     Code = "SERIAL_TABLE"      // the MCU's channel table disagrees with Config.Expect: a channel missing, or its kind, polarity or range
)

// ErrMismatch is wrapped by a Set whose SET_ACK reports a value further
// from the target than the channel's tolerance, or the channel detached or
// in fault (CodeMismatch): the output moved, but not as asked, so the step
// is in doubt. It says nothing about the link, which is up.
var ErrMismatch = errors.New("serial: the output moved, but not to the target")

// ErrClosed is wrapped by errors from a Link after Close.
var ErrClosed = errors.New("serial: link closed")

// Error is the error type of this package: a stable Code, a message, and
// the error it wraps (actuators.ErrNotApplied for a Set that changed
// nothing, actuators.ErrLinkLost, context.DeadlineExceeded or ErrMismatch
// for the in-doubt codes).
type Error struct {
	Code Code
	Msg  string
	// Nak is the MCU's refusal for CodeNak, and NAK NO_SESSION for a
	// CodeLinkLost that answered a request.
	Nak Nak
	Err error
}

func (e *Error) Error() string {
	s := "serial: " + e.Msg + " [" + string(e.Code) + "]"
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the Code of the first *Error in err's chain, or "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func errorf(code Code, wrapped error, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Err: wrapped}
}
