package mqtt

import (
	"testing"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// A payload that decodes to a halt is never shed unread, however it spells
// "halt"; a step can be.
func TestMayBeHalt(t *testing.T) {
	for _, tt := range []struct {
		payload string
		halt    bool // it decodes to a halt request
	}{
		{`{"id":"1","agent":"a","op":"halt"}`, true},
		{`{"id":"1","agent":"a","op":"\u0068alt"}`, true},
		{`{"id":"1","agent":"a","op":"h\u0061\u006c\u0074"}`, true},
		{`{"id":"1","agent":"a","op":"step","lease":"L","epoch":1,"saga":1,"actuator":"x","value":1}`, false},
	} {
		req, derr := api.DecodeRequest([]byte(tt.payload), 0)
		if got := derr == nil && req.Op == api.OpHalt; got != tt.halt {
			t.Fatalf("%s decodes to a halt: %v, want %v (%v)", tt.payload, got, tt.halt, derr)
		}
		if tt.halt && !mayBeHalt([]byte(tt.payload)) {
			t.Errorf("%s is a halt but could be shed unread", tt.payload)
		}
		if !tt.halt && mayBeHalt([]byte(tt.payload)) {
			t.Errorf("%s is no halt, yet never shed", tt.payload)
		}
	}
}

// IsHalt, which the embedded broker asks before holding a command back,
// is true of a halt however spelled, and of nothing else, though it may
// name "halt" elsewhere.
func TestIsHalt(t *testing.T) {
	for _, tt := range []struct {
		payload string
		halt    bool
	}{
		{`{"id":"1","agent":"a","op":"halt"}`, true},
		{`{"id":"1","agent":"a","op":"h\u0061\u006c\u0074","reason":"x"}`, true},
		{`{"id":"halt","agent":"a","op":"step","lease":"L","epoch":1,"saga":1,"actuator":"x","value":1}`, false},
		{`{"id":"1","agent":"a","op":"heartbeat","lease":"L","epoch":1,"reason":"halt"}`, false},
		{`{"id":"1","agent":"a","op":"step","lease":"L","epoch":1,"saga":1,"actuator":"x","value":1}`, false},
		{`{"op":"halt"`, false},
		{`halt`, false},
	} {
		if got := IsHalt([]byte(tt.payload)); got != tt.halt {
			t.Errorf("IsHalt(%s) = %v, want %v", tt.payload, got, tt.halt)
		}
	}
}

// EstopRoute moves only a halt request naming the agent of the command
// topic it was sent on; everything else stays where it was sent.
func TestEstopRoute(t *testing.T) {
	tp := Topics{Prefix: "saga/v1", Device: "arm1"}
	route := EstopRoute(tp)
	halt := `{"id":"1","agent":"a","op":"halt","reason":"r"}`
	for _, tt := range []struct {
		topic, payload, want string
	}{
		{tp.AgentCmd("a"), halt, tp.EstopAgent("a")},
		{tp.AgentCmd("a"), `{"id":"1","agent":"a","op":"h\u0061lt"}`, tp.EstopAgent("a")},
		{tp.AgentCmd("b"), halt, ""}, // names another agent: refused on cmd/b, not a halt
		{tp.Cmd(), halt, ""},         // the shared topic stays
		{tp.AgentCmd("a"), `{"id":"halt","agent":"a","op":"heartbeat","lease":"L","epoch":1}`, ""},
		{tp.AgentCmd("a"), `{"op":"halt"`, ""},
		{tp.AgentCmd("a/x"), halt, ""},
		{tp.EstopAgent("a"), halt, ""},
		{"other/v1/arm1/cmd/a", halt, ""},
	} {
		if got := route(tt.topic, []byte(tt.payload)); got != tt.want {
			t.Errorf("route(%s, %s) = %q, want %q", tt.topic, tt.payload, got, tt.want)
		}
	}
}
