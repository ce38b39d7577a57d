package api

import (
	"strings"
	"testing"
)

// FuzzDecodeRequest: whatever arrives on the cmd topic, DecodeRequest never
// panics; a refusal has a listed code and a message, and salvages only a
// valid id and agent; an accepted request re-encodes and decodes to itself,
// and its agent routes to exactly one topic level.
func FuzzDecodeRequest(f *testing.F) {
	for _, c := range badCases {
		if len(c.payload) <= DefaultMaxRequestBytes {
			f.Add([]byte(c.payload))
		}
	}
	f.Add([]byte(step))
	f.Add([]byte(`{"id":"1","agent":"me","op":"hello","ttl_ms":5000}`))
	f.Add([]byte(`{"id":"6","agent":"me","op":"abort","lease":"L9","epoch":42,"saga":5,"reason":"x"}`))
	f.Add([]byte(`{"id":"9","agent":"ops","op":"reset","token":"s3cret"}`))
	f.Add([]byte(`{"id":"4","agent":"me","op":"step","lease":"L","epoch":1,"saga":1,"actuator":"e","value":-0,"deadline_ms":1}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		r, err := DecodeRequest(payload, 0)
		if err != nil {
			if _, ok := Lookup(err.Code); !ok || err.Message == "" {
				t.Fatalf("refusal %+v: unlisted code or no message", err)
			}
			if r != (Request{ID: r.ID, Agent: r.Agent}) {
				t.Fatalf("refusal returned more than id and agent: %+v", r)
			}
			if r.ID != "" && checkText(r.ID, MaxIDBytes) != "" || r.Agent != "" && ValidName(r.Agent) != nil {
				t.Fatalf("salvaged an invalid id or agent: %+v", r)
			}
			reply := ErrorReply(r.ID, err)
			if reply.Code != err.Code || reply.OK {
				t.Fatalf("reply %+v for %v", reply, err)
			}
			return
		}
		if ValidName(r.Agent) != nil || strings.ContainsAny(r.Agent, "/+#") {
			t.Fatalf("accepted agent %q does not route", r.Agent)
		}
		b, eerr := EncodeRequest(r)
		if eerr != nil {
			t.Fatalf("accepted %+v but cannot encode it: %v", r, eerr)
		}
		back, derr := DecodeRequest(b, 0)
		if derr != nil || back != r {
			t.Fatalf("%+v encoded as %s decoded to %+v, %v", r, b, back, derr)
		}
	})
}
