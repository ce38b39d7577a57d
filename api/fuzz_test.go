package api

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// FuzzDecodeRequest: whatever arrives on the cmd topic, DecodeRequest never
// panics; a refusal has a listed code and a message, and salvages only a
// valid id and agent; an accepted request re-encodes and decodes to itself,
// and its agent routes to exactly one topic level. A payload with a lone
// surrogate escape in a string is never accepted, and an accepted one with
// such an escape spliced into its id is refused on the id.
func FuzzDecodeRequest(f *testing.F) {
	for _, c := range badCases {
		if len(c.payload) <= DefaultMaxRequestBytes {
			f.Add([]byte(c.payload))
		}
	}
	for _, c := range surrogateCases {
		f.Add([]byte(replace(`"id":"c1"`, `"id":"`+c.lit+`"`)))
	}
	f.Add([]byte(step))
	f.Add([]byte(replace(`"value":90`, `"value":90,"approvals":["AQ-_z09","Bw"]`)))
	f.Add([]byte(`{"id":"1","agent":"me","op":"hello","ttl_ms":5000}`))
	f.Add([]byte(`{"id":"6","agent":"me","op":"abort","lease":"L9","epoch":42,"saga":5,"reason":"x"}`))
	f.Add([]byte(`{"id":"9","agent":"ops","op":"reset","token":"s3cret"}`))
	f.Add([]byte(`{"id":"4","agent":"me","op":"step","lease":"L","epoch":1,"saga":1,"actuator":"e","value":-0,"deadline_ms":1}`))
	f.Add([]byte(`{"id":"\ud83d\ude00\\ud800\ufffd` + "\ufffd" + `","agent":"me","op":"halt","reason":"\\\ud800\udc00"}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		r, err := DecodeRequest(payload, 0)
		if err != nil {
			if _, ok := Lookup(err.Code); !ok || err.Message == "" {
				t.Fatalf("refusal %+v: unlisted code or no message", err)
			}
			if r != (Request{ID: r.ID, Agent: r.Agent}) {
				t.Fatalf("refusal returned more than id and agent: %+v", r)
			}
			if r.ID != "" && CheckText(r.ID, MaxIDBytes) != "" || r.Agent != "" && ValidName(r.Agent) != nil {
				t.Fatalf("salvaged an invalid id or agent: %+v", r)
			}
			reply := ErrorReply(r.ID, err)
			if reply.Code != err.Code || reply.OK {
				t.Fatalf("reply %+v for %v", reply, err)
			}
			return
		}
		if esc := oracleLoneSurrogate(payload); esc {
			t.Fatalf("accepted %q, which holds a lone surrogate escape, as %+v", payload, r)
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
		// Splice escapes into the id of the re-encoded request: a lone
		// surrogate is refused on the id (which is then not salvaged),
		// a pair is one more character.
		const head = `{"id":"`
		if !strings.HasPrefix(string(b), head) {
			t.Fatalf("encoded request %s does not start with its id", b)
		}
		splice := func(esc string) []byte { return []byte(head + esc + string(b[len(head):])) }
		for _, esc := range []string{`\ud800`, `\uDFFF`, `\ud83d\ud83d`, `\\\ud800`} {
			got, err := DecodeRequest(splice(esc), 0)
			if err == nil || err.Code != CodeBadRequest || err.Field != "id" || got != (Request{Agent: r.Agent}) {
				t.Fatalf("id spliced with %s: %+v, %+v", esc, got, err)
			}
		}
		got, perr := DecodeRequest(splice(`\ud83d\ude00`), 0)
		want := r
		want.ID = "😀" + r.ID
		if len(want.ID) <= MaxIDBytes && (perr != nil || got != want) || len(want.ID) > MaxIDBytes && (perr == nil || perr.Field != "id") {
			t.Fatalf("id spliced with a pair: %+v, %v", got, perr)
		}
	})
}

// oracleLoneSurrogate is the fuzz target's own judge of a payload, built
// differently from the decoder's: one pass over the whole payload turns
// each string literal into UTF-16 code units (an escape gives its unit,
// any other character a placeholder) and asks unicode/utf16 whether they
// survive decoding. Only meaningful for valid JSON.
func oracleLoneSurrogate(payload []byte) bool {
	var units []uint16
	in := false
	for i := 0; i < len(payload); {
		c := payload[i]
		switch {
		case !in:
			in = c == '"'
			units = units[:0]
			i++
		case c == '"':
			if !slices.Equal(utf16.Encode(utf16.Decode(units)), units) {
				return true
			}
			in = false
			i++
		case c == '\\' && i+1 < len(payload) && payload[i+1] == 'u' && i+6 <= len(payload):
			var u uint16
			for _, h := range payload[i+2 : i+6] {
				u <<= 4
				switch {
				case h >= '0' && h <= '9':
					u |= uint16(h - '0')
				case h >= 'a' && h <= 'f':
					u |= uint16(h-'a') + 10
				case h >= 'A' && h <= 'F':
					u |= uint16(h-'A') + 10
				}
			}
			units = append(units, u)
			i += 6
		case c == '\\':
			units = append(units, 'x')
			i += 2
		default:
			_, n := utf8.DecodeRune(payload[i:])
			units = append(units, 'x')
			i += n
		}
	}
	return false
}

// FuzzEncodeMax: for any report (any number of steps up to 2000, any
// buckets, errors and texts), any reply around it and any bound, the
// bounded encoders never exceed the bound, always give valid JSON, give
// EncodeReply's or EncodeEvent's bytes when those fit, are a fixed point of
// decoding and encoding, and at MinEncodeBytes and above keep a valid id,
// ok, code and the report's verdict and counts over every step.
func FuzzEncodeMax(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4}, uint16(1000), int32(512), "8", "", true, false)
	f.Add([]byte{4, 4, 4, 0}, uint16(5), int32(1024), "c1", "wrist: driver error", false, false)
	f.Add([]byte{0}, uint16(2000), int32(65536), `"""`, strings.Repeat("é", 300), false, false)
	f.Add([]byte{5, 6, 200, 17}, uint16(300), int32(4096), "x", "m", true, true)
	f.Add([]byte{}, uint16(0), int32(0), "", "", false, false)
	f.Add([]byte{1, 255}, uint16(77), int32(300), strings.Repeat("i", MaxIDBytes), "…", true, false)
	f.Add([]byte("1"), uint16(77), int32(171), strings.Repeat("0", 108), "\x01", false, false) // step 7: the id does not fit
	f.Fuzz(func(t *testing.T, seed []byte, n uint16, max32 int32, id, msg string, ok, status bool) {
		if len(seed) == 0 {
			seed = []byte{0}
		}
		id, msg = strings.ToValidUTF8(id, "?"), strings.ToValidUTF8(msg, "?")
		max := int(max32)
		buckets := []string{"compensated", "fallback_safe", "compensation_failed", "orphaned", "unresolved", "not a bucket", ""}
		rep := &ReportJSON{Saga: uint64(len(seed)), Agent: "arm-ctl", Reason: msg, Order: "retrace", Steps: []StepReport{}}
		for i := range int(n) % 2001 {
			b := seed[i%len(seed)]
			s := StepReport{Step: uint32(int(n) - i), Actuator: actuators[int(b)%len(actuators)], Prior: ptr(float64(b)), Target: ptr(float64(i)),
				Outcome: "applied", Bucket: buckets[int(b)%len(buckets)], Attempts: uint32(b % 4)}
			if b%3 == 0 {
				s.Error = strings.Repeat("e", int(b))
			}
			rep.Steps = append(rep.Steps, s)
		}
		r := Reply{ID: id, OK: ok, Saga: rep.Saga, Message: msg}
		if !ok {
			r.Code = Codes[int(seed[0])%len(Codes)].Code
		}
		switch {
		case status:
			r.Status = mustMarshal(map[string]any{"ready": ok, "halted": seed[0]%2 == 0, "note": msg, "steps": rep.Steps})
		case seed[0]%4 != 1:
			r.Report = rep
		}
		checkReply(t, r, max)

		// The same report as a rollback event, and the reply as a reply event.
		full := EncodeEvent(Event{Kind: EventRollback, Report: rep})
		got := EncodeEventMax(Event{Kind: EventRollback, Report: rep}, max)
		if max > 0 && len(got) > max || got == nil && (max <= 0 || max >= MinEncodeBytes) {
			t.Fatalf("rollback event of %d bytes for max %d", len(got), max)
		}
		if got != nil {
			if (max <= 0 || len(full) <= max) && !bytes.Equal(got, full) {
				t.Fatal("the rollback event fits, yet differs")
			}
			var back Event
			decodeStrict(t, got, &back)
			if !bytes.Equal(EncodeEvent(back), got) {
				t.Fatalf("EncodeEvent of the decoding differs: %.300s", got)
			}
			checkSummary(t, back.Report, sanitizeReport(rep))
		}
		full = EncodeEvent(Event{Kind: EventReply, Reply: &r})
		got = EncodeEventMax(Event{Kind: EventReply, Reply: &r}, max)
		if max > 0 && len(got) > max || got == nil && (max <= 0 || max >= MinEncodeBytes) {
			t.Fatalf("reply event of %d bytes for max %d", len(got), max)
		}
		if got != nil {
			if (max <= 0 || len(full) <= max) && !bytes.Equal(got, full) {
				t.Fatal("the reply event fits, yet differs")
			}
			var back Event
			decodeStrict(t, got, &back)
			if !bytes.Equal(EncodeEvent(back), got) || back.Reply == nil {
				t.Fatalf("EncodeEvent of the decoding differs: %.300s", got)
			}
			whole := sanitizeReply(r)
			if max >= MinEncodeBytes && CheckText(id, MaxIDBytes) == "" &&
				(back.Reply.ID != whole.ID || back.Reply.OK != whole.OK || back.Reply.Code != whole.Code) {
				t.Fatalf("reply event lost id, ok or code: %.300s", got)
			}
			if whole.Report != nil && back.Reply.Report != nil {
				checkSummary(t, back.Reply.Report, whole.Report)
			}
		}
	})
}

