package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// Reply answers one request on the agent's reply topic. A refusal (OK
// false) always carries Code, one of Codes, and Message. Optional fields are
// omitted when zero; a pointer is set exactly when the value means something
// (a step's value 0 is a value).
//
// A transport whose packets are bounded encodes it with EncodeReplyMax,
// which keeps ID, OK and Code and shrinks the rest to fit: a long Message
// is clipped (ending in "…"), a Report is summarised (see ReportJSON), and
// a Status too large is replaced by {"ready","halted","truncated":true,
// "message"}, which points the client to the HTTP status endpoint.
type Reply struct {
	ID      string `json:"id"` // the request's id; "" when none could be read
	OK      bool   `json:"ok"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`

	Lease       string `json:"lease,omitempty"`        // hello
	Epoch       uint64 `json:"epoch,omitempty"`        // hello
	TTLMS       int64  `json:"ttl_ms,omitempty"`       // hello, heartbeat: the TTL granted
	HeartbeatMS int64  `json:"heartbeat_ms,omitempty"` // hello, heartbeat: send a heartbeat this often

	Saga      uint64   `json:"saga,omitempty"` // begin, step, commit, abort
	Step      uint32   `json:"step,omitempty"` // step: its number in the saga, from 1
	Value     *float64 `json:"value,omitempty"`
	Prior     *float64 `json:"prior,omitempty"`
	Requested *float64 `json:"requested,omitempty"` // only when clamped: what was asked for
	Clamped   bool     `json:"clamped,omitempty"`

	Report *ReportJSON `json:"report,omitempty"` // abort, STEP_FAILED, STEP_IN_DOUBT
	// Status answers op status with the supervisor's full status, the
	// object its HTTP status endpoint serves. That object belongs to the
	// supervisor, so it travels here already encoded; it always has
	// "ready" and "halted".
	Status json.RawMessage `json:"status,omitempty"`
}

// ReportJSON is a RollbackReport on the wire (rollback.Report).
//
// A report too large for the transport's packets (EncodeReplyMax,
// EncodeEventMax) is summarised: Truncated is true, StepsTotal and Buckets
// count every step of the unwind, StepsOmitted says how many are not listed,
// and Steps lists the others, still in unwind order. The steps kept are,
// first, those not compensated, in unwind order (the first problem is
// usually the cause; a halt's first unresolved steps are the latest
// commands, where the robot stands), then the compensated ones from the
// last unwound backwards (an actuator's last compensation is where it was
// left); texts may be clipped (ending in "…"). The verdict is always the
// verdict of every step, never of the steps listed.
type ReportJSON struct {
	Saga      uint64 `json:"saga"`
	Agent     string `json:"agent"`
	Reason    string `json:"reason,omitempty"`
	Order     string `json:"order"` // "retrace" or "direct"
	Recovered bool   `json:"recovered,omitempty"`
	// Verdict is "clean" or "partial". EncodeReply and EncodeEvent derive
	// it from the steps' buckets again, so no hand-built report can
	// publish "clean" for a partial unwind; for a summarised report, from
	// Buckets too: "clean" only if they count every one of StepsTotal
	// steps as compensated.
	Verdict string `json:"verdict"`
	// Truncated marks a summarised report; the three fields after it are
	// set only then.
	Truncated    bool           `json:"truncated,omitempty"`
	StepsTotal   int            `json:"steps_total,omitempty"`   // the steps of the whole unwind
	StepsOmitted int            `json:"steps_omitted,omitempty"` // the steps not in Steps
	Buckets      map[string]int `json:"buckets,omitempty"`       // the steps per bucket, all of them; "other": a bucket rollback does not define, or unknown
	Steps        []StepReport   `json:"steps"`                   // in unwind order; [] when nothing moved
}

// StepReport is one step of a ReportJSON.
type StepReport struct {
	Step     uint32   `json:"step"`
	Actuator string   `json:"actuator"`
	Prior    *float64 `json:"prior"`  // the value it was unwound to; null if not finite
	Target   *float64 `json:"target"` // the value it had commanded; null if not finite
	Outcome  string   `json:"outcome"`
	Bucket   string   `json:"bucket"`
	Attempts uint32   `json:"attempts"`
	Error    string   `json:"error,omitempty"`
}

// ReportFromRollback converts an engine report (nil gives nil).
func ReportFromRollback(r *rollback.Report) *ReportJSON {
	if r == nil {
		return nil
	}
	j := &ReportJSON{Saga: r.Saga, Agent: r.Agent, Reason: r.Reason, Order: r.Order.String(),
		Recovered: r.Recovered, Verdict: r.Verdict(), Steps: make([]StepReport, 0, len(r.Steps))}
	for _, s := range r.Steps {
		j.Steps = append(j.Steps, StepReport{Step: s.Step, Actuator: s.Actuator, Prior: finite(s.Prior), Target: finite(s.Target),
			Outcome: string(s.Outcome), Bucket: string(s.Bucket), Attempts: s.Attempts, Error: s.Error})
	}
	return j
}

