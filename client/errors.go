package client

import (
	"errors"
	"fmt"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// Errors to test with errors.Is. A *Error matches the ones its code means
// (see codeClass); the client's own conditions wrap them too.
var (
	// ErrLeaseLost: the lease has ended or can no longer be vouched for, and
	// the sagas begun under it are (being) unwound. Dial again.
	ErrLeaseLost = errors.New("client: lease lost")
	// ErrClosed: Close was called.
	ErrClosed = errors.New("client: closed")
	// ErrConnectionLost: the connection to the broker is gone. It also
	// matches ErrLeaseLost when the client held a lease.
	ErrConnectionLost = errors.New("client: connection to the broker lost")
	// ErrNoLease: the client was dialled with NoLease and cannot begin a
	// saga.
	ErrNoLease = errors.New("client: no lease (dialled with NoLease)")
	// ErrSagaEnded: the saga is no longer open — committed, aborted, or
	// unwound after a failed step (STEP_FAILED, STEP_IN_DOUBT) — or the
	// supervisor does not know it (SAGA_UNKNOWN).
	ErrSagaEnded = errors.New("client: saga ended")
	// ErrHalted: the supervisor is halted (HALTED); an operator must reset.
	ErrHalted = errors.New("client: supervisor halted")
	// ErrNotReady: the supervisor is not ready (NOT_READY).
	ErrNotReady = errors.New("client: supervisor not ready")
	// ErrUnauthorized: a reset with a wrong token (UNAUTHORIZED), or an HTTP
	// request to a listener with a login that showed none (LOGIN_REQUIRED).
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrLoginRefused: the broker refused the connection's login: no or a
	// wrong password, a user it does not know, or (the embedded broker) a
	// client id other than the username. Dial wraps it.
	ErrLoginRefused = errors.New("client: the broker refused the login")
	// ErrWillRefused: the broker took the login but refused the
	// connection's last will on the agent's will topic: its ACL (the
	// locked embedded broker's) does not give this agent that topic,
	// because Device or Prefix is not the one its supervisor serves. Dial
	// tells it from ErrLoginRefused by connecting once more without the
	// will, only after a refusal.
	ErrWillRefused = errors.New("client: the broker refused the agent's will topic")
	// ErrForbidden: the supervisor's configuration does not let this agent
	// do this (FORBIDDEN): an op or actuator agents.allow does not give
	// it, a reset over MQTT while that is off, or a reset on a supervisor
	// with no operator token configured (NO_OPERATOR_TOKEN). Nothing
	// moved; do not retry.
	ErrForbidden = errors.New("client: forbidden")
	// ErrBackOff: the request was not served because this agent is over
	// its rate (RATE_LIMITED) or queue (BUSY), or the supervisor serves as
	// many agents as it may (TOO_MANY_AGENTS). Nothing moved; pause, then
	// resend with a new id.
	ErrBackOff = errors.New("client: back off")
)

// Error is a refusal or failure sent back by the supervisor (or, for
// BAD_REQUEST, NOT_FINITE and PAYLOAD_TOO_LARGE, found by the client before
// sending, with an empty ID: nothing was sent). Code is one of api.Codes.
type Error struct {
	Op      string // the request's op: "step", "hello", ...
	ID      string // the request's id; "" when refused before sending
	Code    string
	Message string
	// Report is the unwind a failed step caused (STEP_FAILED,
	// STEP_IN_DOUBT); nil otherwise.
	Report *api.ReportJSON
}

func (e *Error) Error() string {
	s := e.Code + ": " + e.Message
	if e.Op != "" {
		s = e.Op + ": " + s
	}
	if e.Report != nil {
		s += fmt.Sprintf(" (saga %d unwound: %s)", e.Report.Saga, e.Report.Verdict)
	}
	return s
}

// Is matches the sentinel errors the code means.
func (e *Error) Is(target error) bool {
	c, ok := codeClass[e.Code]
	return ok && c.sentinel != nil && c.sentinel == target
}

// class is what the client knows of one wire code.
type class struct {
	refusal  bool  // the request was refused and nothing moved
	sentinel error // what errors.Is matches, or nil
}

// codeClass covers every code of api.Codes (a test keeps it so). A code
// the supervisor adds later and this table lacks is treated as not a
// refusal: the client cannot promise that nothing moved.
var codeClass = map[string]class{
	"BAD_REQUEST":       {refusal: true},
	"PAYLOAD_TOO_LARGE": {refusal: true},
	"NOT_FINITE":        {refusal: true},
	"NOT_READY":         {refusal: true, sentinel: ErrNotReady},
	"HALTED":            {refusal: true, sentinel: ErrHalted},
	"JOURNAL_FAILED":    {refusal: true},
	"UNAUTHORIZED":      {refusal: true, sentinel: ErrUnauthorized},
	"FORBIDDEN":         {refusal: true, sentinel: ErrForbidden},
	"NO_OPERATOR_TOKEN": {refusal: true, sentinel: ErrForbidden}, // reset with no token configured
	"LEASE_UNKNOWN":     {refusal: true, sentinel: ErrLeaseLost},
	"LEASE_EXPIRED":     {refusal: true, sentinel: ErrLeaseLost},
	"LEASE_NOT_HOLDER":  {refusal: true, sentinel: ErrLeaseLost},
	"TOO_MANY_LEASES":   {refusal: true},
	"SHUTTING_DOWN":     {refusal: true},
	"SAGA_UNKNOWN":      {refusal: true, sentinel: ErrSagaEnded},
	"SAGA_NOT_OWNER":    {refusal: true},
	"SAGA_BUSY":         {refusal: true},
	"SAGA_FULL":         {refusal: true},
	"TOO_MANY_SAGAS":    {refusal: true},
	"RATE_LIMITED":      {refusal: true, sentinel: ErrBackOff},
	"BUSY":              {refusal: true, sentinel: ErrBackOff},
	"TOO_MANY_AGENTS":   {refusal: true, sentinel: ErrBackOff},
	"TOO_MANY_ATTEMPTS": {refusal: true, sentinel: ErrBackOff}, // HTTP only; never sent over MQTT
	"DUPLICATE_ID":      {refusal: true},
	"DEADLINE_PASSED":   {refusal: true},
	"ACTUATOR_UNKNOWN":  {refusal: true},
	"ACTUATOR_BUSY":     {refusal: true},
	"LIMIT_MIN":         {refusal: true},
	"LIMIT_MAX":         {refusal: true},
	"LIMIT_STEP":        {refusal: true},
	"LIMIT_SLEW":        {refusal: true},
	"SUPPLY_LOW":        {refusal: true},
	"SUPPLY_HIGH":       {refusal: true},
	"SUPPLY_UNKNOWN":    {refusal: true},
	"SUPPLY_STALE":      {refusal: true},
	"SUPPLY_TRIPPED":    {refusal: true},
	"APPROVAL_REQUIRED": {refusal: true},
	"APPROVAL_INVALID":  {refusal: true},
	"APPROVAL_MISMATCH": {refusal: true},
	"APPROVAL_EXPIRED":  {refusal: true},
	"APPROVAL_REPLAYED": {refusal: true},
	"APPROVALS_FULL":    {refusal: true, sentinel: ErrBackOff},
	// M-of-N approvals.
	"APPROVALS_TOO_FEW":      {refusal: true},
	"APPROVAL_DUPLICATE_KEY": {refusal: true},
	"APPROVAL_DUPLICATE":     {refusal: true},
	// Zones: a step on a halted zone moved nothing; a halt naming an
	// unknown zone halted everything (not a refusal), a reset naming one
	// did nothing.
	"ZONE_HALTED":  {refusal: true},
	"UNKNOWN_ZONE": {},
	// The step was applied or may have been, and its saga was unwound.
	"STEP_FAILED":   {sentinel: ErrSagaEnded},
	"STEP_IN_DOUBT": {sentinel: ErrSagaEnded},
	// A supervisor bug: whether anything moved is unknown.
	"INTERNAL": {},

	// HTTP only: a request a web page of another site could have made a
	// browser send, refused before anything was done.
	"HOST_NOT_ALLOWED":   {refusal: true, sentinel: ErrForbidden},
	"ORIGIN_NOT_ALLOWED": {refusal: true, sentinel: ErrForbidden},
	// HTTP only: the listener needs a login and the request showed none.
	"LOGIN_REQUIRED": {refusal: true, sentinel: ErrUnauthorized},

	// Drain and quarantine: a drain refuses new sagas until an operator
	// ends it (wait, as for not ready); a quarantined agent is refused
	// until an operator releases it (do not retry). The other three
	// answer the operator's HTTP requests only.
	"DRAINING":        {refusal: true, sentinel: ErrNotReady},
	"NOT_DRAINING":    {refusal: true},
	"QUARANTINED":     {refusal: true, sentinel: ErrForbidden},
	"NOT_QUARANTINED": {refusal: true},
	"QUARANTINE_FULL": {refusal: true},
}

// IsRefusal reports whether err is a refusal from the supervisor that
// guarantees nothing moved: a limit, a supply, a busy actuator, a bad
// request, a lease or saga that is not valid. The saga (if the lease still
// lives) is still open and may go on. It is false for STEP_FAILED and
// STEP_IN_DOUBT (something moved and was unwound), INTERNAL, timeouts and
// connection errors (the outcome is unknown), and nil.
func IsRefusal(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	return codeClass[e.Code].refusal
}

// CodeOf returns the wire code of the *Error in err's chain, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// replyError turns a refusal reply into an *Error.
func replyError(op api.Op, r api.Reply) *Error {
	code := r.Code
	if code == "" {
		code = api.CodeInternal // a refusal without a code is a supervisor bug
	}
	return &Error{Op: string(op), ID: r.ID, Code: code, Message: r.Message, Report: r.Report}
}

// encodeError turns EncodeRequest's refusal into an *Error.
func encodeError(op api.Op, err error) error {
	var me *api.Error
	if errors.As(err, &me) {
		return &Error{Op: string(op), Code: me.Code, Message: "not sent: " + me.Message}
	}
	return fmt.Errorf("client: %s: %w", op, err)
}
