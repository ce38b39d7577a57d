package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/saga-supervisor/saga-supervisor/internal/longtest"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// theMaxes are the bounds the property tests run at: the floor and below,
// small packets, a broker's 64 KiB, and MQTT's largest packet.
var theMaxes = []int{512, MinEncodeBytes, 4096, 65536, 268435455}

// stepCounts are report sizes from 0 to 5000: every size up to 40 (where
// the bounds from 512 to 4096 start to bite), then the edges around 1000
// and 5000, and one between. Each costs a few full encodings per bound, so
// the large ones are few: this runs under -race.
func stepCounts(short bool) []int {
	var ns []int
	for n := 0; n <= 40; n++ {
		ns = append(ns, n)
	}
	if short {
		return append(ns, 100, 1000)
	}
	return append(ns, 100, 999, 1000, 1001, 2500, 5000)
}

// shape says which bucket step i (in unwind order) of n lands in. Only
// the large shapes are tried with more than 40 steps.
type shape struct {
	name   string
	large  bool
	bucket func(i, n int, r *rand.Rand) rollback.Bucket
}

var shapes = []shape{
	{"clean", true, func(i, n int, r *rand.Rand) rollback.Bucket { return rollback.Compensated }},
	{"halted at the end", true, func(i, n int, r *rand.Rand) rollback.Bucket {
		if i >= n-5 {
			return rollback.Unresolved
		}
		return rollback.Compensated
	}},
	{"one fallback in the middle", false, func(i, n int, r *rand.Rand) rollback.Bucket {
		if i == n/2 {
			return rollback.FallbackSafe
		}
		return rollback.Compensated
	}},
	{"one failure last", false, func(i, n int, r *rand.Rand) rollback.Bucket {
		if i == n-1 {
			return rollback.CompensationFailed
		}
		return rollback.Compensated
	}},
	{"all unresolved", false, func(i, n int, r *rand.Rand) rollback.Bucket { return rollback.Unresolved }},
	{"mixed", true, func(i, n int, r *rand.Rand) rollback.Bucket {
		if r.IntN(4) > 0 {
			return rollback.Compensated
		}
		return knownBuckets[r.IntN(len(knownBuckets))]
	}},
}

var actuators = []string{"base", "shoulder", "elbow", "wrist", "gripper"}

// makeReport builds an engine report of n steps, newest first as a retrace
// unwinds them; some steps carry an error.
func makeReport(n int, sh shape, seed uint64) *ReportJSON {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	rep := &rollback.Report{Saga: 9, Agent: "arm-ctl", Reason: "halt by me: person in the cell", Order: rollback.Retrace}
	for i := range n {
		b := sh.bucket(i, n, r)
		s := rollback.StepReport{Step: uint32(n - i), Actuator: actuators[r.IntN(len(actuators))], Prior: float64(r.IntN(180)),
			Target: float64(r.IntN(1800)) / 10, Outcome: rollback.Applied, Bucket: b, Attempts: uint32(r.IntN(4))}
		if b != rollback.Compensated && b != rollback.Unresolved {
			s.Error = "servo jammed: " + strings.Repeat("e", r.IntN(300))
		}
		rep.Steps = append(rep.Steps, s)
	}
	return ReportFromRollback(rep)
}

// decodeStrict decodes a payload of this package into v, refusing unknown
// fields.
func decodeStrict(t testing.TB, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%v in %.300s", err, b)
	}
}

