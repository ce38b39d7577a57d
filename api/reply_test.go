package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// partialReport is the report of Act III of the demo: the elbow jammed on its
// way back, went to its safe value, and the halt left the base unresolved.
func partialReport() *rollback.Report {
	return &rollback.Report{Saga: 3, Agent: "arm-ctl", Reason: "step 3 failed", Order: rollback.Retrace, Steps: []rollback.StepReport{
		{Step: 3, Actuator: "wrist", Prior: 0, Target: 45, Outcome: rollback.Failed, Bucket: rollback.Compensated, Attempts: 0, Error: "not applied: nothing to undo"},
		{Step: 2, Actuator: "elbow", Prior: 30, Target: 75.5, Outcome: rollback.Applied, Bucket: rollback.FallbackSafe, Attempts: 3, Error: "servo jammed"},
		{Step: 1, Actuator: "base", Prior: 90, Target: 120, Outcome: rollback.Applied, Bucket: rollback.Unresolved},
	}}
}

// TestReplyGolden pins the bytes of replies: field order, omitted zero
// fields, float forms. Agents parse these; a change here is a change of API.
func TestReplyGolden(t *testing.T) {
	cleanAbort := &rollback.Report{Saga: 5, Agent: "me", Reason: "abort: done testing", Order: rollback.Direct, Steps: []rollback.StepReport{
		{Step: 1, Actuator: "elbow", Prior: -0.5, Target: 1e-7, Outcome: rollback.InDoubt, Bucket: rollback.Compensated, Attempts: 1},
	}}
	for _, c := range []struct {
		name  string
		reply Reply
		json  string
	}{
		{"hello", Reply{ID: "1", OK: true, Lease: "L9", Epoch: 42, TTLMS: 5000, HeartbeatMS: 1250},
			`{"id":"1","ok":true,"lease":"L9","epoch":42,"ttl_ms":5000,"heartbeat_ms":1250}`},
		{"heartbeat", Reply{ID: "2", OK: true, TTLMS: 5000, HeartbeatMS: 1250},
			`{"id":"2","ok":true,"ttl_ms":5000,"heartbeat_ms":1250}`},
		{"begin", Reply{ID: "3", OK: true, Saga: 5}, `{"id":"3","ok":true,"saga":5}`},
		{"step", StepReply("4", 5, rollback.StepResult{Step: 1, Prior: 90, Value: 0, Requested: 0}),
			`{"id":"4","ok":true,"saga":5,"step":1,"value":0,"prior":90}`},
		{"step clamped", StepReply("4b", 5, rollback.StepResult{Step: 2, Prior: 90, Value: 135, Requested: 200, Clamped: true}),
			`{"id":"4b","ok":true,"saga":5,"step":2,"value":135,"prior":90,"requested":200,"clamped":true}`},
		{"commit", Reply{ID: "5", OK: true, Saga: 5}, `{"id":"5","ok":true,"saga":5}`},
		{"abort", Reply{ID: "6", OK: true, Saga: 5, Report: ReportFromRollback(cleanAbort)},
			`{"id":"6","ok":true,"saga":5,"report":{"saga":5,"agent":"me","reason":"abort: done testing","order":"direct","verdict":"clean","steps":[{"step":1,"actuator":"elbow","prior":-0.5,"target":1e-7,"outcome":"in_doubt","bucket":"compensated","attempts":1}]}}`},
		{"abort, nothing moved", Reply{ID: "6b", OK: true, Saga: 6, Report: ReportFromRollback(&rollback.Report{Saga: 6, Agent: "me"})},
			`{"id":"6b","ok":true,"saga":6,"report":{"saga":6,"agent":"me","order":"retrace","verdict":"clean","steps":[]}}`},
		{"bye", Reply{ID: "7", OK: true}, `{"id":"7","ok":true}`},
		{"status", Reply{ID: "10", OK: true, Status: []byte(`{"ready": true, "reasons": [], "halted": false}`)},
			`{"id":"10","ok":true,"status":{"ready":true,"reasons":[],"halted":false}}`},
		{"status not JSON", Reply{ID: "11", OK: true, Saga: 3, Status: []byte(`{"ready":tru`)},
			`{"id":"11","ok":false,"code":"INTERNAL","message":"internal error: the status is not valid JSON"}`},
		{"limit", ErrorReply("4c", &rollback.Error{Code: rollback.LimitCode(limits.LimitMax), Message: "elbow: 200 is above max 180"}),
			`{"id":"4c","ok":false,"code":"LIMIT_MAX","message":"elbow: 200 is above max 180"}`},
		{"step failed", ErrorReply("4d", &rollback.Error{Code: rollback.CodeStepFailed, Message: "wrist: driver error", Report: partialReport()}),
			`{"id":"4d","ok":false,"code":"STEP_FAILED","message":"wrist: driver error","report":{"saga":3,"agent":"arm-ctl","reason":"step 3 failed","order":"retrace","verdict":"partial","steps":[` +
				`{"step":3,"actuator":"wrist","prior":0,"target":45,"outcome":"failed","bucket":"compensated","attempts":0,"error":"not applied: nothing to undo"},` +
				`{"step":2,"actuator":"elbow","prior":30,"target":75.5,"outcome":"applied","bucket":"fallback_safe","attempts":3,"error":"servo jammed"},` +
				`{"step":1,"actuator":"base","prior":90,"target":120,"outcome":"applied","bucket":"unresolved","attempts":0}]}}`},
		{"bad request", ErrorReply("x", &Error{Code: CodeBadRequest, Field: "epoch", Message: `field "epoch": want an integer from 1 to 18446744073709551615, got -1`}),
			`{"id":"x","ok":false,"code":"BAD_REQUEST","message":"field \"epoch\": want an integer from 1 to 18446744073709551615, got -1"}`},
		{"wrapped engine error", ErrorReply("y", fmt.Errorf("step: %w", &rollback.Error{Code: rollback.CodeHalted, Message: "halted: e-stop"})),
			`{"id":"y","ok":false,"code":"HALTED","message":"halted: e-stop"}`},
		{"lease refusal wrapped by the supervisor", ErrorReply("z", &Error{Code: "LEASE_EXPIRED", Message: "lease L9 expired 120ms ago"}),
			`{"id":"z","ok":false,"code":"LEASE_EXPIRED","message":"lease L9 expired 120ms ago"}`},
		{"plain error", ErrorReply("p", errors.New("disk on fire")),
			`{"id":"p","ok":false,"code":"INTERNAL","message":"internal error: disk on fire"}`},
		{"nil error", ErrorReply("n", nil),
			`{"id":"n","ok":false,"code":"INTERNAL","message":"internal error: a refusal without an error"}`},
		{"typed nil", ErrorReply("tn", (*Error)(nil)),
			`{"id":"tn","ok":false,"code":"INTERNAL","message":"internal error: a nil *api.Error"}`},
		{"typed nil engine error", ErrorReply("tr", fmt.Errorf("wrapped: %w", (*rollback.Error)(nil))),
			`{"id":"tr","ok":false,"code":"INTERNAL","message":"internal error: a nil *rollback.Error"}`},
		{"unlisted code", ErrorReply("u", &Error{Code: "FLUX_CAPACITOR", Message: "1.21 GW"}),
			`{"id":"u","ok":false,"code":"INTERNAL","message":"internal error: unlisted code \"FLUX_CAPACITOR\": 1.21 GW"}`},
		{"code without message", ErrorReply("m", &rollback.Error{Code: rollback.CodeSagaBusy}),
			`{"id":"m","ok":false,"code":"SAGA_BUSY","message":"A step of this saga is still in flight."}`},
		{"unaddressable", ErrorReply("", &Error{Code: CodePayloadTooLarge, Message: "request is 9000 bytes, over the limit of 8192"}),
			`{"id":"","ok":false,"code":"PAYLOAD_TOO_LARGE","message":"request is 9000 bytes, over the limit of 8192"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := string(EncodeReply(c.reply))
			if got != c.json {
				t.Fatalf("got\n%s\nwant\n%s", got, c.json)
			}
			if got != string(EncodeReply(c.reply)) {
				t.Fatal("not deterministic")
			}
			var back Reply
			dec := json.NewDecoder(strings.NewReader(got))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&back); err != nil {
				t.Fatal(err)
			}
			if string(EncodeReply(back)) != got {
				t.Fatalf("re-encoding the decoded reply differs")
			}
			if !back.OK && (back.Code == "" || back.Message == "") {
				t.Fatal("refusal without code or message")
			}
		})
	}
}

// TestEncodeReplyNeverLies: whatever a caller puts in a Reply, the payload
// is valid JSON, a refusal has a code and a message, and "clean" is never
// published for a report with a step that is not compensated.
func TestEncodeReplyNeverLies(t *testing.T) {
	inf := math.Inf(1)
	r := Reply{ID: "q", Value: ptr(nan()), Prior: ptr(inf), Requested: ptr(-inf), Report: &ReportJSON{
		Saga: 1, Agent: "a", Order: "retrace", Verdict: "clean",
		Steps: []StepReport{{Step: 1, Actuator: "x", Prior: ptr(nan()), Target: ptr(1), Bucket: "orphaned"}},
	}}
	got := string(EncodeReply(r))
	want := `{"id":"q","ok":false,"code":"INTERNAL","message":"A supervisor bug: an error without a code. Whether the command took effect is unknown.",` +
		`"report":{"saga":1,"agent":"a","order":"retrace","verdict":"partial","steps":[{"step":1,"actuator":"x","prior":null,"target":1,"outcome":"","bucket":"orphaned","attempts":0}]}}`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if r.Report.Verdict != "clean" || !math.IsNaN(*r.Value) {
		t.Fatal("EncodeReply changed its argument")
	}
	// The engine's own verdict and the wire's agree for every bucket.
	for _, b := range []rollback.Bucket{rollback.Compensated, rollback.FallbackSafe, rollback.CompensationFailed, rollback.Orphaned, rollback.Unresolved} {
		rep := &rollback.Report{Saga: 1, Steps: []rollback.StepReport{{Step: 1, Bucket: rollback.Compensated}, {Step: 2, Bucket: b}}}
		var back Reply
		if err := json.Unmarshal(EncodeReply(Reply{ID: "v", OK: true, Report: ReportFromRollback(rep)}), &back); err != nil {
			t.Fatal(err)
		}
		if back.Report.Verdict != rep.Verdict() {
			t.Errorf("bucket %s: wire says %s, engine %s", b, back.Report.Verdict, rep.Verdict())
		}
	}
	if ReportFromRollback(nil) != nil {
		t.Fatal("nil report")
	}
}

func TestStatusAndEventGolden(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{string(EncodeStatus(Status{State: StateOffline})), `{"state":"offline","ready":false,"halted":false}`},
		{string(EncodeStatus(Status{State: StateOnline, Reasons: []string{"recovery has not finished", "supply motor: unknown"}})),
			`{"state":"online","ready":false,"reasons":["recovery has not finished","supply motor: unknown"],"halted":false}`},
		{string(EncodeStatus(Status{State: StateOnline, Halted: true, HaltReason: "halt by me: person in the cell"})),
			`{"state":"online","ready":false,"halted":true,"halt_reason":"halt by me: person in the cell"}`},
		{string(EncodeEvent(Event{Kind: EventReply, Reply: &Reply{Code: CodePayloadTooLarge}})),
			`{"kind":"reply","reply":{"id":"","ok":false,"code":"PAYLOAD_TOO_LARGE","message":"The payload is over the size limit (8192 bytes). It was not read, so the reply has no id: it goes to the agent of the topic it came on (cmd/<agent>), or else to the events topic."}}`},
		{string(EncodeEvent(Event{Kind: EventRollback, Report: &ReportJSON{Saga: 9, Agent: "me", Reason: "lease expired", Order: "retrace", Verdict: "clean", Steps: []StepReport{{Step: 1, Actuator: "base", Prior: ptr(90), Target: ptr(100), Outcome: "applied", Bucket: "compensated", Attempts: 1}}}})),
			`{"kind":"rollback","report":{"saga":9,"agent":"me","reason":"lease expired","order":"retrace","verdict":"clean","steps":[{"step":1,"actuator":"base","prior":90,"target":100,"outcome":"applied","bucket":"compensated","attempts":1}]}}`},
	} {
		if c.got != c.want {
			t.Errorf("got\n%s\nwant\n%s", c.got, c.want)
		}
	}
}
