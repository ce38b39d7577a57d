package api

import (
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// MinEncodeBytes is the smallest bound at which EncodeReplyMax and
// EncodeEventMax keep everything their policy promises, however long the
// messages, reasons and reports: a reply's ID, OK and Code and its
// report's verdict and counts, for any reply whose ID DecodeRequest
// accepted (up to MaxIDBytes: at worst 128 '"', each escaped to two bytes)
// and whose Code is one of Codes, and an EventRollback's verdict and
// counts for any report of the engine's (its agent a valid name). The
// worst such reply needs less than 800 bytes. Below the bound the output still
// never exceeds max, but a long id or message may push a reply down to
// the last steps, which drop the report, then the id. A broker's packets
// are far larger (64 KiB and more): this matters only to a misconfigured
// transport.
const MinEncodeBytes = 1024

// The clip lengths of a shrunk payload, in bytes of text before JSON
// escaping, from the first step of the ladder to the last.
const (
	clipText      = 256 // a reply's message and a report's reason, first
	clipStepError = 128 // the error of a step kept in a summary
	clipOrder     = 32  // a report's order (a word; only a hand-built report has a longer one)
	clipTight     = 64  // message and reason, when no step fits
	clipLast      = 16  // message, when only the essentials fit
)

// Buckets a summary counts by name; any other name is counted as "other".
var knownBuckets = []rollback.Bucket{rollback.Compensated, rollback.FallbackSafe, rollback.CompensationFailed,
	rollback.Orphaned, rollback.Unresolved}

const otherBucket = "other"

// statusTooLarge is the message of a status shrunk to its essentials.
const statusTooLarge = "the status is too large for this transport: GET /api/v1/status from the supervisor's HTTP server"

// EncodeReplyMax encodes a reply in at most max bytes, for a transport
// whose packets are bounded. When EncodeReply's output fits, it is that
// output, byte for byte. Otherwise the reply is shrunk, each step tried
// only if the one before did not fit:
//
//  1. a Status is replaced by {"ready":…,"halted":…,"truncated":true,
//     "message":…}, the message pointing to the HTTP status endpoint; a
//     status without boolean ready and halted becomes an INTERNAL refusal
//     (as a status that is not JSON does in EncodeReply);
//  2. Message and a report's Reason are clipped to 256 bytes and the Report
//     is summarised (see ReportJSON), keeping as many steps as fit, each
//     kept step's Error clipped to 128 bytes;
//  3. the summary lists no step, and Message and Reason are clipped to 64;
//  4. Message is clipped to 16 bytes and Reason dropped;
//  5. the summary drops Agent: verdict, totals and counts remain;
//  6. the reply keeps only ID, OK, Code and Message (16 bytes): a report
//     or status is dropped;
//  7. {"id":"","ok":false,"code":"INTERNAL",…}: the id itself does not fit;
//  8. nil: not even that fits (max under about 100 bytes).
//
// Clipped text ends in "…". ID, OK and Code are kept as they are up to
// step 6 (but for step 1's INTERNAL). At max >= MinEncodeBytes, step 5
// fits every reply whose ID DecodeRequest accepted and whose Code is
// listed; steps 6 to 8 are for smaller bounds and hand-built replies. The output is always valid JSON and at most max
// bytes, and EncodeReply of its decoding gives it back unchanged. A max
// <= 0 means no bound, as a broker's maximum packet size of 0 does: the
// result is EncodeReply's.
func EncodeReplyMax(r Reply, max int) []byte {
	r = sanitizeReply(r)
	if b := mustMarshal(r); max <= 0 || len(b) <= max {
		return b
	}
	ladder := shrinkLadder
	if len(r.Status) > 0 { // an empty one is omitted, as EncodeReply does
		r = shrinkStatus(r)
	} else {
		ladder = ladder[1:] // step 1 would change nothing
	}
	sum := newSummary(r.Report)
	for _, c := range ladder {
		if b := fit(max, sum, c, func(k int) any { return shrinkReply(r, sum, c, k) }); b != nil {
			return b
		}
	}
	if b := mustMarshal(replyTooLarge(max)); len(b) <= max {
		return b
	}
	return nil
}

// EncodeEventMax encodes an event in at most max bytes, with the policy of
// EncodeReplyMax: the output is EncodeEvent's when that fits; otherwise
// its Reply and Report are shrunk step by step as there, its other fields
// kept. An EventReply whose reply does not fit even bare carries the
// INTERNAL reply of step 7. An event's own Report (EventRollback) is never
// dropped, since an event without it would hide an unwind: when not even
// its step 5 fits, the result is nil. Nil means nothing fits, which at max
// >= MinEncodeBytes needs a hand-built event (a kind, actuator or agent of
// hundreds of bytes): publish nothing then, and log it. A max <= 0 means
// no bound.
func EncodeEventMax(e Event, max int) []byte {
	e = sanitizeEvent(e)
	if b := mustMarshal(e); max <= 0 || len(b) <= max {
		return b
	}
	ladder := shrinkLadder
	if e.Reply != nil && len(e.Reply.Status) > 0 {
		r := shrinkStatus(*e.Reply)
		e.Reply = &r
	} else {
		ladder = ladder[1:]
	}
	// An event carries a reply or a report; one built by hand with both
	// has the same number of steps kept in each.
	var replySum *summary
	if e.Reply != nil {
		replySum = newSummary(e.Reply.Report)
	}
	sum := newSummary(e.Report)
	bisect := sum
	if bisect == nil {
		bisect = replySum
	}
	for _, c := range ladder {
		shrunk := func(k int) any {
			out := e
			if e.Reply != nil {
				r := shrinkReply(*e.Reply, replySum, c, k)
				out.Reply = &r
			}
			out.Report = sum.report(c, k)
			return out
		}
		if b := fit(max, bisect, c, shrunk); b != nil {
			return b
		}
	}
	if e.Reply != nil && e.Report == nil {
		r := replyTooLarge(max)
		e.Reply = &r
		if b := mustMarshal(e); len(b) <= max {
			return b
		}
	}
	return nil
}

// cut is one step of the shrink ladder.
type cut struct {
	text       int  // Message and Reason clipped to this many bytes; 0: not clipped
	dropReason bool // a report's Reason dropped
	summary    bool // a report summarised
	steps      bool // the summary keeps as many steps as fit (else none)
	stepError  int  // a kept step's Error clipped to this many bytes
	agent      bool // the summary keeps Agent
	bare       bool // a reply keeps only ID, OK, Code and Message
}

// shrinkLadder is EncodeReplyMax's steps 1 to 6 (the status is shrunk
// before the first).
var shrinkLadder = []cut{
	{},
	{text: clipText, summary: true, steps: true, stepError: clipStepError, agent: true},
	{text: clipTight, summary: true, agent: true},
	{text: clipLast, dropReason: true, summary: true, agent: true},
	{text: clipLast, dropReason: true, summary: true},
	{text: clipLast, dropReason: true, summary: true, bare: true},
}

// fit encodes the payload build gives for c in at most max bytes, or
// returns nil. When c keeps steps, it finds the most steps k that fit by
// bisection (the payload grows with k: a step adds far more bytes than
// steps_omitted loses digits) and returns the encoding it measured.
func fit(max int, sum *summary, c cut, build func(k int) any) []byte {
	b := mustMarshal(build(0))
	if len(b) > max {
		return nil
	}
	if !c.steps || sum == nil {
		return b
	}
	lo, hi := 0, len(sum.order) // b fits with lo steps
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if m := mustMarshal(build(mid)); len(m) <= max {
			lo, b = mid, m
		} else {
			hi = mid - 1
		}
	}
	return b
}