// FuzzDecodeApprovals splices arbitrary JSON in as a step's approvals
// value: DecodeRequest never panics, refuses with a code, and accepts only
// an array of 1..MaxApprovals printable, space-free tokens, which it keeps
// as encoding/json reads them, in order, and which encode and decode back
// to the same request.
func FuzzDecodeApprovals(f *testing.F) {
	for _, s := range []string{`["AQ-_z09"]`, `["A","B"]`, `[]`, `["A",1]`, `[["A"]]`, `["A B"]`, `"A"`, `["\ud800"]`,
		`["A","B","C","D","E","F","G","H","I"]`, `[{"a":["b"]},"c"]`, `["\u0041"]`, `[null]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		payload := []byte(`{"id":"k","agent":"a","op":"step","lease":"L1","epoch":7,"saga":3,"actuator":"e","value":1,"approvals":` + value + `}`)
		r, err := DecodeRequest(payload, 0)
		if err != nil {
			if _, ok := Lookup(err.Code); !ok || err.Message == "" {
				t.Fatalf("refusal %+v: unlisted code or no message", err)
			}
			return
		}
		var want []string
		if jerr := json.Unmarshal([]byte(value), &want); jerr != nil {
			t.Fatalf("accepted approvals %s, which is not an array of strings: %v", value, jerr)
		}
		got := r.Approvals()
		if !slices.Equal(got, want) || len(got) < 1 || len(got) > MaxApprovals {
			t.Fatalf("approvals %s decoded to %q", value, got)
		}
		for _, tok := range got {
			if tok == "" || strings.Contains(tok, " ") || CheckText(tok, MaxApprovalBytes) != "" {
				t.Fatalf("accepted token %q", tok)
			}
		}
		b, eerr := EncodeRequest(r)
		if eerr != nil {
			t.Fatalf("accepted %+v but cannot encode it: %v", r, eerr)
		}
		if back, derr := DecodeRequest(b, 0); derr != nil || back != r {
			t.Fatalf("%+v encoded as %s decoded to %+v, %v", r, b, back, derr)
		}
	})
}
