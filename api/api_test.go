package api

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// step is a valid step request; cases below break it one way at a time.
const step = `{"id":"c1","agent":"arm-ctl","op":"step","lease":"L1","epoch":7,"saga":3,"actuator":"elbow","value":90}`

// replace returns step with old replaced by new (exactly once).
func replace(old, new string) string {
	if strings.Count(step, old) != 1 {
		panic("replace: " + old)
	}
	return strings.Replace(step, old, new, 1)
}

type badCase struct {
	name    string
	payload string
	code    string
	field   string // "" = not checked
	id      string // salvaged
	agent   string // salvaged
	max     int    // maxBytes; 0 = the default
}

// badCases are malformed or hostile requests, each with the code and the
// salvaged id and agent DecodeRequest must give.
var badCases = []badCase{
	// Not one JSON object.
	{name: "empty", payload: ``, code: CodeBadRequest},
	{name: "whitespace", payload: " \n\t ", code: CodeBadRequest},
	{name: "not JSON", payload: `hello arm`, code: CodeBadRequest},
	{name: "array", payload: `[]`, code: CodeBadRequest},
	{name: "array of request", payload: `[` + step + `]`, code: CodeBadRequest},
	{name: "string", payload: `"step"`, code: CodeBadRequest},
	{name: "number", payload: `42`, code: CodeBadRequest},
	{name: "null", payload: `null`, code: CodeBadRequest},
	{name: "true", payload: `true`, code: CodeBadRequest},
	{name: "truncated", payload: step[:len(step)-1], code: CodeBadRequest, id: "c1", agent: "arm-ctl"},
	{name: "truncated in key", payload: `{"id":"c1","agent":"arm-ctl","va`, code: CodeBadRequest, id: "c1", agent: "arm-ctl"},
	{name: "trailing garbage", payload: step + `x`, code: CodeBadRequest, id: "c1", agent: "arm-ctl"},
	{name: "two objects", payload: step + step, code: CodeBadRequest, id: "c1", agent: "arm-ctl"},
	{name: "trailing comma", payload: replace(`"value":90}`, `"value":90,}`), code: CodeBadRequest, id: "c1", agent: "arm-ctl"},
	{name: "missing comma", payload: replace(`"saga":3,`, `"saga":3 `), code: CodeBadRequest, id: "c1", agent: "arm-ctl"},
	{name: "single quotes", payload: `{'id':'c1'}`, code: CodeBadRequest},
	{name: "comment", payload: `{"id":"c1" /* hi */}`, code: CodeBadRequest, id: "c1"},
	{name: "BOM", payload: "\ufeff" + step, code: CodeBadRequest},
	{name: "deep nesting", payload: `{"id":"c1","x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, code: CodeBadRequest, id: "c1", max: 1 << 20},

	// Size and encoding.
	{name: "1 MiB", payload: `{"id":"c1","agent":"a","op":"halt","reason":"` + strings.Repeat("x", 1<<20) + `"}`, code: CodePayloadTooLarge},
	{name: "invalid UTF-8", payload: replace(`"elbow"`, "\"elb\xffow\""), code: CodeBadRequest},
	{name: "overlong UTF-8", payload: replace(`"elbow"`, "\"\xc0\xaf\""), code: CodeBadRequest},

	// Numbers.
	{name: "NaN literal", payload: replace(`90`, `NaN`), code: CodeBadRequest, id: "c1", agent: "arm-ctl"},
	{name: "Infinity literal", payload: replace(`90`, `Infinity`), code: CodeBadRequest, id: "c1", agent: "arm-ctl"},
	{name: "-Infinity literal", payload: replace(`90`, `-Infinity`), code: CodeBadRequest, id: "c1", agent: "arm-ctl"},
	{name: "value 1e400", payload: replace(`90`, `1e400`), code: CodeNotFinite, field: "value", id: "c1", agent: "arm-ctl"},
	{name: "value -1e400", payload: replace(`90`, `-1e400`), code: CodeNotFinite, field: "value", id: "c1", agent: "arm-ctl"},
	{name: "value hex", payload: replace(`90`, `0x5a`), code: CodeBadRequest, id: "c1", agent: "arm-ctl"},
	{name: "value plus sign", payload: replace(`90`, `+90`), code: CodeBadRequest, id: "c1", agent: "arm-ctl"},
	{name: "value leading zero", payload: replace(`90`, `090`), code: CodeBadRequest, id: "c1", agent: "arm-ctl"},
	{name: "value as string", payload: replace(`90`, `"90"`), code: CodeBadRequest, field: "value", id: "c1", agent: "arm-ctl"},
	{name: "value as bool", payload: replace(`90`, `true`), code: CodeBadRequest, field: "value", id: "c1", agent: "arm-ctl"},
	{name: "value null", payload: replace(`90`, `null`), code: CodeBadRequest, field: "value", id: "c1", agent: "arm-ctl"},
	{name: "value object", payload: replace(`90`, `{"deg":90}`), code: CodeBadRequest, field: "value", id: "c1", agent: "arm-ctl"},
	{name: "value array", payload: replace(`90`, `[90]`), code: CodeBadRequest, field: "value", id: "c1", agent: "arm-ctl"},
	{name: "epoch -1", payload: replace(`"epoch":7`, `"epoch":-1`), code: CodeBadRequest, field: "epoch", id: "c1", agent: "arm-ctl"},
	{name: "epoch 1.5", payload: replace(`"epoch":7`, `"epoch":1.5`), code: CodeBadRequest, field: "epoch", id: "c1", agent: "arm-ctl"},
	{name: "epoch 7.0", payload: replace(`"epoch":7`, `"epoch":7.0`), code: CodeBadRequest, field: "epoch", id: "c1", agent: "arm-ctl"},
	{name: "epoch 1e3", payload: replace(`"epoch":7`, `"epoch":1e3`), code: CodeBadRequest, field: "epoch", id: "c1", agent: "arm-ctl"},
	{name: "epoch 0", payload: replace(`"epoch":7`, `"epoch":0`), code: CodeBadRequest, field: "epoch", id: "c1", agent: "arm-ctl"},
	{name: "epoch as string", payload: replace(`"epoch":7`, `"epoch":"7"`), code: CodeBadRequest, field: "epoch", id: "c1", agent: "arm-ctl"},
	{name: "saga beyond uint64", payload: replace(`"saga":3`, `"saga":18446744073709551616`), code: CodeBadRequest, field: "saga", id: "c1", agent: "arm-ctl"},
	{name: "saga huge", payload: replace(`"saga":3`, `"saga":`+strings.Repeat("9", 400)), code: CodeBadRequest, field: "saga", id: "c1", agent: "arm-ctl"},
	{name: "saga as string", payload: replace(`"saga":3`, `"saga":"3"`), code: CodeBadRequest, field: "saga", id: "c1", agent: "arm-ctl"},
	{name: "saga 0", payload: replace(`"saga":3`, `"saga":0`), code: CodeBadRequest, field: "saga", id: "c1", agent: "arm-ctl"},
	{name: "deadline 0", payload: replace(`"value":90`, `"value":90,"deadline_ms":0`), code: CodeBadRequest, field: "deadline_ms", id: "c1", agent: "arm-ctl"},
	{name: "deadline over a minute", payload: replace(`"value":90`, `"value":90,"deadline_ms":60001`), code: CodeBadRequest, field: "deadline_ms", id: "c1", agent: "arm-ctl"},
	{name: "deadline fractional", payload: replace(`"value":90`, `"value":90,"deadline_ms":1.5`), code: CodeBadRequest, field: "deadline_ms", id: "c1", agent: "arm-ctl"},
	{name: "deadline negative", payload: replace(`"value":90`, `"value":90,"deadline_ms":-100`), code: CodeBadRequest, field: "deadline_ms", id: "c1", agent: "arm-ctl"},
	{name: "ttl negative", payload: `{"id":"h","agent":"a","op":"hello","ttl_ms":-5}`, code: CodeBadRequest, field: "ttl_ms", id: "h", agent: "a"},
	{name: "ttl zero", payload: `{"id":"h","agent":"a","op":"hello","ttl_ms":0}`, code: CodeBadRequest, field: "ttl_ms", id: "h", agent: "a"},
	{name: "ttl beyond int64", payload: `{"id":"h","agent":"a","op":"hello","ttl_ms":9223372036854775808}`, code: CodeBadRequest, field: "ttl_ms", id: "h", agent: "a"},
	// 2^58+5000 ms: as a time.Duration it wrapped around to 5 s, inside
	// the supervisor's bounds, and was granted.
	{name: "ttl beyond a Duration", payload: `{"id":"h","agent":"a","op":"hello","ttl_ms":288230376151716744}`, code: CodeBadRequest, field: "ttl_ms", id: "h", agent: "a"},
	{name: "ttl one past a Duration", payload: `{"id":"h","agent":"a","op":"hello","ttl_ms":9223372036855}`, code: CodeBadRequest, field: "ttl_ms", id: "h", agent: "a"},

	// Keys: duplicates, unknown, case.
	{name: "duplicate value", payload: replace(`"value":90`, `"value":1,"value":900`), code: CodeBadRequest, field: "value", id: "c1", agent: "arm-ctl"},
	{name: "duplicate value escaped", payload: replace(`"value":90`, `"value":1,"\u0076alue":900`), code: CodeBadRequest, field: "value", id: "c1", agent: "arm-ctl"},
	{name: "duplicate equal values", payload: replace(`"value":90`, `"value":90,"value":90`), code: CodeBadRequest, field: "value", id: "c1", agent: "arm-ctl"},
	{name: "duplicate id", payload: replace(`"id":"c1"`, `"id":"c1","id":"c2"`), code: CodeBadRequest, field: "id", agent: "arm-ctl"},
	{name: "duplicate agent", payload: replace(`"agent":"arm-ctl"`, `"agent":"arm-ctl","agent":"other"`), code: CodeBadRequest, field: "agent", id: "c1"},
	{name: "duplicate op", payload: replace(`"op":"step"`, `"op":"step","op":"halt"`), code: CodeBadRequest, field: "op", id: "c1", agent: "arm-ctl"},
	{name: "unknown field", payload: replace(`"value":90`, `"value":90,"speed":5`), code: CodeBadRequest, field: "speed", id: "c1", agent: "arm-ctl"},
	{name: "unknown field first", payload: `{"clamp_ok":true,"id":"c1","agent":"arm-ctl","op":"status"}`, code: CodeBadRequest, field: "clamp_ok", id: "c1", agent: "arm-ctl"},
	{name: "unknown nested object", payload: replace(`"value":90`, `"value":90,"meta":{"value":900}`), code: CodeBadRequest, field: "meta", id: "c1", agent: "arm-ctl"},
	{name: "key case", payload: replace(`"value":90`, `"Value":90`), code: CodeBadRequest, field: "Value", id: "c1", agent: "arm-ctl"},
	{name: "unknown field and 1e400", payload: replace(`"value":90`, `"value":1e400,"x":1`), code: CodeBadRequest, field: "x", id: "c1", agent: "arm-ctl"},

	// id, agent, op.
	{name: "missing id", payload: replace(`"id":"c1",`, ``), code: CodeBadRequest, field: "id", agent: "arm-ctl"},
	{name: "empty id", payload: replace(`"id":"c1"`, `"id":""`), code: CodeBadRequest, field: "id", agent: "arm-ctl"},
	{name: "id number", payload: replace(`"id":"c1"`, `"id":1`), code: CodeBadRequest, field: "id", agent: "arm-ctl"},
	{name: "id too long", payload: replace(`"id":"c1"`, `"id":"`+strings.Repeat("i", MaxIDBytes+1)+`"`), code: CodeBadRequest, field: "id", agent: "arm-ctl"},
	{name: "id newline", payload: replace(`"id":"c1"`, `"id":"c1\nINFO forged"`), code: CodeBadRequest, field: "id", agent: "arm-ctl"},
	{name: "missing agent", payload: replace(`"agent":"arm-ctl",`, ``), code: CodeBadRequest, field: "agent", id: "c1"},
	{name: "empty agent", payload: replace(`"agent":"arm-ctl"`, `"agent":""`), code: CodeBadRequest, field: "agent", id: "c1"},
	{name: "agent with +", payload: replace(`"agent":"arm-ctl"`, `"agent":"arm+ctl"`), code: CodeBadRequest, field: "agent", id: "c1"},
	{name: "agent with #", payload: replace(`"agent":"arm-ctl"`, `"agent":"#"`), code: CodeBadRequest, field: "agent", id: "c1"},
	{name: "agent with /", payload: replace(`"agent":"arm-ctl"`, `"agent":"other/../arm-ctl"`), code: CodeBadRequest, field: "agent", id: "c1"},
	{name: "agent with NUL", payload: replace(`"agent":"arm-ctl"`, `"agent":"arm\u0000"`), code: CodeBadRequest, field: "agent", id: "c1"},
	{name: "agent too long", payload: replace(`"agent":"arm-ctl"`, `"agent":"`+strings.Repeat("a", MaxNameBytes+1)+`"`), code: CodeBadRequest, field: "agent", id: "c1"},
	{name: "agent object", payload: replace(`"agent":"arm-ctl"`, `"agent":{"name":"arm-ctl"}`), code: CodeBadRequest, field: "agent", id: "c1"},
	{name: "missing op", payload: replace(`"op":"step",`, ``), code: CodeBadRequest, field: "op", id: "c1", agent: "arm-ctl"},
	{name: "unknown op", payload: replace(`"op":"step"`, `"op":"fly"`), code: CodeBadRequest, field: "op", id: "c1", agent: "arm-ctl"},
	{name: "op upper case", payload: replace(`"op":"step"`, `"op":"STEP"`), code: CodeBadRequest, field: "op", id: "c1", agent: "arm-ctl"},
	{name: "op number", payload: replace(`"op":"step"`, `"op":4`), code: CodeBadRequest, field: "op", id: "c1", agent: "arm-ctl"},

	// Fields per op.
	{name: "step without value", payload: replace(`,"value":90`, ``), code: CodeBadRequest, field: "value", id: "c1", agent: "arm-ctl"},
	{name: "step without actuator", payload: replace(`"actuator":"elbow",`, ``), code: CodeBadRequest, field: "actuator", id: "c1", agent: "arm-ctl"},
	{name: "step without lease", payload: replace(`"lease":"L1",`, ``), code: CodeBadRequest, field: "lease", id: "c1", agent: "arm-ctl"},
	{name: "step empty lease", payload: replace(`"lease":"L1"`, `"lease":""`), code: CodeBadRequest, field: "lease", id: "c1", agent: "arm-ctl"},
	{name: "actuator with /", payload: replace(`"elbow"`, `"elbow/x"`), code: CodeBadRequest, field: "actuator", id: "c1", agent: "arm-ctl"},
	{name: "heartbeat without epoch", payload: `{"id":"h","agent":"a","op":"heartbeat","lease":"L1"}`, code: CodeBadRequest, field: "epoch", id: "h", agent: "a"},
	{name: "saga on hello", payload: `{"id":"h","agent":"a","op":"hello","saga":1}`, code: CodeBadRequest, field: "saga", id: "h", agent: "a"},
	{name: "approval on commit", payload: `{"id":"k","agent":"a","op":"commit","lease":"L1","epoch":7,"saga":3,"approval":"AAAA"}`, code: CodeBadRequest, field: "approval", id: "k", agent: "a"},
	{name: "empty approval", payload: `{"id":"k","agent":"a","op":"step","lease":"L1","epoch":7,"saga":3,"actuator":"e","value":1,"approval":""}`, code: CodeBadRequest, field: "approval", id: "k", agent: "a"},
	{name: "approval too long", payload: `{"id":"k","agent":"a","op":"step","lease":"L1","epoch":7,"saga":3,"actuator":"e","value":1,"approval":"` + strings.Repeat("A", MaxApprovalBytes+1) + `"}`, code: CodeBadRequest, field: "approval", id: "k", agent: "a"},
	{name: "approval not a string", payload: `{"id":"k","agent":"a","op":"step","lease":"L1","epoch":7,"saga":3,"actuator":"e","value":1,"approval":1}`, code: CodeBadRequest, field: "approval", id: "k", agent: "a"},
	{name: "deadline on commit", payload: `{"id":"k","agent":"a","op":"commit","lease":"L1","epoch":7,"saga":3,"deadline_ms":100}`, code: CodeBadRequest, field: "deadline_ms", id: "k", agent: "a"},
	{name: "reason on commit", payload: `{"id":"k","agent":"a","op":"commit","lease":"L1","epoch":7,"saga":3,"reason":"x"}`, code: CodeBadRequest, field: "reason", id: "k", agent: "a"},
	{name: "reason too long", payload: `{"id":"k","agent":"a","op":"halt","reason":"` + strings.Repeat("r", MaxReasonBytes+1) + `"}`, code: CodeBadRequest, field: "reason", id: "k", agent: "a"},
	{name: "reason with escape", payload: `{"id":"k","agent":"a","op":"halt","reason":"\u001b[2J"}`, code: CodeBadRequest, field: "reason", id: "k", agent: "a"},
	{name: "reset without token", payload: `{"id":"r","agent":"op","op":"reset"}`, code: CodeBadRequest, field: "token", id: "r", agent: "op"},
	{name: "status with lease", payload: `{"id":"s","agent":"a","op":"status","lease":"L1"}`, code: CodeBadRequest, field: "lease", id: "s", agent: "a"},
	{name: "value on commit", payload: `{"id":"k","agent":"a","op":"commit","lease":"L1","epoch":7,"saga":3,"value":1}`, code: CodeBadRequest, field: "value", id: "k", agent: "a"},
}

func TestDecodeRequestRefuses(t *testing.T) {
	if len(badCases) < 40 {
		t.Fatalf("only %d cases", len(badCases))
	}
	for _, c := range badCases {
		t.Run(c.name, func(t *testing.T) {
			r, err := DecodeRequest([]byte(c.payload), c.max)
			if err == nil {
				t.Fatalf("accepted %+v", r)
			}
			if err.Code != c.code {
				t.Errorf("code %s, want %s (%s)", err.Code, c.code, err.Message)
			}
			if c.field != "" && err.Field != c.field {
				t.Errorf("field %q, want %q (%s)", err.Field, c.field, err.Message)
			}
			if c.field != "" && !strings.Contains(err.Message, c.field) {
				t.Errorf("message %q does not name %q", err.Message, c.field)
			}
			if _, ok := Lookup(err.Code); !ok || err.Message == "" || err.Error() == "" {
				t.Errorf("error %+v: unlisted code or no message", err)
			}
			if len(err.Message) > 200 {
				t.Errorf("message of %d bytes echoes the payload", len(err.Message))
			}
			// Salvage gives the id and agent and nothing else.
			want := Request{ID: c.id, Agent: c.agent}
			if r != want {
				t.Errorf("salvaged %+v, want %+v", r, want)
			}
		})
	}
}

func TestDecodeRequestSizeBound(t *testing.T) {
	p := []byte(`{"id":"1","agent":"a","op":"status"}`)
	if _, err := DecodeRequest(p, len(p)); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	if _, err := DecodeRequest(p, len(p)-1); err == nil || err.Code != CodePayloadTooLarge {
		t.Fatalf("one byte over: %v", err)
	}
	big := append([]byte(`{"id":"1","agent":"a","op":"status"}`), bytes.Repeat([]byte(" "), DefaultMaxRequestBytes)...)
	if _, err := DecodeRequest(big, 0); err == nil || err.Code != CodePayloadTooLarge {
		t.Fatalf("maxBytes 0 must mean the default: %v", err)
	}
}

// TestLargestValidRequestFits checks DefaultMaxRequestBytes against the
// worst case a client may legitimately send: every string at its limit and
// every character written as a \u escape.
func TestLargestValidRequestFits(t *testing.T) {
	esc := func(n int) string { return strings.Repeat(`\u0041`, n) }
	p := `{"id":"` + esc(MaxIDBytes) + `","agent":"` + esc(MaxNameBytes) + `","op":"step","lease":"` + esc(MaxLeaseBytes) +
		`","epoch":18446744073709551615,"saga":18446744073709551615,"actuator":"` + esc(MaxNameBytes) +
		`","value":-1.7976931348623157e+308,"deadline_ms":60000,"approval":"` + esc(MaxApprovalBytes) + `"}`
	if _, err := DecodeRequest([]byte(p), 0); err != nil {
		t.Fatalf("%d bytes: %v", len(p), err)
	}
	p = `{"id":"` + esc(MaxIDBytes) + `","agent":"` + esc(MaxNameBytes) + `","op":"abort","lease":"` + esc(MaxLeaseBytes) +
		`","epoch":18446744073709551615,"saga":18446744073709551615,"reason":"` + esc(MaxReasonBytes) + `"}`
	if _, err := DecodeRequest([]byte(p), 0); err != nil {
		t.Fatalf("%d bytes: %v", len(p), err)
	}
}

func TestDecodeRequestAccepts(t *testing.T) {
	for _, c := range []struct {
		name    string
		payload string
		want    Request
	}{
		{"1e308 is the gate's to refuse", replace(`90`, `1e308`),
			Request{ID: "c1", Agent: "arm-ctl", Op: OpStep, Lease: "L1", Epoch: 7, Saga: 3, Actuator: "elbow", Value: 1e308}},
		{"negative fraction", replace(`90`, `-12.5`),
			Request{ID: "c1", Agent: "arm-ctl", Op: OpStep, Lease: "L1", Epoch: 7, Saga: 3, Actuator: "elbow", Value: -12.5}},
		{"zero", replace(`90`, `0`),
			Request{ID: "c1", Agent: "arm-ctl", Op: OpStep, Lease: "L1", Epoch: 7, Saga: 3, Actuator: "elbow"}},
		{"underflow is zero", replace(`90`, `1e-400`),
			Request{ID: "c1", Agent: "arm-ctl", Op: OpStep, Lease: "L1", Epoch: 7, Saga: 3, Actuator: "elbow"}},
		{"exponent value", replace(`90`, `9E1`),
			Request{ID: "c1", Agent: "arm-ctl", Op: OpStep, Lease: "L1", Epoch: 7, Saga: 3, Actuator: "elbow", Value: 90}},
		{"max ids", replace(`"epoch":7,"saga":3`, `"epoch":18446744073709551615,"saga":18446744073709551615`),
			Request{ID: "c1", Agent: "arm-ctl", Op: OpStep, Lease: "L1", Epoch: 1<<64 - 1, Saga: 1<<64 - 1, Actuator: "elbow", Value: 90}},
		{"keys in any order, whitespace", " {\n \"value\" : 90 , \"actuator\":\"elbow\",\"saga\":3,\"epoch\":7,\"lease\":\"L1\",\"op\":\"step\",\"agent\":\"arm-ctl\",\"id\":\"c1\"}\n",
			Request{ID: "c1", Agent: "arm-ctl", Op: OpStep, Lease: "L1", Epoch: 7, Saga: 3, Actuator: "elbow", Value: 90}},
		{"escapes and unicode", `{"id":"\u00e9t\u00e9-1","agent":"bras-gauche","op":"halt","reason":"main lev\u00e9e \u2014 \"stop\""}`,
			Request{ID: "été-1", Agent: "bras-gauche", Op: OpHalt, Reason: `main levée — "stop"`}},
		{"approval", replace(`"value":90`, `"value":90,"approval":"AQ-_z09"`),
			Request{ID: "c1", Agent: "arm-ctl", Op: OpStep, Lease: "L1", Epoch: 7, Saga: 3, Actuator: "elbow", Value: 90, Approval: "AQ-_z09"}},
		{"deadline at its limit", replace(`"value":90`, `"value":90,"deadline_ms":60000`),
			Request{ID: "c1", Agent: "arm-ctl", Op: OpStep, Lease: "L1", Epoch: 7, Saga: 3, Actuator: "elbow", Value: 90, DeadlineMS: 60000}},
		{"empty reason", `{"id":"a","agent":"x","op":"abort","lease":"L","epoch":1,"saga":1,"reason":""}`,
			Request{ID: "a", Agent: "x", Op: OpAbort, Lease: "L", Epoch: 1, Saga: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := DecodeRequest([]byte(c.payload), 0)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// TestRequestRoundTrip encodes one request of every op and decodes it back.
// The JSON is golden: it is what a client library must publish.
func TestRequestRoundTrip(t *testing.T) {
	cases := []struct {
		r    Request
		json string
	}{
		{Request{ID: "1", Agent: "me", Op: OpHello, TTLMS: 5000}, `{"id":"1","agent":"me","op":"hello","ttl_ms":5000}`},
		{Request{ID: "1b", Agent: "me", Op: OpHello}, `{"id":"1b","agent":"me","op":"hello"}`},
		{Request{ID: "2", Agent: "me", Op: OpHeartbeat, Lease: "L9", Epoch: 42}, `{"id":"2","agent":"me","op":"heartbeat","lease":"L9","epoch":42}`},
		{Request{ID: "3", Agent: "me", Op: OpBegin, Lease: "L9", Epoch: 42}, `{"id":"3","agent":"me","op":"begin","lease":"L9","epoch":42}`},
		{Request{ID: "4", Agent: "me", Op: OpStep, Lease: "L9", Epoch: 42, Saga: 5, Actuator: "elbow", Value: 0}, `{"id":"4","agent":"me","op":"step","lease":"L9","epoch":42,"saga":5,"actuator":"elbow","value":0}`},
		{Request{ID: "4b", Agent: "me", Op: OpStep, Lease: "L9", Epoch: 42, Saga: 5, Actuator: "elbow", Value: -0.125, DeadlineMS: 250}, `{"id":"4b","agent":"me","op":"step","lease":"L9","epoch":42,"saga":5,"actuator":"elbow","value":-0.125,"deadline_ms":250}`},
		{Request{ID: "5", Agent: "me", Op: OpCommit, Lease: "L9", Epoch: 42, Saga: 5}, `{"id":"5","agent":"me","op":"commit","lease":"L9","epoch":42,"saga":5}`},
		{Request{ID: "6", Agent: "me", Op: OpAbort, Lease: "L9", Epoch: 42, Saga: 5, Reason: "gripper slipped"}, `{"id":"6","agent":"me","op":"abort","lease":"L9","epoch":42,"saga":5,"reason":"gripper slipped"}`},
		{Request{ID: "7", Agent: "me", Op: OpBye, Lease: "L9", Epoch: 42}, `{"id":"7","agent":"me","op":"bye","lease":"L9","epoch":42}`},
		{Request{ID: "8", Agent: "me", Op: OpHalt, Reason: "person in cell <2m>"}, `{"id":"8","agent":"me","op":"halt","reason":"person in cell <2m>"}`},
		{Request{ID: "9", Agent: "ops", Op: OpReset, Token: "s3cret"}, `{"id":"9","agent":"ops","op":"reset","token":"s3cret"}`},
		{Request{ID: "10", Agent: "me", Op: OpStatus}, `{"id":"10","agent":"me","op":"status"}`},
	}
	seen := map[Op]bool{}
	for _, c := range cases {
		b, err := EncodeRequest(c.r)
		if err != nil {
			t.Fatalf("%+v: %v", c.r, err)
		}
		if string(b) != c.json {
			t.Errorf("encoded\n%s\nwant\n%s", b, c.json)
		}
		back, derr := DecodeRequest(b, 0)
		if derr != nil || back != c.r {
			t.Errorf("%s decoded to %+v, %v", b, back, derr)
		}
		seen[c.r.Op] = true
	}
	for op := range opFields {
		if !seen[op] {
			t.Errorf("op %s has no round-trip case", op)
		}
	}
}

func TestEncodeRequestRefuses(t *testing.T) {
	for _, r := range []Request{
		{},
		{ID: "1", Agent: "me", Op: "fly"},
		{ID: "1", Agent: "a/b", Op: OpStatus},
		{ID: "1", Agent: "me", Op: OpHello, TTLMS: -1},
		{ID: "1", Agent: "me", Op: OpHello, TTLMS: 1<<58 + 5000}, // beyond a time.Duration
		{ID: "1", Agent: "me", Op: OpHello, Saga: 3},             // a field hello does not use
		{ID: "1", Agent: "me", Op: OpHalt, Value: 5},             // likewise
		{ID: "\xff", Agent: "me", Op: OpStatus},                  // would not come back as itself
		{ID: "1", Agent: "me", Op: OpStep, Lease: "L", Epoch: 1}, // missing saga, actuator
		{ID: "1", Agent: "me", Op: OpStep, Lease: "L", Epoch: 1, Saga: 1, Actuator: "x", Value: nan()},
	} {
		if b, err := EncodeRequest(r); err == nil {
			t.Errorf("%+v encoded as %s", r, b)
		}
	}
}

func TestDeadline(t *testing.T) {
	received := time.Now()
	if d := (Request{}).Deadline(received); !d.IsZero() {
		t.Fatalf("no deadline_ms gave %v", d)
	}
	r := Request{ID: "1", Agent: "me", Op: OpStep, Actuator: "elbow", Value: 3, DeadlineMS: 250}
	if d := r.Deadline(received); d.Sub(received) != 250*time.Millisecond {
		t.Fatalf("deadline %v after receipt", d.Sub(received))
	}
	cmd := r.Command(received)
	if cmd.ID != "1" || cmd.Actuator != "elbow" || cmd.Value != 3 || !cmd.Deadline.Equal(received.Add(250*time.Millisecond)) {
		t.Fatalf("command %+v", cmd)
	}
}