// shrinkReply applies c to a sanitized reply, listing k steps of its
// report.
func shrinkReply(r Reply, sum *summary, c cut, k int) Reply {
	r.Message = clipTo(r.Message, c.text)
	if c.bare {
		return Reply{ID: r.ID, OK: r.OK, Code: r.Code, Message: r.Message}
	}
	r.Report = sum.report(c, k)
	return r
}

// shrinkStatus is step 1: a status reduced to ready and halted, or an
// INTERNAL refusal when the status has no boolean ready and halted.
func shrinkStatus(r Reply) Reply {
	if st, ok := smallStatus(r.Status); ok {
		r.Status = st
		return r
	}
	return Reply{ID: r.ID, Code: CodeInternal, Message: "internal error: the status is too large and has no boolean ready and halted"}
}

// replyTooLarge is the reply of last resort: its id could not fit.
func replyTooLarge(max int) Reply {
	return Reply{Code: CodeInternal, Message: fmt.Sprintf("internal error: the reply does not fit in %d bytes", max)}
}

// smallStatus keeps only a status object's ready and halted, both of which
// must be booleans (not null, not missing).
func smallStatus(status json.RawMessage) (json.RawMessage, bool) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(status, &fields) != nil {
		return nil, false
	}
	flag := func(key string) (bool, bool) {
		switch string(fields[key]) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
		return false, false
	}
	ready, ok1 := flag("ready")
	halted, ok2 := flag("halted")
	if !ok1 || !ok2 {
		return nil, false
	}
	return mustMarshal(struct {
		Ready     bool   `json:"ready"`
		Halted    bool   `json:"halted"`
		Truncated bool   `json:"truncated"`
		Message   string `json:"message"`
	}{ready, halted, true, statusTooLarge}), true
}