// checkSummary checks a report as encoded within a bound against the full
// report it came from (sanitized): same verdict; if summarised, counts
// over every step, the kept steps a subsequence of the full ones, chosen in
// the documented order.
func checkSummary(t testing.TB, got, full *ReportJSON) {
	t.Helper()
	if got == nil {
		t.Fatal("the report was dropped")
	}
	if got.Verdict != full.Verdict || got.Saga != full.Saga || got.Recovered != full.Recovered {
		t.Fatalf("verdict %s saga %d, want %s %d", got.Verdict, got.Saga, full.Verdict, full.Saga)
	}
	if !got.Truncated {
		if got.StepsTotal != 0 || got.StepsOmitted != 0 || got.Buckets != nil || len(got.Steps) != len(full.Steps) {
			t.Fatalf("not truncated, yet %d/%d steps, %v", len(got.Steps), len(full.Steps), got.Buckets)
		}
		return
	}
	n := len(full.Steps)
	if got.StepsTotal != n || got.StepsOmitted != n-len(got.Steps) {
		t.Fatalf("steps_total %d steps_omitted %d with %d listed, want %d in all", got.StepsTotal, got.StepsOmitted, len(got.Steps), n)
	}
	want := map[string]int{}
	for _, s := range full.Steps {
		want[bucketName(s.Bucket)]++
	}
	if n == 0 {
		want = nil // omitted when empty
	}
	if !maps.Equal(got.Buckets, want) {
		t.Fatalf("buckets %v, want %v", got.Buckets, want)
	}
	// A subsequence, in order, each step itself (its error maybe clipped).
	kept := make([]bool, n)
	j := 0
	for _, s := range got.Steps {
		for j < n && full.Steps[j].Step != s.Step {
			j++
		}
		if j == n {
			t.Fatalf("step %d is not in the full report, or out of order", s.Step)
		}
		f := full.Steps[j]
		if s.Error != f.Error && !(strings.HasSuffix(s.Error, "…") && strings.HasPrefix(f.Error, strings.TrimSuffix(s.Error, "…"))) {
			t.Fatalf("step %d error %q is not %q clipped", s.Step, s.Error, f.Error)
		}
		s.Error = f.Error
		if string(mustMarshal(s)) != string(mustMarshal(f)) {
			t.Fatalf("step %+v differs from %+v", s, f)
		}
		kept[j] = true
		j++
	}
	// The order of choice: every problem step before any compensated one;
	// problems from the first unwound, compensated from the last.
	var problems, compensated []bool
	for i, s := range full.Steps {
		if s.Bucket == string(rollback.Compensated) {
			compensated = append([]bool{kept[i]}, compensated...) // reversed: the last unwound first
		} else {
			problems = append(problems, kept[i])
		}
	}
	order := append(problems, compensated...)
	for i := 1; i < len(order); i++ {
		if order[i] && !order[i-1] {
			t.Fatalf("a step was kept over one the policy prefers (choice %d of %d)", i, len(order))
		}
	}
}

// checkReply checks EncodeReplyMax(r, max) against EncodeReply(r).
func checkReply(t testing.TB, r Reply, max int) []byte {
	t.Helper()
	return checkReplyFull(t, r, EncodeReply(r), max)
}

// checkReplyFull is checkReply with EncodeReply(r) already computed.
func checkReplyFull(t testing.TB, r Reply, full []byte, max int) []byte {
	t.Helper()
	got := EncodeReplyMax(r, max)
	if max > 0 && len(got) > max || got == nil && max >= MinEncodeBytes {
		t.Fatalf("%d bytes for max %d", len(got), max)
	}
	if got == nil {
		return nil
	}
	if !json.Valid(got) {
		t.Fatalf("not JSON: %.300s", got)
	}
	if len(full) <= max || max <= 0 {
		if !bytes.Equal(got, full) {
			t.Fatalf("it fits, yet differs from EncodeReply:\n%.300s\n%.300s", got, full)
		}
		return got
	}
	var back Reply
	decodeStrict(t, got, &back)
	whole := sanitizeReply(r) // what full says, without decoding it
	if re := EncodeReply(back); !bytes.Equal(re, got) {
		t.Fatalf("EncodeReply of the decoding differs:\n%.300s\n%.300s", re, got)
	}
	idFits := CheckText(r.ID, MaxIDBytes) == ""
	if bytes.Equal(got, mustMarshal(replyTooLarge(max))) { // step 7: the id did not fit
		if idFits && max >= MinEncodeBytes {
			t.Fatalf("max %d: the last resort for id %q", max, r.ID)
		}
		return got
	}
	if idFits && max >= MinEncodeBytes || back.ID != "" {
		if back.ID != whole.ID || back.OK != whole.OK || back.Code != whole.Code {
			t.Fatalf("id/ok/code %q %v %s, want %q %v %s", back.ID, back.OK, back.Code, whole.ID, whole.OK, whole.Code)
		}
	}
	if !back.OK && back.Message == "" {
		t.Fatal("a refusal without a message")
	}
	if !strings.HasPrefix(whole.Message, strings.TrimSuffix(back.Message, "…")) {
		t.Fatalf("message %q is not a clip of %q", back.Message, whole.Message)
	}
	if whole.Report != nil && (back.Report != nil || idFits && max >= MinEncodeBytes) {
		checkSummary(t, back.Report, whole.Report)
	}
	return got
}

