// Package api is the supervisor's controller API, independent of how a
// request travels: the requests a controller sends (hello, heartbeat,
// begin, step, commit, abort, bye, halt, reset, status), the replies,
// status and events the supervisor sends back, the table of stable codes
// they carry, and the rule for names (agents, actuators).
//
// The package opens no connection and reads no clock, so every rule a buggy
// or hostile controller could probe is pinned down with tables and fuzzing
// before any transport is involved. Transports (transport/mqtt) only
// connect, decode with this package, route and publish; the supervisor
// speaks only this package. docs/API.md is the user documentation; a test
// keeps its code table equal to Codes and its examples equal to what this
// package encodes.
//
// # Requests
//
// DecodeRequest is strict, because a command that moves an arm must mean one
// thing: one JSON object, valid UTF-8, case-sensitive keys, no unknown,
// duplicate or null fields, no field the op does not use, integers written
// as plain integers, no string written with a lone UTF-16 surrogate escape.
// json.Unmarshal into a struct cannot say that: it keeps the last of
// duplicate keys ({"value":1,"value":900} would pass as 900), matches keys
// case-insensitively ("Value" would be value) and reads "\ud800" as U+FFFD
// (so ids "\ud800" and "\ufffd" would be one id). So the decoder walks the
// object's tokens itself, keeps at most one value per known field, judges
// each number from its literal and each string's escapes from the bytes
// the client sent. When a request is refused, DecodeRequest still returns
// the id and agent it could salvage, so the refusal can be addressed.
//
// # Replies and events
//
// EncodeReply, EncodeEvent and EncodeStatus write what the supervisor
// publishes. A transport whose packets are bounded (an MQTT broker's
// maximum packet size) uses EncodeReplyMax and EncodeEventMax instead:
// byte for byte the same output when it fits, and otherwise a smaller one
// that keeps the reply's id, ok and code and the report's verdict, counts
// every step and lists as many as fit (see ReportJSON).
package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// Size limits of a request. They are part of the wire format: docs/API.md
// states them, and a client that respects them is never refused for size.
const (
	// DefaultMaxRequestBytes bounds a request payload when DecodeRequest is
	// given no bound. The largest valid request, every string at its limit
	// and every character \u-escaped, stays under it.
	DefaultMaxRequestBytes = 8192
	MaxIDBytes             = 128   // id
	MaxLeaseBytes          = 128   // lease
	MaxReasonBytes         = 256   // reason (abort, halt)
	MaxTokenBytes          = 256   // token (reset)
	MaxApprovalBytes       = 512   // approval (step): a signed approval token (package approval)
	MaxDeadlineMS          = 60000 // deadline_ms: a command older than a minute is not a command
)

// Op is what a request asks for.
type Op string

// The ops of API v1.
const (
	OpHello     Op = "hello"     // take a lease
	OpHeartbeat Op = "heartbeat" // renew it
	OpBegin     Op = "begin"     // open a saga
	OpStep      Op = "step"      // command one actuator within a saga
	OpCommit    Op = "commit"    // close a saga, keeping its effects
	OpAbort     Op = "abort"     // unwind a saga
	OpBye       Op = "bye"       // end the lease (its open sagas are unwound)
	OpHalt      Op = "halt"      // latch the e-stop
	OpReset     Op = "reset"     // clear a halt (operator token)
	OpStatus    Op = "status"    // ask for the supervisor's status
)

// Request is one decoded request. Which fields are set depends on Op; the
// others are zero.
type Request struct {
	ID    string // correlates the reply; unique per agent
	Agent string // who asks; a valid topic level (replies go to reply/<agent>)
	Op    Op

	TTLMS      int64   // hello: the TTL asked for, ms; 0 = the supervisor's default
	Lease      string  // heartbeat, begin, step, commit, abort, bye
	Epoch      uint64  // with Lease: the lease's fencing token
	Saga       uint64  // step, commit, abort
	Actuator   string  // step
	Value      float64 // step: the requested value (finite)
	DeadlineMS int64   // step: void unless admitted within this many ms of receipt; 0 = none
	Reason     string  // abort, halt: free text for the journal and the report
	Token      string  // reset: the operator token
	// Will (hello) is what the agent's MQTT last will carries: a will
	// ends the lease only if it carries the same, so a late will of an
	// earlier connection does not end this one's lease. A name-like
	// token (ValidName), fresh for each connection.
	Will     string
	Approval string // step: an operator's signed approval (package approval); "" = none
}

// Deadline is the instant after which the step is void, counted from when
// the supervisor received it (received should carry a monotonic reading, as
// time.Now's does), or the zero time when the request has no deadline.
// The sender's clock is never used: the two machines share none.
func (r Request) Deadline(received time.Time) time.Time {
	if r.DeadlineMS <= 0 {
		return time.Time{}
	}
	return received.Add(time.Duration(r.DeadlineMS) * time.Millisecond)
}