// finite points at a copy of v, or is nil when JSON cannot carry v.
func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// StepReply is the reply to a step the engine applied.
func StepReply(id string, saga uint64, res rollback.StepResult) Reply {
	r := Reply{ID: id, OK: true, Saga: saga, Step: res.Step, Value: finite(res.Value), Prior: finite(res.Prior), Clamped: res.Clamped}
	if res.Clamped {
		r.Requested = finite(res.Requested)
	}
	return r
}

// ErrorReply is the refusal reply to request id for err: an *Error of this
// package or a *rollback.Error (with its report, if it ended the saga) keep
// their code and message. Anything else — and a code missing from Codes, so
// nothing undocumented reaches an agent — is INTERNAL, with the error's text
// as message. A nil err is INTERNAL too: a reply built from "no error" must
// never read as success.
func ErrorReply(id string, err error) Reply {
	r := Reply{ID: id, Code: CodeInternal}
	var we *Error
	var re *rollback.Error
	switch {
	case err == nil:
		r.Message = "internal error: a refusal without an error"
	// The engine's type is matched first: errors.As stops at a match, and
	// a typed nil *rollback.Error further down a chain would otherwise
	// have its Unwrap called, which dereferences it.
	case errors.As(err, &re):
		if re == nil { // a typed nil passed as an error: a caller's bug
			r.Message = "internal error: a nil *rollback.Error"
			break
		}
		r.Code, r.Message, r.Report = string(re.Code), re.Message, ReportFromRollback(re.Report)
	case errors.As(err, &we):
		if we == nil {
			r.Message = "internal error: a nil *api.Error"
			break
		}
		r.Code, r.Message = we.Code, we.Message
	default:
		r.Message = "internal error: " + err.Error()
	}
	info, ok := Lookup(r.Code)
	if !ok {
		r.Code, r.Message = CodeInternal, fmt.Sprintf("internal error: unlisted code %q: %s", clip(r.Code), r.Message)
		info, _ = Lookup(CodeInternal)
	}
	if r.Message == "" {
		r.Message = info.Meaning
	}
	return r
}

// EncodeReply encodes a reply. The output is deterministic (fixed key
// order, shortest float form). Non-finite numbers, which JSON cannot carry
// and the gate never lets through, are encoded as null rather than failing;
// a report's verdict is derived from its buckets; a refusal always has a
// code and a message.
func EncodeReply(r Reply) []byte { return mustMarshal(sanitizeReply(r)) }

func sanitizeReply(r Reply) Reply {
	if len(r.Status) > 0 && !json.Valid(r.Status) {
		// Publishing ok with a broken body would be worse than admitting
		// the failure.
		return Reply{ID: r.ID, Code: CodeInternal, Message: "internal error: the status is not valid JSON"}
	}
	r.Value, r.Prior, r.Requested = finitePtr(r.Value), finitePtr(r.Prior), finitePtr(r.Requested)
	r.Report = sanitizeReport(r.Report)
	if !r.OK && r.Code == "" {
		// A refusal without a code would break the promise every
		// client reads replies by.
		r.Code = CodeInternal
	}
	if !r.OK && r.Message == "" {
		r.Message = r.Code
		if info, ok := Lookup(r.Code); ok {
			r.Message = info.Meaning
		}
	}
	return r
}

func finitePtr(p *float64) *float64 {
	if p == nil {
		return nil
	}
	return finite(*p)
}

// sanitizeReport copies a report with its floats made encodable and its
// verdict derived from its buckets, exactly as rollback.Report.Clean does.
func sanitizeReport(in *ReportJSON) *ReportJSON {
	if in == nil {
		return nil
	}
	out := *in
	out.Steps = make([]StepReport, len(in.Steps))
	for i, s := range in.Steps {
		s.Prior, s.Target = finitePtr(s.Prior), finitePtr(s.Target)
		out.Steps[i] = s
	}
	out.Verdict = "partial"
	if clean(&out) {
		out.Verdict = "clean"
	}
	return &out
}

// clean says whether a report may read "clean": every step listed is
// compensated and, if it is a summary (or claims any of a summary's
// fields), its counts account for every one of its steps as compensated.
// A summary whose counts do not add up is partial: when unsure, the wire
// says "look at the robot".
func clean(r *ReportJSON) bool {
	for _, s := range r.Steps {
		if s.Bucket != string(rollback.Compensated) {
			return false
		}
	}
	if !r.Truncated && r.StepsTotal == 0 && r.StepsOmitted == 0 && r.Buckets == nil {
		return true
	}
	for b, n := range r.Buckets {
		if n < 0 || b != string(rollback.Compensated) && n != 0 {
			return false
		}
	}
	return r.StepsOmitted >= 0 && r.StepsTotal == len(r.Steps)+r.StepsOmitted &&
		r.Buckets[string(rollback.Compensated)] == r.StepsTotal
}

// mustMarshal encodes v, whose types (strings, integers, bools, floats
// made finite) cannot fail to encode: a failure is a bug in this package.
func mustMarshal(v any) []byte {
	b, err := marshal(v)
	if err != nil {
		panic("api: encoding a payload: " + err.Error())
	}
	return b
}

// marshal encodes without HTML escaping (people read these payloads with
// mosquitto_sub) and without the encoder's trailing newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