// TestEncodeMaxReports: reports of 0 to 5000 steps of every shape, in
// replies and events, at every bound: never over the bound, valid JSON,
// identical when the whole fits, id, ok, code and verdict kept, counts
// over all steps, kept steps chosen by the policy.
func TestEncodeMaxReports(t *testing.T) {
	short := longtest.Short(t)
	var mu sync.Mutex
	summarised := map[int]int{}
	t.Run("grid", func(t *testing.T) {
		for _, sh := range shapes {
			t.Run(sh.name, func(t *testing.T) {
				t.Parallel()
				for _, n := range stepCounts(short) {
					if n > 40 && !sh.large {
						continue
					}
					for _, max := range checkReportGrid(t, sh, n) {
						mu.Lock()
						summarised[max]++
						mu.Unlock()
					}
				}
			})
		}
	})
	// The grid must exercise both paths at the small bounds and leave the
	// largest alone.
	if summarised[512] == 0 || summarised[65536] == 0 || summarised[268435455] != 0 {
		t.Fatalf("summaries per bound: %v", summarised)
	}
}

// checkReportGrid checks one report of n steps at every bound, and returns
// the bounds at which a reply was summarised.
func checkReportGrid(t *testing.T, sh shape, n int) (summarisedAt []int) {
	rep := makeReport(n, sh, 7)
	replies := []Reply{
		{ID: "8", OK: true, Saga: 9, Report: rep},
		{ID: fmt.Sprintf("step-%d", n), Code: string(rollback.CodeStepFailed), Message: "wrist: driver error", Report: rep},
	}
	fulls := [][]byte{EncodeReply(replies[0]), EncodeReply(replies[1])}
	full := EncodeEvent(Event{Kind: EventRollback, Report: rep})
	for _, max := range theMaxes {
		where := fmt.Sprintf("%s, %d steps, max %d", sh.name, n, max)
		for i, r := range replies {
			got := checkReplyFull(t, r, fulls[i], max)
			if t.Failed() {
				t.Fatal(where)
			}
			if bytes.Contains(got, []byte(`"truncated":true`)) {
				summarisedAt = append(summarisedAt, max)
			}
		}
		got := EncodeEventMax(Event{Kind: EventRollback, Report: rep}, max)
		if len(got) > max || !json.Valid(got) {
			t.Fatalf("%s: event of %d bytes", where, len(got))
		}
		if len(full) <= max && !bytes.Equal(got, full) {
			t.Fatalf("%s: the event fits, yet differs", where)
		}
		var back Event
		decodeStrict(t, got, &back)
		if back.Kind != EventRollback || !bytes.Equal(EncodeEvent(back), got) {
			t.Fatalf("%s: event %.200s", where, got)
		}
		checkSummary(t, back.Report, sanitizeReport(rep))
		if t.Failed() {
			t.Fatal(where)
		}
	}
	return summarisedAt
}

