package api

import (
	"strings"
	"testing"
	"unicode"
)

// surrogateCases are strings whose literal holds a lone surrogate escape,
// written as they appear between the quotes of a JSON string.
var surrogateCases = []struct{ name, lit, esc string }{
	{"high alone", `\ud800`, `\ud800`},
	{"high alone, upper case", `\uD800`, `\uD800`},
	{"highest high", `\udbff`, `\udbff`},
	{"low alone", `\udc00`, `\udc00`},
	{"highest low", `\uDFFF`, `\uDFFF`},
	{"high at the end", `c1\ud83d`, `\ud83d`},
	{"high then a letter", `\ud800x`, `\ud800`},
	{"high then a non-surrogate escape", `\ud800\u0041`, `\ud800`},
	{"high then a high then a low", `\ud800\ud800\udc00`, `\ud800`},
	{"pair reversed", `\udc00\ud800`, `\udc00`},
	{"high then an escaped backslash and ud800", `\ud800\\udc00`, `\ud800`},
	{"high then another escape", `\ud800\n`, `\ud800`},
	{"after a pair", `\ud83d\ude00\ude00`, `\ude00`},
	{"after an escaped quote", `\"\ud800`, `\ud800`},
	{"after an escaped backslash", `\\\udfff`, `\udfff`},
}

// TestLoneSurrogate checks the scanner on string literals, alone and with
// the separators the token walk hands it.
func TestLoneSurrogate(t *testing.T) {
	for _, c := range surrogateCases {
		for _, lit := range []string{`"` + c.lit + `"`, ` : "` + c.lit + `"`, ",\n\t\"" + c.lit + `"`} {
			if got := loneSurrogate([]byte(lit)); got != c.esc {
				t.Errorf("%s: %s gives %q, want %q", c.name, lit, got, c.esc)
			}
		}
	}
	for _, lit := range []string{
		`""`, `"c1"`, `"\ud83d\ude00"`, `"\uD83D\uDE00"`, `"\udbff\udfff"`, `"\ud7ff\ue000"`, `"\ufffd"`, `"\uFFFD"`,
		`"\\ud800"`, `"\\\\ud800"`, `"\\\ud83d\ude00"`, `"a\"\\u\"b"`, `"\u0041\n\t\/\b\f\r"`, `"` + "\ufffd" + `"`,
		`90`, `true`, `null`, `{`, `]`, `, "ok"`,
	} {
		if got := loneSurrogate([]byte(lit)); got != "" {
			t.Errorf("%s gives %q, want none", lit, got)
		}
	}
}

