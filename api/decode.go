package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

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
	fApprovals
	fZone
	numFields
)

var fieldNames = [numFields]string{"id", "agent", "op", "ttl_ms", "lease", "epoch", "saga", "actuator", "value", "deadline_ms", "reason", "token", "will", "approval", "approvals", "zone"}

func fieldIndex(key string) int {
	for i, n := range fieldNames {
		if n == key {
			return i
		}
	}
	return -1
}

// fieldSet holds one bit per field. With zone and approvals merged the 16
// fields fill a uint16 exactly; the constant below stops the build (the
// shift overflows) if a 17th is added without widening it.
type fieldSet uint16

const _ fieldSet = 1 << (numFields - 1)

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
	OpStep:      {required: fields(fLease, fEpoch, fSaga, fActuator, fValue), optional: fields(fDeadline, fApproval, fApprovals)},
	OpCommit:    {required: fields(fLease, fEpoch, fSaga)},
	OpAbort:     {required: fields(fLease, fEpoch, fSaga), optional: fields(fReason)},
	OpBye:       {required: fields(fLease, fEpoch)},
	OpHalt:      {optional: fields(fReason, fZone)},
	OpReset:     {required: fields(fToken), optional: fields(fZone)},
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
	list strList // approvals: its items
}

// strList is an array field's items as scanned: the first maxItems+1
// strings (so memory stays bounded, whatever the array holds), how many
// items there were, and the kind of the first that is not a string.
type strList struct {
	items []string
	n     int
	odd   kind
	oddAt int
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
		var list strList
		switch k {
		case kString:
			esc = loneSurrogate(lit)
		case kArray:
			if fieldIndex(key) == fApprovals {
				list, esc, err = t.strings(MaxApprovals + 1)
			} else {
				esc, err = t.skipNested()
			}
			if err != nil {
				return syntax(err)
			}
		case kObject:
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
			rs[i] = raw{n: 1, kind: k, text: text, lone: esc != "", list: list}
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

// strings consumes the rest of an array whose '[' was just read, keeping
// its first maxItems string items; it returns the first lone surrogate
// escape in any of its strings, as skipNested does. A nested array or
// object is skipped whole and counted as one item of that kind.
func (t *tokens) strings(maxItems int) (strList, string, error) {
	var l strList
	esc := ""
	for {
		tok, lit, err := t.next()
		if err != nil {
			return l, "", err
		}
		if d, ok := tok.(json.Delim); ok && d == ']' {
			return l, esc, nil
		}
		k, text := classify(tok)
		e := ""
		switch k {
		case kString:
			e = loneSurrogate(lit)
			if len(l.items) < maxItems {
				l.items = append(l.items, text)
			}
		case kObject, kArray:
			if e, err = t.skipNested(); err != nil {
				return l, "", err
			}
		}
		if esc == "" {
			esc = e
		}
		if k != kString && l.odd == 0 {
			l.odd, l.oddAt = k, l.n
		}
		l.n++
	}
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
			r.TTLMS, err = integer(rs, f, maxTTLMS)
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
			if r.Approval, err = str(rs, f, 1, MaxApprovalBytes); err == nil && strings.Contains(r.Approval, " ") {
				err = badRequest("approval", "field \"approval\" holds a space: it is one token; send several in approvals")
			}
		case fApprovals:
			r.Approval, err = approvals(rs)
		case fZone:
			if r.Zone, err = str(rs, f, 1, MaxNameBytes); err == nil {
				if e := ValidName(r.Zone); e != nil {
					err = badRequest("zone", "field \"zone\": %v", e)
				}
			}
		}
	}
	if err != nil {
		return Request{}, err
	}
	return r, nil
}

// approvals reads the approvals field: 1..MaxApprovals tokens, each as
// the approval field takes one, joined by spaces (Request.Approval).
func approvals(rs *[numFields]raw) (string, *Error) {
	const name = "approvals"
	if err := want(rs, fApprovals, kArray, "an array of approval tokens"); err != nil {
		return "", err
	}
	if rs[fApproval].n > 0 {
		return "", badRequest(name, "send approval or approvals, not both")
	}
	l := rs[fApprovals].list
	switch {
	case l.n == 0:
		return "", badRequest(name, "field %q is empty: leave it out, or send 1..%d tokens", name, MaxApprovals)
	case l.n > MaxApprovals:
		return "", badRequest(name, "field %q holds %d tokens, over the limit of %d", name, l.n, MaxApprovals)
	case l.odd != 0:
		return "", badRequest(name, "field %q: item %d is %s, want a string", name, l.oddAt+1, l.odd)
	}
	for i, tok := range l.items {
		why := CheckText(tok, MaxApprovalBytes)
		switch {
		case tok == "":
			why = "is empty"
		case why == "" && strings.Contains(tok, " "):
			why = "holds a space: a token never does"
		}
		if why != "" {
			return "", badRequest(name, "field %q: item %d %s", name, i+1, why)
		}
	}
	return strings.Join(l.items, " "), nil
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