// TestEncodeMaxKeepsAsManyStepsAsFit: with short texts, a summary that
// lists steps is the largest that fits: one more step would not.
func TestEncodeMaxKeepsAsManyStepsAsFit(t *testing.T) {
	for _, max := range []int{MinEncodeBytes, 4096, 65536} {
		for _, n := range []int{30, 1000, 5000} {
			rep := makeReport(n, shapes[5], 3)
			got := EncodeReplyMax(Reply{ID: "8", OK: true, Saga: 9, Report: rep}, max)
			var back Reply
			decodeStrict(t, got, &back)
			if !back.Report.Truncated {
				continue
			}
			sum := newSummary(sanitizeReport(rep))
			next := sum.full.Steps[sum.order[len(back.Report.Steps)]]
			next.Error = clipTo(next.Error, clipStepError)
			// One more step adds itself and a comma; steps_omitted loses at
			// most its digit, or the whole field when it reaches 0.
			grow := len(mustMarshal(next)) + 1 - len(`,"steps_omitted":1`)
			if len(got)+grow <= max {
				t.Errorf("max %d, %d steps: %d bytes listing %d steps; step %d would fit too", max, n, len(got), len(back.Report.Steps), next.Step)
			}
			if max == 65536 && len(back.Report.Steps) < 300 { // steps of about 200 bytes
				t.Errorf("only %d steps in 64 KiB", len(back.Report.Steps))
			}
		}
	}
}

// TestEncodeMaxIdenticalWhenItFits: at or over its size, and with no bound
// (max <= 0), the output is EncodeReply's or EncodeEvent's byte for byte;
// one byte under, it is shrunk.
func TestEncodeMaxIdenticalWhenItFits(t *testing.T) {
	replies := []Reply{
		{ID: "1", OK: true, Lease: "L9", Epoch: 42, TTLMS: 5000, HeartbeatMS: 1250},
		StepReply("4", 5, rollback.StepResult{Step: 2, Prior: 90, Value: 135, Requested: 200, Clamped: true}),
		{ID: "6", OK: true, Saga: 5, Report: makeReport(3, shapes[1], 1)},
		{ID: "6b", OK: true, Saga: 5, Report: makeReport(0, shapes[0], 1)},
		{ID: "10", OK: true, Status: []byte(`{"ready": true, "reasons": [], "halted": false, "open_sagas": [7]}`)},
		ErrorReply("4d", &rollback.Error{Code: rollback.CodeStepFailed, Message: "wrist: driver error", Report: &rollback.Report{Saga: 3, Steps: []rollback.StepReport{{Step: 1, Bucket: rollback.Orphaned}}}}),
		{ID: "q", Value: ptr(nan())},
	}
	for _, r := range replies {
		full := EncodeReply(r)
		for _, max := range []int{len(full), len(full) + 1, 1 << 30, 0, -1} {
			if got := EncodeReplyMax(r, max); !bytes.Equal(got, full) {
				t.Errorf("max %d: %s\nwant %s", max, got, full)
			}
		}
		if got := EncodeReplyMax(r, len(full)-1); len(got) >= len(full) || bytes.Equal(got, full) {
			t.Errorf("one byte under: %s", got)
		}
	}
	events := []Event{
		{Kind: EventReply, Reply: &Reply{Code: CodePayloadTooLarge}},
		{Kind: EventRollback, Report: makeReport(4, shapes[2], 1)},
		{Kind: EventDrift, Actuator: "shoulder", Value: ptr(10)},
	}
	for _, e := range events {
		full := EncodeEvent(e)
		for _, max := range []int{len(full), len(full) + 1, 0} {
			if got := EncodeEventMax(e, max); !bytes.Equal(got, full) {
				t.Errorf("max %d: %s\nwant %s", max, got, full)
			}
		}
	}
}