// summary holds what every summarised form of one report shares: counts
// over all its steps and the order in which steps are kept.
type summary struct {
	full    *ReportJSON // sanitized: its verdict is every step's
	total   int
	buckets map[string]int
	order   []int // indexes into full.Steps, the first kept first
}

// newSummary prepares the summaries of a sanitized report (nil: nil).
//
// A report that is already a summary (decoded from the wire, or built by
// hand) keeps its counts, the only record of the steps it omitted, if they
// are consistent: StepsTotal is the steps listed plus StepsOmitted, the
// counts add up to it, and each bucket counts at least the steps listed in
// it. Otherwise they are not trusted: the steps listed are counted, and
// the omitted ones as "other", so the summary reads partial, as its
// verdict already does, and no later decoding and encoding can make it
// read clean.
func newSummary(r *ReportJSON) *summary {
	if r == nil {
		return nil
	}
	listed := map[string]int{}
	for _, st := range r.Steps {
		listed[bucketName(st.Bucket)]++
	}
	s := &summary{full: r, total: len(r.Steps), buckets: listed}
	if r.Truncated || r.StepsTotal != 0 || r.StepsOmitted != 0 || r.Buckets != nil {
		given, sum, ok := map[string]int{}, 0, r.StepsOmitted >= 0 && r.StepsTotal == len(r.Steps)+r.StepsOmitted
		for b, n := range r.Buckets {
			given[bucketName(b)] += n
			sum += n
			ok = ok && n >= 0
		}
		for b, n := range listed {
			ok = ok && given[b] >= n
		}
		if ok && sum == r.StepsTotal {
			s.total, s.buckets = r.StepsTotal, given
		} else if omitted := max(r.StepsOmitted, 0); omitted > 0 {
			s.total += omitted
			s.buckets[otherBucket] += omitted
		}
	}
	// The steps not compensated first, in unwind order: the first problem
	// is usually the cause, and the first unwound of a halt's unresolved
	// steps are the latest commands, where the robot now stands. Then the
	// compensated ones from the last unwound backwards: the last
	// compensation of an actuator is where it was left.
	s.order = make([]int, 0, len(r.Steps))
	for i, st := range r.Steps {
		if st.Bucket != string(rollback.Compensated) {
			s.order = append(s.order, i)
		}
	}
	for i := len(r.Steps) - 1; i >= 0; i-- {
		if r.Steps[i].Bucket == string(rollback.Compensated) {
			s.order = append(s.order, i)
		}
	}
	return s
}

func bucketName(b string) string {
	if slices.Contains(knownBuckets, rollback.Bucket(b)) {
		return b
	}
	return otherBucket
}

// report is the summary for c, listing k steps (nil for no report).
func (s *summary) report(c cut, k int) *ReportJSON {
	if s == nil {
		return nil
	}
	if !c.summary {
		return s.full
	}
	k = min(k, len(s.order))
	if !c.steps {
		k = 0
	}
	f := s.full
	out := &ReportJSON{Saga: f.Saga, Agent: f.Agent, Reason: clipTo(f.Reason, c.text), Order: clipTo(f.Order, clipOrder),
		Recovered: f.Recovered, Verdict: f.Verdict, Truncated: true, StepsTotal: s.total, StepsOmitted: s.total - k}
	if c.dropReason {
		out.Reason = ""
	}
	if !c.agent {
		out.Agent = ""
	}
	out.Buckets = s.buckets
	keep := make([]bool, len(f.Steps))
	for _, i := range s.order[:k] {
		keep[i] = true
	}
	out.Steps = make([]StepReport, 0, k)
	for i, st := range f.Steps {
		if keep[i] {
			st.Error = clipTo(st.Error, c.stepError)
			out.Steps = append(out.Steps, st)
		}
	}
	return out
}

// clipTo shortens s to at most n bytes (n >= 3), cut at a character
// boundary and ending in "…" when cut; n <= 0 leaves s whole.
func clipTo(s string, n int) string {
	const ellipsis = "…"
	if n <= 0 || len(s) <= n {
		return s
	}
	i := max(n-len(ellipsis), 0)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + ellipsis
}