// Command is the engine's view of a step request received at received.
func (r Request) Command(received time.Time) rollback.Command {
	return rollback.Command{ID: r.ID, Actuator: r.Actuator, Value: r.Value, Deadline: r.Deadline(received)}
}

// Owner is who acts in the request's saga, as the engine records it.
func (r Request) Owner() rollback.Owner {
	return rollback.Owner{Agent: r.Agent, Lease: r.Lease, Epoch: r.Epoch}
}

// Error is a refusal on the wire: one decided by this package (a request it
// cannot accept), or one the supervisor converts from a package whose error
// type this one does not know (a lease refusal). Code is one of Codes.
type Error struct {
	Code    string
	Field   string // the request field at fault; "" when none is
	Message string // for people; names the field
}

func (e *Error) Error() string {
	if e == nil { // a typed nil passed as error must not crash the reply path
		return "<nil>"
	}
	return e.Code + ": " + e.Message
}

func badRequest(field, format string, args ...any) *Error {
	return &Error{Code: CodeBadRequest, Field: field, Message: fmt.Sprintf(format, args...)}
}

// The request fields, in the order the decoder checks them (so the same bad
// request always gets the same error) and the encoder writes them.
const (
	fID = iota
	fAgent
	fOp
	fTTL
	fLease
	fEpoch
	fSaga
	fActuator
	fValue
	fDeadline
	fReason
	fToken
	fWill
	fApproval
	numFields
)

var fieldNames = [numFields]string{"id", "agent", "op", "ttl_ms", "lease", "epoch", "saga", "actuator", "value", "deadline_ms", "reason", "token", "will", "approval"}

func fieldIndex(key string) int {
	for i, n := range fieldNames {
		if n == key {
			return i
		}
	}
	return -1
}

type fieldSet uint16

func fields(fs ...int) fieldSet {
	var s fieldSet
	for _, f := range fs {
		s |= 1 << f
	}
	return s
}

func (s fieldSet) has(f int) bool { return s&(1<<f) != 0 }

// opFields says which fields each op requires and which it may carry; every
// op requires id, agent and op.
var opFields = map[Op]struct{ required, optional fieldSet }{
	OpHello:     {optional: fields(fTTL, fWill)},
	OpHeartbeat: {required: fields(fLease, fEpoch)},
	OpBegin:     {required: fields(fLease, fEpoch)},
	OpStep:      {required: fields(fLease, fEpoch, fSaga, fActuator, fValue), optional: fields(fDeadline, fApproval)},
	OpCommit:    {required: fields(fLease, fEpoch, fSaga)},
	OpAbort:     {required: fields(fLease, fEpoch, fSaga), optional: fields(fReason)},
	OpBye:       {required: fields(fLease, fEpoch)},
	OpHalt:      {optional: fields(fReason)},
	OpReset:     {required: fields(fToken)},
	OpStatus:    {},
}

type kind uint8

const (
	kString kind = iota + 1
	kNumber
	kBool
	kNull
	kObject
	kArray
)

func (k kind) String() string {
	return [...]string{"", "a string", "a number", "a boolean", "null", "an object", "an array"}[k]
}

// raw is one known field as found in the payload: how often its key
// appeared and its first value (a string's text or a number's literal).
// lone marks a string whose literal holds a lone surrogate escape: its
// text is not what the client wrote, so it must not even be salvaged.
type raw struct {
	n    int
	kind kind
	text string
	lone bool
}

// DecodeRequest decodes and validates one request payload. maxBytes bounds
// its size (<= 0: DefaultMaxRequestBytes); a larger payload is refused
// unread. On refusal the returned Request carries at most the ID and Agent
// that could be salvaged — each only if it appeared once and is valid —
// and nothing else, so a caller cannot act on half a request. When Agent
// is "", the refusal has no reply topic: publish it as an EventReply.
//
// Compare the *Error with nil before passing it on as an error: a nil
// *Error in an error interface is not nil (ErrorReply answers it with
// INTERNAL, never with success).
func DecodeRequest(payload []byte, maxBytes int) (Request, *Error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxRequestBytes
	}
	if len(payload) > maxBytes {
		// Not even scanned for an id: the bound exists to cap the work
		// a hostile payload can cost.
		return Request{}, &Error{Code: CodePayloadTooLarge, Message: fmt.Sprintf("request is %d bytes, over the limit of %d", len(payload), maxBytes)}
	}
	if !utf8.Valid(payload) {
		return Request{}, badRequest("", "request is not valid UTF-8")
	}
	var rs [numFields]raw
	err := scanObject(payload, &rs)
	salvaged := salvage(&rs)
	if err == nil {
		var r Request
		if r, err = parseFields(&rs); err == nil {
			return r, nil
		}
	}
	return salvaged, err
}