// TestDecodeRefusesLoneSurrogates puts each lone surrogate into every
// string field of a request, and into keys and nested values: each is
// refused with BAD_REQUEST naming the field, the escape in the message,
// and the field is never salvaged (its text is not what was sent).
func TestDecodeRefusesLoneSurrogates(t *testing.T) {
	type place struct {
		name, payload, field, id, agent string
	}
	places := func(lit string) []place {
		return []place{
			{"id", replace(`"id":"c1"`, `"id":"`+lit+`"`), "id", "", "arm-ctl"},
			{"agent", replace(`"agent":"arm-ctl"`, `"agent":"arm`+lit+`"`), "agent", "c1", ""},
			{"op", replace(`"op":"step"`, `"op":"st`+lit+`ep"`), "op", "c1", "arm-ctl"},
			{"lease", replace(`"lease":"L1"`, `"lease":"L1`+lit+`"`), "lease", "c1", "arm-ctl"},
			{"actuator", replace(`"actuator":"elbow"`, `"actuator":"`+lit+`"`), "actuator", "c1", "arm-ctl"},
			{"reason", `{"id":"h","agent":"a","op":"halt","reason":"stop ` + lit + `"}`, "reason", "h", "a"},
			{"token", `{"id":"r","agent":"ops","op":"reset","token":"s3` + lit + `"}`, "token", "r", "ops"},
			{"unknown field's value", replace(`"value":90`, `"value":90,"note":"`+lit+`"`), "note", "c1", "arm-ctl"},
			{"nested value", replace(`"value":90`, `"value":90,"meta":{"a":["x","`+lit+`"]}`), "meta", "c1", "arm-ctl"},
			{"nested key", replace(`"value":90`, `"value":90,"meta":{"`+lit+`":1}`), "meta", "c1", "arm-ctl"},
			{"value as a string", replace(`"value":90`, `"value":"`+lit+`"`), "value", "c1", "arm-ctl"},
			{"duplicate id", replace(`"id":"c1"`, `"id":"c1","id":"`+lit+`"`), "id", "", "arm-ctl"},
			{"after the agent", `{"agent":"a","id":"` + lit + `","op":"status"}`, "id", "", "a"},
		}
	}
	for _, c := range surrogateCases {
		for _, p := range places(c.lit) {
			t.Run(c.name+"/"+p.name, func(t *testing.T) {
				r, err := DecodeRequest([]byte(p.payload), 0)
				if err == nil {
					t.Fatalf("%s accepted as %+v", p.payload, r)
				}
				if err.Code != CodeBadRequest || err.Field != p.field || !strings.Contains(err.Message, `"`+p.field+`"`) {
					t.Errorf("%s: %+v, want BAD_REQUEST on %q", p.payload, err, p.field)
				}
				if !strings.Contains(err.Message, c.esc) || !strings.Contains(err.Message, "surrogate") {
					t.Errorf("message %q does not name the escape %s", err.Message, c.esc)
				}
				if r != (Request{ID: p.id, Agent: p.agent}) {
					t.Errorf("salvaged %+v, want id %q agent %q", r, p.id, p.agent)
				}
			})
		}
	}
	// A key: the field named is the key as read, the escape in the message.
	for _, payload := range []string{`{"id":"c1","agent":"a","op":"status","\ud800":1}`, `{"id":"c1","agent":"a","op":"status","i\udc00d":"x"}`} {
		_, err := DecodeRequest([]byte(payload), 0)
		if err == nil || err.Code != CodeBadRequest || !strings.Contains(err.Message, "key") || !strings.Contains(err.Message, "surrogate") || !strings.ContainsRune(err.Field, '\ufffd') {
			t.Errorf("%s: %+v", payload, err)
		}
	}
}

// TestIDsKeepTheirCharacters: two payloads decode to the same id only when
// they spell the same characters. U+FFFD is an ordinary printable
// character, whether sent as UTF-8 or escaped; a lone surrogate, which
// encoding/json alone would also read as U+FFFD, is refused.
func TestIDsKeepTheirCharacters(t *testing.T) {
	if !unicode.IsPrint('\ufffd') || ValidName("\ufffd") != nil {
		t.Fatal("U+FFFD is expected to be printable")
	}
	status := func(id string) string { return `{"id":"` + id + `","agent":"a` + id + `","op":"status"}` }
	for _, c := range []struct{ name, id, want string }{
		{"U+FFFD as UTF-8", "\ufffd", "\ufffd"},
		{"U+FFFD escaped", `\ufffd`, "\ufffd"},
		{"U+FFFD escaped, upper case", `\uFFFD`, "\ufffd"},
		{"U+FFFD between letters", "c\ufffd1", "c\ufffd1"},
		{"a pair", `\ud83d\ude00`, "😀"},
		{"a pair, upper case", `\uD83D\uDE00`, "😀"},
		{"the same character as UTF-8", "😀", "😀"},
		{"lowest pair", `\ud800\udc00`, "\U00010000"},
		{"escaped backslash, then letters", `\\ud800`, `\ud800`},
		{"escaped backslash, then a pair", `\\\ud83d\ude00`, `\😀`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := DecodeRequest([]byte(status(c.id)), 0)
			if err != nil {
				t.Fatal(err)
			}
			if r.ID != c.want || r.Agent != "a"+c.want {
				t.Fatalf("id %q agent %q, want %q", r.ID, r.Agent, c.want)
			}
			b, eerr := EncodeRequest(r)
			if eerr != nil {
				t.Fatal(eerr)
			}
			if back, derr := DecodeRequest(b, 0); derr != nil || back != r {
				t.Fatalf("%s decoded to %+v, %v", b, back, derr)
			}
		})
	}
	// The conflation encoding/json alone would make.
	if _, err := DecodeRequest([]byte(status(`\ud800`)), 0); err == nil {
		t.Fatal(`"\ud800" accepted: it would be the same id as "\ufffd"`)
	}
}
