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