// summarisedHalt is the report of the docs' example: a 1000-step saga
// whose unwind a halt cut short, its last five steps unresolved.
func summarisedHalt() Event {
	rep := &rollback.Report{Saga: 9, Agent: "me", Reason: "halt by me: person in the cell", Order: rollback.Retrace}
	for i := range 1000 {
		b := rollback.Compensated
		if i >= 995 {
			b = rollback.Unresolved
		}
		s := rollback.StepReport{Step: uint32(1000 - i), Actuator: actuators[i%2], Prior: float64(i % 90), Target: float64(i%90 + 1),
			Outcome: rollback.Applied, Bucket: b, Attempts: 1}
		if b == rollback.Unresolved {
			s.Attempts = 0
		}
		rep.Steps = append(rep.Steps, s)
	}
	return Event{Kind: EventRollback, Report: ReportFromRollback(rep)}
}

// TestEncodeMaxGolden pins the bytes of one summary, the one docs/API.md
// shows, and checks that the documentation shows exactly it.
func TestEncodeMaxGolden(t *testing.T) {
	const want = `{"kind":"rollback","report":{"saga":9,"agent":"me","reason":"halt by me: person in the cell","order":"retrace","verdict":"partial","truncated":true,"steps_total":1000,"steps_omitted":992,"buckets":{"compensated":995,"unresolved":5},"steps":[` +
		`{"step":8,"actuator":"base","prior":2,"target":3,"outcome":"applied","bucket":"compensated","attempts":1},` +
		`{"step":7,"actuator":"shoulder","prior":3,"target":4,"outcome":"applied","bucket":"compensated","attempts":1},` +
		`{"step":6,"actuator":"base","prior":4,"target":5,"outcome":"applied","bucket":"compensated","attempts":1},` +
		`{"step":5,"actuator":"shoulder","prior":5,"target":6,"outcome":"applied","bucket":"unresolved","attempts":0},` +
		`{"step":4,"actuator":"base","prior":6,"target":7,"outcome":"applied","bucket":"unresolved","attempts":0},` +
		`{"step":3,"actuator":"shoulder","prior":7,"target":8,"outcome":"applied","bucket":"unresolved","attempts":0},` +
		`{"step":2,"actuator":"base","prior":8,"target":9,"outcome":"applied","bucket":"unresolved","attempts":0},` +
		`{"step":1,"actuator":"shoulder","prior":9,"target":10,"outcome":"applied","bucket":"unresolved","attempts":0}]}}`
	got := string(EncodeEventMax(summarisedHalt(), 1200))
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if !strings.Contains(readDoc(t), "\n"+want+"\n") {
		t.Error("docs/API.md does not show the summary as encoded")
	}
}