// scanObject walks the payload's tokens: exactly one JSON object whose
// values are scalars, keys known and unique, no string (key or value, at
// any depth) holding a lone surrogate escape. It stores known fields in rs
// (so memory stays bounded by the field count, whatever the payload holds)
// and keeps walking after a bad field, to salvage an id and agent that come
// later; only a syntax error stops it.
func scanObject(payload []byte, rs *[numFields]raw) *Error {
	t := tokens{dec: json.NewDecoder(bytes.NewReader(payload)), payload: payload}
	t.dec.UseNumber() // numbers as their literal: overflow and fractions are ours to judge
	syntax := func(err error) *Error {
		if err == io.EOF {
			return badRequest("", "request ends inside the JSON object")
		}
		return badRequest("", "request is not valid JSON: %v", err)
	}
	tok, _, err := t.next()
	if err == io.EOF {
		return badRequest("", "empty request: want a JSON object")
	}
	if err != nil {
		return syntax(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		k, _ := classify(tok)
		return badRequest("", "request is %s: want a JSON object", k)
	}
	var first *Error
	for t.dec.More() {
		tok, lit, err := t.next()
		if err != nil {
			return syntax(err)
		}
		key, _ := tok.(string) // in key position Token yields only strings
		if esc := loneSurrogate(lit); esc != "" && first == nil {
			first = badRequest(clip(key), "key %q holds %s, a lone UTF-16 surrogate escape: it stands for no character", clip(key), esc)
		}
		if tok, lit, err = t.next(); err != nil {
			return syntax(err)
		}
		k, text := classify(tok)
		esc := ""
		switch k {
		case kString:
			esc = loneSurrogate(lit)
		case kObject, kArray:
			if esc, err = t.skipNested(); err != nil {
				return syntax(err)
			}
		}
		if esc != "" && first == nil {
			first = badRequest(key, "field %q holds %s, a lone UTF-16 surrogate escape: it stands for no character", clip(key), esc)
		}
		i := fieldIndex(key)
		switch {
		case i < 0:
			if first == nil {
				first = badRequest(key, "unknown field %q", clip(key))
			}
		case rs[i].n > 0:
			rs[i].n++
			if first == nil {
				first = badRequest(key, "field %q appears more than once", key)
			}
		default:
			rs[i] = raw{n: 1, kind: k, text: text, lone: esc != ""}
		}
	}
	if _, _, err := t.next(); err != nil { // the closing brace
		return syntax(err)
	}
	if _, _, err := t.next(); err != io.EOF {
		return badRequest("", "data after the JSON object")
	}
	return first
}

// tokens walks a payload's JSON tokens and hands each one over with its
// literal, the payload bytes it was read from, so a string can be judged
// by what the client wrote and not only by what encoding/json made of it.
type tokens struct {
	dec     *json.Decoder
	payload []byte
}

// next returns the next token and the payload bytes from the end of the
// previous token to the end of this one: any whitespace, ':' or ',' the
// decoder skipped, then the token's literal.
func (t *tokens) next() (json.Token, []byte, error) {
	start := t.dec.InputOffset()
	tok, err := t.dec.Token()
	return tok, t.payload[start:t.dec.InputOffset()], err
}

// skipNested consumes the rest of an object or array whose opening
// delimiter was just read, and returns the first lone surrogate escape in
// its strings, if any. No recursion: depth is a counter, and the decoder
// itself refuses absurd nesting.
func (t *tokens) skipNested() (string, error) {
	esc := ""
	for depth := 1; depth > 0; {
		tok, lit, err := t.next()
		if err != nil {
			return "", err
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				depth++
			} else {
				depth--
			}
		case string:
			if esc == "" {
				esc = loneSurrogate(lit)
			}
		}
	}
	return esc, nil
}

// loneSurrogate returns the first lone surrogate escape in the JSON string
// literal that starts at the first '"' of lit ("" when there is none): a
// \uD800-\uDBFF not followed at once by a \uDC00-\uDFFF escape, or a
// \uDC00-\uDFFF not preceded by one. encoding/json turns such an escape
// into U+FFFD, so "\ud800" and "\ufffd" would decode to the same string;
// the decoder refuses it instead, and every string keeps the characters its
// sender wrote. The literal has already passed the JSON decoder, so its
// escapes are well formed; an escaped backslash ("\\ud800": a backslash,
// then the letters ud800) is skipped whole and is not an escape of u.
func loneSurrogate(lit []byte) string {
	i := bytes.IndexByte(lit, '"')
	if i < 0 {
		return ""
	}
	for i++; i < len(lit); i++ {
		switch lit[i] {
		case '"':
			return "" // the closing quote
		case '\\':
			u, ok := escapedUnit(lit, i)
			if !ok { // \" \\ \/ \b \f \n \r \t: two bytes
				i++
				continue
			}
			switch {
			case u >= 0xD800 && u <= 0xDBFF:
				if lo, ok := escapedUnit(lit, i+6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11 // a pair: one character, twelve bytes
					continue
				}
				return string(lit[i : i+6])
			case u >= 0xDC00 && u <= 0xDFFF:
				return string(lit[i : i+6])
			}
			i += 5
		}
	}
	return ""
}

// escapedUnit reads the UTF-16 code unit of a \uXXXX escape at lit[i:].
func escapedUnit(lit []byte, i int) (uint16, bool) {
	if i+6 > len(lit) || lit[i] != '\\' || lit[i+1] != 'u' {
		return 0, false
	}
	var u uint16
	for _, c := range lit[i+2 : i+6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		u = u<<4 | uint16(c)
	}
	return u, true
}

func classify(tok json.Token) (kind, string) {
	switch v := tok.(type) {
	case string:
		return kString, v
	case json.Number:
		return kNumber, string(v)
	case bool:
		return kBool, ""
	case nil:
		return kNull, ""
	case json.Delim:
		if v == '{' {
			return kObject, ""
		}
		return kArray, ""
	}
	return kNull, "" // unreachable: Token yields only the types above
}

func salvage(rs *[numFields]raw) Request {
	var r Request
	if f := rs[fID]; f.n == 1 && f.kind == kString && !f.lone && CheckText(f.text, MaxIDBytes) == "" {
		r.ID = f.text
	}
	if f := rs[fAgent]; f.n == 1 && f.kind == kString && !f.lone && ValidName(f.text) == nil {
		r.Agent = f.text
	}
	return r
}

func parseFields(rs *[numFields]raw) (Request, *Error) {
	var r Request
	var err *Error
	if r.ID, err = str(rs, fID, 1, MaxIDBytes); err != nil {
		return Request{}, err
	}
	if r.Agent, err = str(rs, fAgent, 1, MaxNameBytes); err != nil {
		return Request{}, err
	}
	if e := ValidName(r.Agent); e != nil {
		return Request{}, badRequest("agent", "field \"agent\": %v", e)
	}
	op, err := str(rs, fOp, 1, 32)
	if err != nil {
		return Request{}, err
	}
	r.Op = Op(op)
	spec, ok := opFields[r.Op]
	if !ok {
		return Request{}, badRequest("op", "unknown op %q", clip(op))
	}
	for f := fTTL; f < numFields; f++ {
		if rs[f].n > 0 && !spec.required.has(f) && !spec.optional.has(f) {
			return Request{}, badRequest(fieldNames[f], "field %q is not used by op %q", fieldNames[f], r.Op)
		}
	}
	for f := fTTL; f < numFields; f++ {
		if spec.required.has(f) && rs[f].n == 0 {
			return Request{}, badRequest(fieldNames[f], "op %q needs field %q", r.Op, fieldNames[f])
		}
	}
	for f := fTTL; f < numFields && err == nil; f++ {
		if rs[f].n == 0 {
			continue
		}
		switch f {
		case fTTL:
			r.TTLMS, err = integer(rs, f, math.MaxInt64)
		case fLease:
			r.Lease, err = str(rs, f, 1, MaxLeaseBytes)
		case fEpoch:
			r.Epoch, err = uinteger(rs, f)
		case fSaga:
			r.Saga, err = uinteger(rs, f)
		case fActuator:
			if r.Actuator, err = str(rs, f, 1, MaxNameBytes); err == nil {
				if e := ValidName(r.Actuator); e != nil {
					err = badRequest("actuator", "field \"actuator\": %v", e)
				}
			}
		case fValue:
			r.Value, err = number(rs, f)
		case fDeadline:
			r.DeadlineMS, err = integer(rs, f, MaxDeadlineMS)
		case fReason:
			r.Reason, err = str(rs, f, 0, MaxReasonBytes)
		case fToken:
			r.Token, err = str(rs, f, 1, MaxTokenBytes)
		case fWill:
			if r.Will, err = str(rs, f, 1, MaxNameBytes); err == nil {
				if e := ValidName(r.Will); e != nil {
					err = badRequest("will", "field \"will\": %v", e)
				}
			}
		case fApproval:
			r.Approval, err = str(rs, f, 1, MaxApprovalBytes)
		}
	}
	if err != nil {
		return Request{}, err
	}
	return r, nil
}

func want(rs *[numFields]raw, f int, k kind, what string) *Error {
	if rs[f].n == 0 {
		return badRequest(fieldNames[f], "missing field %q", fieldNames[f])
	}
	if rs[f].kind != k {
		return badRequest(fieldNames[f], "field %q: want %s, got %s", fieldNames[f], what, rs[f].kind)
	}
	return nil
}