// TestEncodeMaxStatus: a status too large keeps ready and halted, says it
// was truncated and where to read it whole; one without boolean ready and
// halted becomes an INTERNAL refusal, id kept.
func TestEncodeMaxStatus(t *testing.T) {
	big := strings.Repeat(`{"actuator":"elbow","commanded":75.5},`, 3000)
	for _, c := range []struct {
		name, status, want string
	}{
		{"ready", `{"ready":true,"reasons":[],"halted":false,"actuators":[` + big + `{}]}`,
			`{"id":"12","ok":true,"status":{"ready":true,"halted":false,"truncated":true,"message":"` + statusTooLarge + `"}}`},
		{"halted, spaced, keys late", `{ "actuators" : [` + big + `{}], "halted" : true , "ready" : false }`,
			`{"id":"12","ok":true,"status":{"ready":false,"halted":true,"truncated":true,"message":"` + statusTooLarge + `"}}`},
		{"no halted", `{"ready":true,"actuators":[` + big + `{}]}`,
			`{"id":"12","ok":false,"code":"INTERNAL","message":"internal error: the status is too large and has no boolean ready and halted"}`},
		{"ready null", `{"ready":null,"halted":false,"actuators":[` + big + `{}]}`,
			`{"id":"12","ok":false,"code":"INTERNAL","message":"internal error: the status is too large and has no boolean ready and halted"}`},
		{"ready as a string", `{"ready":"true","halted":false,"actuators":[` + big + `{}]}`,
			`{"id":"12","ok":false,"code":"INTERNAL","message":"internal error: the status is too large and has no boolean ready and halted"}`},
		{"Ready", `{"Ready":true,"halted":false,"actuators":[` + big + `{}]}`,
			`{"id":"12","ok":false,"code":"INTERNAL","message":"internal error: the status is too large and has no boolean ready and halted"}`},
		{"an array", `[` + big + `{}]`,
			`{"id":"12","ok":false,"code":"INTERNAL","message":"internal error: the status is too large and has no boolean ready and halted"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Reply{ID: "12", OK: true, Status: json.RawMessage(c.status)}
			if len(EncodeReply(r)) <= 65536 {
				t.Fatal("the status is meant to be too large")
			}
			var got []byte
			if strings.HasPrefix(c.want, `{"id":"12","ok":true`) {
				got = checkReply(t, r, 65536)
			} else { // a bug of the supervisor's: ok is not kept
				got = EncodeReplyMax(r, 65536)
			}
			if string(got) != c.want {
				t.Fatalf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
	// An empty status is no status: omitted, as EncodeReply omits it.
	r := Reply{ID: "6", OK: true, Saga: 9, Status: json.RawMessage{}, Report: makeReport(100, shapes[0], 1)}
	if got := checkReply(t, r, MinEncodeBytes); !bytes.Contains(got, []byte(`{"id":"6","ok":true,"saga":9,"report":{`)) {
		t.Fatalf("empty status: %s", got)
	}
	// In an event too.
	e := Event{Kind: EventReply, Reply: &Reply{ID: "12", OK: true, Status: json.RawMessage(`{"ready":true,"halted":true,"x":"` + strings.Repeat("x", 5000) + `"}`)}}
	if got := string(EncodeEventMax(e, 1024)); got != `{"kind":"reply","reply":{"id":"12","ok":true,"status":{"ready":true,"halted":true,"truncated":true,"message":"`+statusTooLarge+`"}}}` {
		t.Fatalf("event %s", got)
	}
}

// TestEncodeMaxClipsMessages: a long message is clipped at a character
// boundary, ending in "…", id and code kept.
func TestEncodeMaxClipsMessages(t *testing.T) {
	for _, msg := range []string{strings.Repeat("x", 100000), strings.Repeat("é", 50000), strings.Repeat("\x01\"", 50000), strings.Repeat("😀", 30000)} {
		r := Reply{ID: "5", Code: "LIMIT_MAX", Message: msg}
		for _, max := range []int{MinEncodeBytes, 4096} {
			got := checkReply(t, r, max)
			var back Reply
			decodeStrict(t, got, &back)
			if !strings.HasSuffix(back.Message, "…") || len(back.Message) > clipText || !utf8.ValidString(back.Message) ||
				!strings.HasPrefix(msg, strings.TrimSuffix(back.Message, "…")) || back.ID != "5" || back.Code != "LIMIT_MAX" {
				t.Fatalf("max %d: %.200q", max, got)
			}
		}
	}
}

// TestEncodeMaxFloor: at MinEncodeBytes, the worst reply DecodeRequest's
// limits allow — an id of 128 '"' (each escaped to two bytes), the longest
// code, the largest saga, an agent of 64 '"', long texts of control
// characters (six bytes each escaped) and a report of 5000 steps in every
// bucket — keeps id, ok, code, the verdict and the counts.
func TestEncodeMaxFloor(t *testing.T) {
	longest := ""
	for _, c := range Codes {
		if len(c.Code) > len(longest) {
			longest = c.Code
		}
	}
	id, agent, junk := strings.Repeat(`"`, MaxIDBytes), strings.Repeat(`"`, MaxNameBytes), strings.Repeat("\x01", 1000)
	if CheckText(id, MaxIDBytes) != "" || ValidName(agent) != nil {
		t.Fatal("the worst id and agent must be valid")
	}
	rep := makeReport(5000, shapes[5], 11)
	rep.Saga, rep.Agent, rep.Reason, rep.Recovered = 1<<64-1, agent, junk, true
	for i := 0; i < len(rep.Steps); i += 50 {
		rep.Steps[i].Error = junk
	}
	rep.Steps[0].Bucket = "not a bucket" // counted as other: all six keys present
	for _, ok := range []bool{true, false} {
		r := Reply{ID: id, OK: ok, Code: longest, Message: junk, Saga: 1<<64 - 1, Report: rep}
		if ok {
			r.Code = ""
		}
		for _, max := range []int{MinEncodeBytes, 800} { // 800: the margin MinEncodeBytes's comment states
			got := checkReply(t, r, max)
			var back Reply
			decodeStrict(t, got, &back)
			if back.ID != id || back.Report == nil || back.Report.Verdict != "partial" || len(back.Report.Buckets) != 6 {
				t.Fatalf("max %d: %s", max, got)
			}
		}
		e := Event{Kind: EventReply, Reply: &r}
		if got := EncodeEventMax(e, MinEncodeBytes); len(got) > MinEncodeBytes || !bytes.Contains(got, []byte(`"verdict":"partial"`)) {
			t.Fatalf("event %s", got)
		}
	}
	if got := EncodeEventMax(Event{Kind: EventRollback, Report: rep}, MinEncodeBytes); len(got) > MinEncodeBytes || !bytes.Contains(got, []byte(`"verdict":"partial","truncated":true,"steps_total":5000`)) {
		t.Fatalf("event %s", got)
	}
}

// TestEncodeMaxBelowTheFloor documents what happens under MinEncodeBytes:
// never more than max bytes; the ladder goes on to a bare reply (the
// report dropped), then an INTERNAL reply without the id, then nil.
func TestEncodeMaxBelowTheFloor(t *testing.T) {
	rep := makeReport(100, shapes[1], 5)
	r := Reply{ID: strings.Repeat("i", MaxIDBytes), OK: true, Saga: 9, Report: rep}
	head := `{"id":"` + r.ID + `","ok":true,"saga":9,"report":{"saga":9,`
	counts := `"verdict":"partial","truncated":true,"steps_total":100,`
	buckets := `"buckets":{"compensated":95,"unresolved":5},`
	for _, c := range []struct {
		max  int
		want string
	}{
		{600, head + `"agent":"arm-ctl","reason":"halt by me: person in the cell","order":"retrace",` + counts + `"steps_omitted":99,` + buckets +
			`"steps":[{"step":5,"actuator":"elbow","prior":155,"target":175.1,"outcome":"applied","bucket":"unresolved","attempts":1}]}}`},
		{400, head + `"agent":"arm-ctl","reason":"halt by me: person in the cell","order":"retrace",` + counts + `"steps_omitted":100,` + buckets + `"steps":[]}}`},
		{350, head + `"agent":"arm-ctl","order":"retrace",` + counts + `"steps_omitted":100,` + buckets + `"steps":[]}}`},
		{340, head + `"agent":"","order":"retrace",` + counts + `"steps_omitted":100,` + buckets + `"steps":[]}}`},
		{200, `{"id":"` + r.ID + `","ok":true}`},
		{120, `{"id":"","ok":false,"code":"INTERNAL","message":"internal error: the reply does not fit in 120 bytes"}`},
		{101, ``},
		{1, ``},
	} {
		got := EncodeReplyMax(r, c.max)
		if string(got) != c.want || len(got) > c.max {
			t.Errorf("max %d: got\n%s\nwant\n%s", c.max, got, c.want)
		}
	}
	// Events: a report is never dropped, so nothing fits means nil; a
	// reply falls back to INTERNAL.
	if got := EncodeEventMax(Event{Kind: EventRollback, Report: rep}, 150); got != nil {
		t.Errorf("rollback event in 150 bytes: %s", got)
	}
	if got := string(EncodeEventMax(Event{Kind: EventReply, Reply: &r}, 140)); got != `{"kind":"reply","reply":{"id":"","ok":false,"code":"INTERNAL","message":"internal error: the reply does not fit in 140 bytes"}}` {
		t.Errorf("reply event in 140 bytes: %s", got)
	}
	if got := EncodeEventMax(Event{Kind: EventDrift, Actuator: strings.Repeat("a", 2000), Value: ptr(1)}, MinEncodeBytes); got != nil {
		t.Errorf("an event with nothing to shrink: %.100s", got)
	}
}

// TestSummaryOfASummary: a summary decoded and bounded again keeps its
// counts; one whose counts do not add up (hand-built) reads partial and
// stays partial through any decoding and encoding.
func TestSummaryOfASummary(t *testing.T) {
	for _, sh := range shapes {
		e := Event{Kind: EventRollback, Report: makeReport(3000, sh, 2)}
		first := EncodeEventMax(e, 65536)
		var back Event
		decodeStrict(t, first, &back)
		if !back.Report.Truncated {
			t.Fatalf("%s: not summarised", sh.name)
		}
		again := EncodeEventMax(back, 4096)
		var twice Event
		decodeStrict(t, again, &twice)
		if len(again) > 4096 || twice.Report.Verdict != back.Report.Verdict || twice.Report.StepsTotal != 3000 ||
			!maps.Equal(twice.Report.Buckets, back.Report.Buckets) || twice.Report.StepsOmitted != 3000-len(twice.Report.Steps) {
			t.Fatalf("%s: %.400s", sh.name, again)
		}
	}
	step := func(n uint32, b rollback.Bucket) StepReport {
		return StepReport{Step: n, Actuator: "elbow", Prior: ptr(1), Target: ptr(2), Outcome: "applied", Bucket: string(b), Attempts: 1}
	}
	fallback := step(2, rollback.FallbackSafe)
	fallback.Error = strings.Repeat("x", 2000)
	for _, bad := range []*ReportJSON{
		// The buckets say clean, a listed step does not.
		{Saga: 1, Order: "retrace", Truncated: true, StepsTotal: 2, StepsOmitted: 0, Buckets: map[string]int{"compensated": 2},
			Steps: []StepReport{step(1, rollback.Compensated), fallback}},
		// The totals do not add up.
		{Saga: 1, Order: "retrace", Truncated: true, StepsTotal: 5, StepsOmitted: 0, Buckets: map[string]int{"compensated": 5},
			Steps: []StepReport{step(1, rollback.Compensated), fallback}},
		// A negative count.
		{Saga: 1, Order: "retrace", Truncated: true, StepsTotal: 1, StepsOmitted: 0, Buckets: map[string]int{"compensated": 2, "orphaned": -1},
			Steps: []StepReport{step(1, rollback.Compensated)}},
		// Summary fields without the flag.
		{Saga: 1, Order: "retrace", StepsOmitted: 7, Steps: []StepReport{step(1, rollback.Compensated)}},
	} {
		for _, max := range []int{0, 400, MinEncodeBytes} {
			b := EncodeEventMax(Event{Kind: EventRollback, Report: bad}, max)
			for range 3 { // decode and encode, as a relay would
				var back Event
				decodeStrict(t, b, &back)
				if back.Report.Verdict != "partial" {
					t.Fatalf("max %d: %s", max, b)
				}
				b = EncodeEventMax(back, max)
			}
		}
	}
}

func TestClipTo(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 0, "hello"},
		{"hello", 5, "hello"},
		{"hello!", 5, "he…"},
		{"ééé", 5, "é…"},
		{"ééé", 4, "…"}, // backs up out of the first é
		{"xééé", 5, "x…"},
		{"ééé", 6, "ééé"},
		{"éééé", 7, "éé…"},
		{"😀😀", 7, "😀…"},
		{"😀😀", 6, "…"},
		{"a😀😀", 7, "a…"},
	} {
		if got := clipTo(c.s, c.n); got != c.want || c.n > 0 && len(got) > c.n {
			t.Errorf("clipTo(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