// str reads a string field of min..max bytes of printable characters.
func str(rs *[numFields]raw, f, min, max int) (string, *Error) {
	if err := want(rs, f, kString, "a string"); err != nil {
		return "", err
	}
	s := rs[f].text
	if len(s) < min {
		return "", badRequest(fieldNames[f], "field %q is empty", fieldNames[f])
	}
	if why := CheckText(s, max); why != "" {
		return "", badRequest(fieldNames[f], "field %q %s", fieldNames[f], why)
	}
	return s, nil
}

// CheckText says what is wrong with a string field's text, or "".
// Printable means unicode.IsPrint: no control or format characters, and no
// space but U+0020, so an id or reason cannot forge a line in a log.
// U+FFFD, the replacement character, is printable (a symbol) and passes
// like any other: sent as UTF-8 or as the escape "\ufffd" it is one
// character, and since the decoder refuses lone surrogate escapes and
// invalid UTF-8, it can only reach a field when the client sent it.
func CheckText(s string, max int) string {
	if len(s) > max {
		return fmt.Sprintf("is %d bytes, over the limit of %d", len(s), max)
	}
	for _, c := range s {
		if !unicode.IsPrint(c) {
			return fmt.Sprintf("holds the unprintable character %U", c)
		}
	}
	return ""
}

// uinteger reads an id or an epoch: a plain integer in 1..2^64-1. Zero is
// refused because no saga or epoch is ever numbered 0, so a zero can only
// be a client's unset field.
func uinteger(rs *[numFields]raw, f int) (uint64, *Error) {
	if err := want(rs, f, kNumber, "a positive integer"); err != nil {
		return 0, err
	}
	// ParseUint takes only digits: a sign, fraction or exponent is refused
	// here rather than rounded, so 1.5 or 1e3 never becomes an id.
	v, err := strconv.ParseUint(rs[f].text, 10, 64)
	if err != nil || v == 0 {
		return 0, badRequest(fieldNames[f], "field %q: want an integer from 1 to 18446744073709551615, got %s", fieldNames[f], clip(rs[f].text))
	}
	return v, nil
}

// integer reads a duration in ms: a plain integer in 1..max.
func integer(rs *[numFields]raw, f int, max uint64) (int64, *Error) {
	if err := want(rs, f, kNumber, "a positive integer"); err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(rs[f].text, 10, 64)
	if err != nil || v == 0 || v > max {
		return 0, badRequest(fieldNames[f], "field %q: want an integer from 1 to %d, got %s", fieldNames[f], max, clip(rs[f].text))
	}
	return int64(v), nil
}

// number reads a value. JSON has no NaN or Infinity (a literal one is a
// syntax error, refused while scanning), but a literal too large for a
// float64 would parse as ±Inf: that is NOT_FINITE, the code the gate gives
// any non-finite value. A huge finite value such as 1e308 passes here; the
// gate refuses it by the actuator's limits.
func number(rs *[numFields]raw, f int) (float64, *Error) {
	if err := want(rs, f, kNumber, "a number"); err != nil {
		return 0, err
	}
	v, err := strconv.ParseFloat(rs[f].text, 64)
	if errors.Is(err, strconv.ErrRange) && math.IsInf(v, 0) {
		return 0, &Error{Code: CodeNotFinite, Field: fieldNames[f], Message: fmt.Sprintf("field %q: %s is beyond the range of a float64", fieldNames[f], clip(rs[f].text))}
	}
	if err != nil { // an underflow to zero is no error in strconv; anything else is unexpected
		return 0, badRequest(fieldNames[f], "field %q: not a number: %s", fieldNames[f], clip(rs[f].text))
	}
	return v, nil
}

// clip shortens client text quoted back in a message, so a reply never
// echoes a payload's bulk.
func clip(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// wireRequest fixes the key order of an encoded request.
type wireRequest struct {
	ID         string   `json:"id"`
	Agent      string   `json:"agent"`
	Op         Op       `json:"op"`
	TTLMS      int64    `json:"ttl_ms,omitempty"`
	Lease      string   `json:"lease,omitempty"`
	Epoch      uint64   `json:"epoch,omitempty"`
	Saga       uint64   `json:"saga,omitempty"`
	Actuator   string   `json:"actuator,omitempty"`
	Value      *float64 `json:"value,omitempty"`
	DeadlineMS int64    `json:"deadline_ms,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	Token      string   `json:"token,omitempty"`
	Will       string   `json:"will,omitempty"`
	Approval   string   `json:"approval,omitempty"`
}

// EncodeRequest encodes a request as a client publishes it. It refuses a
// request DecodeRequest would refuse, or one that would not decode back to
// itself, by decoding its own output: the two can never disagree.
func EncodeRequest(r Request) ([]byte, error) {
	w := wireRequest{ID: r.ID, Agent: r.Agent, Op: r.Op, TTLMS: r.TTLMS, Lease: r.Lease, Epoch: r.Epoch,
		Saga: r.Saga, Actuator: r.Actuator, DeadlineMS: r.DeadlineMS, Reason: r.Reason, Token: r.Token, Will: r.Will, Approval: r.Approval}
	if r.Op == OpStep || r.Value != 0 {
		v := r.Value
		w.Value = &v
	}
	if math.IsNaN(r.Value) || math.IsInf(r.Value, 0) {
		return nil, &Error{Code: CodeNotFinite, Field: "value", Message: "field \"value\" is not finite"}
	}
	b, err := marshal(w)
	if err != nil {
		return nil, err
	}
	back, derr := DecodeRequest(b, 0)
	if derr != nil {
		return nil, derr
	}
	if back != r {
		return nil, badRequest("", "request does not survive encoding (a negative or invalid field?)")
	}
	return b, nil
}

// marshal encodes without HTML escaping (people read these payloads with
// mosquitto_sub) and without the encoder's trailing newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Reply answers one request on the agent's reply topic. A refusal (OK
// false) always carries Code, one of Codes, and Message. Optional fields are
// omitted when zero; a pointer is set exactly when the value means something
// (a step's value 0 is a value).
//
// A transport whose packets are bounded encodes it with EncodeReplyMax,
// which keeps ID, OK and Code and shrinks the rest to fit: a long Message
// is clipped (ending in "…"), a Report is summarised (see ReportJSON), and
// a Status too large is replaced by {"ready","halted","truncated":true,
// "message"}, which points the client to the HTTP status endpoint.
type Reply struct {
	ID      string `json:"id"` // the request's id; "" when none could be read
	OK      bool   `json:"ok"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`

	Lease       string `json:"lease,omitempty"`        // hello
	Epoch       uint64 `json:"epoch,omitempty"`        // hello
	TTLMS       int64  `json:"ttl_ms,omitempty"`       // hello, heartbeat: the TTL granted
	HeartbeatMS int64  `json:"heartbeat_ms,omitempty"` // hello, heartbeat: send a heartbeat this often

	Saga      uint64   `json:"saga,omitempty"` // begin, step, commit, abort
	Step      uint32   `json:"step,omitempty"` // step: its number in the saga, from 1
	Value     *float64 `json:"value,omitempty"`
	Prior     *float64 `json:"prior,omitempty"`
	Requested *float64 `json:"requested,omitempty"` // only when clamped: what was asked for
	Clamped   bool     `json:"clamped,omitempty"`

	Report *ReportJSON `json:"report,omitempty"` // abort, STEP_FAILED, STEP_IN_DOUBT
	// Status answers op status with the supervisor's full status, the
	// object its HTTP status endpoint serves. That object belongs to the
	// supervisor, so it travels here already encoded; it always has
	// "ready" and "halted".
	Status json.RawMessage `json:"status,omitempty"`
}

// ReportJSON is a RollbackReport on the wire (rollback.Report).
//
// A report too large for the transport's packets (EncodeReplyMax,
// EncodeEventMax) is summarised: Truncated is true, StepsTotal and Buckets
// count every step of the unwind, StepsOmitted says how many are not listed,
// and Steps lists the others, still in unwind order. The steps kept are,
// first, those not compensated, in unwind order (the first problem is
// usually the cause; a halt's first unresolved steps are the latest
// commands, where the robot stands), then the compensated ones from the
// last unwound backwards (an actuator's last compensation is where it was
// left); texts may be clipped (ending in "…"). The verdict is always the
// verdict of every step, never of the steps listed.
type ReportJSON struct {
	Saga      uint64 `json:"saga"`
	Agent     string `json:"agent"`
	Reason    string `json:"reason,omitempty"`
	Order     string `json:"order"` // "retrace" or "direct"
	Recovered bool   `json:"recovered,omitempty"`
	// Verdict is "clean" or "partial". EncodeReply and EncodeEvent derive
	// it from the steps' buckets again, so no hand-built report can
	// publish "clean" for a partial unwind; for a summarised report, from
	// Buckets too: "clean" only if they count every one of StepsTotal
	// steps as compensated.
	Verdict string `json:"verdict"`
	// Truncated marks a summarised report; the three fields after it are
	// set only then.
	Truncated    bool           `json:"truncated,omitempty"`
	StepsTotal   int            `json:"steps_total,omitempty"`   // the steps of the whole unwind
	StepsOmitted int            `json:"steps_omitted,omitempty"` // the steps not in Steps
	Buckets      map[string]int `json:"buckets,omitempty"`       // the steps per bucket, all of them; "other": a bucket rollback does not define, or unknown
	Steps        []StepReport   `json:"steps"`                   // in unwind order; [] when nothing moved
}

// StepReport is one step of a ReportJSON.
type StepReport struct {
	Step     uint32   `json:"step"`
	Actuator string   `json:"actuator"`
	Prior    *float64 `json:"prior"`  // the value it was unwound to; null if not finite
	Target   *float64 `json:"target"` // the value it had commanded; null if not finite
	Outcome  string   `json:"outcome"`
	Bucket   string   `json:"bucket"`
	Attempts uint32   `json:"attempts"`
	Error    string   `json:"error,omitempty"`
}

// ReportFromRollback converts an engine report (nil gives nil).
func ReportFromRollback(r *rollback.Report) *ReportJSON {
	if r == nil {
		return nil
	}
	j := &ReportJSON{Saga: r.Saga, Agent: r.Agent, Reason: r.Reason, Order: r.Order.String(),
		Recovered: r.Recovered, Verdict: r.Verdict(), Steps: make([]StepReport, 0, len(r.Steps))}
	for _, s := range r.Steps {
		j.Steps = append(j.Steps, StepReport{Step: s.Step, Actuator: s.Actuator, Prior: finite(s.Prior), Target: finite(s.Target),
			Outcome: string(s.Outcome), Bucket: string(s.Bucket), Attempts: s.Attempts, Error: s.Error})
	}
	return j
}

// finite points at a copy of v, or is nil when JSON cannot carry v.
func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// StepReply is the reply to a step the engine applied.
func StepReply(id string, saga uint64, res rollback.StepResult) Reply {
	r := Reply{ID: id, OK: true, Saga: saga, Step: res.Step, Value: finite(res.Value), Prior: finite(res.Prior), Clamped: res.Clamped}
	if res.Clamped {
		r.Requested = finite(res.Requested)
	}
	return r
}

// ErrorReply is the refusal reply to request id for err: an *Error of this
// package or a *rollback.Error (with its report, if it ended the saga) keep
// their code and message. Anything else — and a code missing from Codes, so
// nothing undocumented reaches an agent — is INTERNAL, with the error's text
// as message. A nil err is INTERNAL too: a reply built from "no error" must
// never read as success.
func ErrorReply(id string, err error) Reply {
	r := Reply{ID: id, Code: CodeInternal}
	var we *Error
	var re *rollback.Error
	switch {
	case err == nil:
		r.Message = "internal error: a refusal without an error"
	// The engine's type is matched first: errors.As stops at a match, and
	// a typed nil *rollback.Error further down a chain would otherwise
	// have its Unwrap called, which dereferences it.
	case errors.As(err, &re):
		if re == nil { // a typed nil passed as an error: a caller's bug
			r.Message = "internal error: a nil *rollback.Error"
			break
		}
		r.Code, r.Message, r.Report = string(re.Code), re.Message, ReportFromRollback(re.Report)
	case errors.As(err, &we):
		if we == nil {
			r.Message = "internal error: a nil *api.Error"
			break
		}
		r.Code, r.Message = we.Code, we.Message
	default:
		r.Message = "internal error: " + err.Error()
	}
	info, ok := Lookup(r.Code)
	if !ok {
		r.Code, r.Message = CodeInternal, fmt.Sprintf("internal error: unlisted code %q: %s", clip(r.Code), r.Message)
		info, _ = Lookup(CodeInternal)
	}
	if r.Message == "" {
		r.Message = info.Meaning
	}
	return r
}

// EncodeReply encodes a reply. The output is deterministic (fixed key
// order, shortest float form). Non-finite numbers, which JSON cannot carry
// and the gate never lets through, are encoded as null rather than failing;
// a report's verdict is derived from its buckets; a refusal always has a
// code and a message.
func EncodeReply(r Reply) []byte { return mustMarshal(sanitizeReply(r)) }

func sanitizeReply(r Reply) Reply {
	if len(r.Status) > 0 && !json.Valid(r.Status) {
		// Publishing ok with a broken body would be worse than admitting
		// the failure.
		return Reply{ID: r.ID, Code: CodeInternal, Message: "internal error: the status is not valid JSON"}
	}
	r.Value, r.Prior, r.Requested = finitePtr(r.Value), finitePtr(r.Prior), finitePtr(r.Requested)
	r.Report = sanitizeReport(r.Report)
	if !r.OK && r.Code == "" {
		// A refusal without a code would break the promise every
		// client reads replies by.
		r.Code = CodeInternal
	}
	if !r.OK && r.Message == "" {
		r.Message = r.Code
		if info, ok := Lookup(r.Code); ok {
			r.Message = info.Meaning
		}
	}
	return r
}

func finitePtr(p *float64) *float64 {
	if p == nil {
		return nil
	}
	return finite(*p)
}

// sanitizeReport copies a report with its floats made encodable and its
// verdict derived from its buckets, exactly as rollback.Report.Clean does.
func sanitizeReport(in *ReportJSON) *ReportJSON {
	if in == nil {
		return nil
	}
	out := *in
	out.Steps = make([]StepReport, len(in.Steps))
	for i, s := range in.Steps {
		s.Prior, s.Target = finitePtr(s.Prior), finitePtr(s.Target)
		out.Steps[i] = s
	}
	out.Verdict = "partial"
	if clean(&out) {
		out.Verdict = "clean"
	}
	return &out
}

// clean says whether a report may read "clean": every step listed is
// compensated and, if it is a summary (or claims any of a summary's
// fields), its counts account for every one of its steps as compensated.
// A summary whose counts do not add up is partial: when unsure, the wire
// says "look at the robot".
func clean(r *ReportJSON) bool {
	for _, s := range r.Steps {
		if s.Bucket != string(rollback.Compensated) {
			return false
		}
	}
	if !r.Truncated && r.StepsTotal == 0 && r.StepsOmitted == 0 && r.Buckets == nil {
		return true
	}
	for b, n := range r.Buckets {
		if n < 0 || b != string(rollback.Compensated) && n != 0 {
			return false
		}
	}
	return r.StepsOmitted >= 0 && r.StepsTotal == len(r.Steps)+r.StepsOmitted &&
		r.Buckets[string(rollback.Compensated)] == r.StepsTotal
}

// mustMarshal encodes v, whose types (strings, integers, bools, floats
// made finite) cannot fail to encode: a failure is a bug in this file.
func mustMarshal(v any) []byte {
	b, err := marshal(v)
	if err != nil {
		panic("api: encoding a payload: " + err.Error())
	}
	return b
}

// Status is the retained payload of the status topic: whether the
// supervisor is there and can take commands. It is small on purpose: it is
// also the last will, fixed when the supervisor connects. The full status
// is the reply to op status.
type Status struct {
	State      string   `json:"state"`             // StateOnline or StateOffline
	Ready      bool     `json:"ready"`             // commands can be admitted
	Reasons    []string `json:"reasons,omitempty"` // why not ready
	Halted     bool     `json:"halted"`            // latched halt: an operator must reset
	HaltReason string   `json:"halt_reason,omitempty"`
	// Seq grows with every status the supervisor publishes (it starts from
	// the wall clock in microseconds, so a restarted supervisor's sort
	// after its predecessor's): of two statuses, the one with the larger
	// seq is the newer. The offline will has none (0).
	Seq uint64 `json:"seq,omitempty"`
}

// The values of Status.State.
const (
	StateOnline  = "online"
	StateOffline = "offline" // also the supervisor's last will
)

// State is the last value the supervisor commanded an actuator to: what
// it believes the actuator holds. A transport keeps the latest one per
// actuator (MQTT: retained on state/<actuator>).
type State struct {
	Actuator  string
	Commanded float64
}

type wireState struct {
	Actuator  string   `json:"actuator"`
	Commanded *float64 `json:"commanded"` // null when not finite (an unknown position)
}

// EncodeState encodes a state payload.
func EncodeState(s State) []byte {
	return mustMarshal(wireState{Actuator: s.Actuator, Commanded: finite(s.Commanded)})
}

// EncodeStatus encodes a status payload.
func EncodeStatus(s Status) []byte { return mustMarshal(s) }

// Event is one message on the events topic. Clients must ignore kinds they
// do not know: the transport will add kinds (steps, refusals, halts).
type Event struct {
	Kind   string      `json:"kind"`
	Reply  *Reply      `json:"reply,omitempty"`  // EventReply
	Report *ReportJSON `json:"report,omitempty"` // EventRollback
	// EventDrift: the actuator, and where its device now holds it.
	Actuator string   `json:"actuator,omitempty"`
	Value    *float64 `json:"value,omitempty"`
}

// The kinds of Event defined so far.
const (
	// EventReply carries a reply that had no agent to go to: the request's
	// agent could not be read, so reply/<agent> has no topic.
	EventReply = "reply"
	// EventRollback carries the report of an unwind nobody asked for by
	// request: a lease expiry, an agent's will, a halt, crash recovery.
	EventRollback = "rollback"
	// EventDrift reports an actuator its device moved on its own (a
	// board's watchdog, restart or e-stop): the supervisor now takes the
	// device's value as the actuator's position.
	EventDrift = "drift"
)

// EncodeEvent encodes an event with the same guarantees as EncodeReply.
func EncodeEvent(e Event) []byte { return mustMarshal(sanitizeEvent(e)) }

func sanitizeEvent(e Event) Event {
	if e.Reply != nil {
		r := sanitizeReply(*e.Reply)
		e.Reply = &r
	}
	e.Report = sanitizeReport(e.Report)
	return e
}
