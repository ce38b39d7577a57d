package api

import (
	"math"
	"strings"
	"time"

	"github.com/saga-supervisor/saga-supervisor/approval"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// Size limits of a request. They are part of the wire format: docs/API.md
// states them, and a client that respects them is never refused for size.
const (
	// DefaultMaxRequestBytes bounds a request payload when DecodeRequest is
	// given no bound. The largest valid request, every string at its limit
	// and every character \u-escaped, stays under it — but for the tokens
	// of approvals, counted as written plainly (base64url, which no JSON
	// encoder escapes).
	DefaultMaxRequestBytes = 8192
	MaxIDBytes             = 128 // id
	MaxLeaseBytes          = 128 // lease
	MaxReasonBytes         = 256 // reason (abort, halt)
	MaxTokenBytes          = 256 // token (reset)
	MaxApprovalBytes       = 512 // approval (step): a signed approval token (package approval)
	// MaxApprovals bounds the tokens of approvals (step): an actuator
	// requires at most this many (approval.MaxPerStep).
	MaxApprovals  = approval.MaxPerStep
	MaxDeadlineMS = 60000 // deadline_ms: a command older than a minute is not a command
)

// maxTTLMS is the largest ttl_ms a time.Duration holds. Above it ttl_ms
// milliseconds wrap around, and a TTL far beyond the supervisor's bounds
// could come out inside them: 2^58+5000 ms made a 5 s lease.
const maxTTLMS = math.MaxInt64 / uint64(time.Millisecond)

// Op is what a request asks for.
type Op string

// The ops of API v1.
const (
	OpHello     Op = "hello"     // take a lease
	OpHeartbeat Op = "heartbeat" // renew it
	OpBegin     Op = "begin"     // open a saga
	OpStep      Op = "step"      // command one actuator within a saga
	OpCommit    Op = "commit"    // close a saga, keeping its effects
	OpAbort     Op = "abort"     // unwind a saga
	OpBye       Op = "bye"       // end the lease (its open sagas are unwound)
	OpHalt      Op = "halt"      // latch the e-stop
	OpReset     Op = "reset"     // clear a halt (operator token)
	OpStatus    Op = "status"    // ask for the supervisor's status
)

// The operator's ops of drain and quarantine (issue 27). They are served
// over HTTP and by saga-supervisor ctl, with the operator token; the
// controller API (MQTT) does not take them: DecodeRequest refuses them as
// unknown ops.
const (
	OpDrain      Op = "drain"      // refuse new sagas; unwind open ones at a deadline
	OpUndrain    Op = "undrain"    // end the drain
	OpQuarantine Op = "quarantine" // bar an agent
	OpRelease    Op = "release"    // end an agent's quarantine
)

// Request is one decoded request. Which fields are set depends on Op; the
// others are zero.
type Request struct {
	ID    string // correlates the reply; unique per agent
	Agent string // who asks; a valid topic level (replies go to reply/<agent>)
	Op    Op

	TTLMS      int64   // hello: the TTL asked for, ms; 0 = the supervisor's default
	Lease      string  // heartbeat, begin, step, commit, abort, bye
	Epoch      uint64  // with Lease: the lease's fencing token
	Saga       uint64  // step, commit, abort
	Actuator   string  // step
	Value      float64 // step: the requested value (finite)
	DeadlineMS int64   // step: void unless admitted within this many ms of receipt; 0 = none
	Reason     string  // abort, halt: free text for the journal and the report
	Token      string  // reset: the operator token
	// Will (hello) is what the agent's MQTT last will carries: a will
	// ends the lease only if it carries the same, so a late will of an
	// earlier connection does not end this one's lease. A name-like
	// token (ValidName), fresh for each connection.
	Will string
	// Approval (step) holds the operators' signed approvals (package
	// approval), "" for none: one token, or several joined by single
	// spaces (a token never holds one), as the wire's approval or
	// approvals field carries them. A string keeps Request comparable,
	// which de-duplication relies on; Approvals splits it.
	Approval string
	// Zone (halt, reset) scopes the halt or reset to one zone of the
	// configuration; "" = the full halt, one latch over everything.
	Zone string
}

// Approvals returns the step's approval tokens, in the order sent.
func (r Request) Approvals() []string {
	if r.Approval == "" {
		return nil
	}
	return strings.Split(r.Approval, " ")
}

// JoinApprovals is the Approval of a step sending tokens.
func JoinApprovals(tokens ...string) string { return strings.Join(tokens, " ") }

// Deadline is the instant after which the step is void, counted from when
// the supervisor received it (received should carry a monotonic reading, as
// time.Now's does), or the zero time when the request has no deadline.
// The sender's clock is never used: the two machines share none.
func (r Request) Deadline(received time.Time) time.Time {
	if r.DeadlineMS <= 0 {
		return time.Time{}
	}
	return received.Add(time.Duration(r.DeadlineMS) * time.Millisecond)
}

// Command is the engine's view of a step request received at received.
func (r Request) Command(received time.Time) rollback.Command {
	return rollback.Command{ID: r.ID, Actuator: r.Actuator, Value: r.Value, Deadline: r.Deadline(received)}
}

// Owner is who acts in the request's saga, as the engine records it.
func (r Request) Owner() rollback.Owner {
	return rollback.Owner{Agent: r.Agent, Lease: r.Lease, Epoch: r.Epoch}
}

// wireRequest fixes the key order of an encoded request.
type wireRequest struct {
	ID         string   `json:"id"`
	Agent      string   `json:"agent"`
	Op         Op       `json:"op"`
	TTLMS      int64    `json:"ttl_ms,omitempty"`
	Lease      string   `json:"lease,omitempty"`
	Epoch      uint64   `json:"epoch,omitempty"`
	Saga       uint64   `json:"saga,omitempty"`
	Actuator   string   `json:"actuator,omitempty"`
	Value      *float64 `json:"value,omitempty"`
	DeadlineMS int64    `json:"deadline_ms,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	Token      string   `json:"token,omitempty"`
	Will       string   `json:"will,omitempty"`
	Approval   string   `json:"approval,omitempty"`
	Approvals  []string `json:"approvals,omitempty"`
	Zone       string   `json:"zone,omitempty"`
}

// EncodeRequest encodes a request as a client publishes it. It refuses a
// request DecodeRequest would refuse, or one that would not decode back to
// itself, by decoding its own output: the two can never disagree.
func EncodeRequest(r Request) ([]byte, error) {
	w := wireRequest{ID: r.ID, Agent: r.Agent, Op: r.Op, TTLMS: r.TTLMS, Lease: r.Lease, Epoch: r.Epoch,
		Saga: r.Saga, Actuator: r.Actuator, DeadlineMS: r.DeadlineMS, Reason: r.Reason, Token: r.Token, Will: r.Will, Zone: r.Zone}
	// One approval goes as approval, as it always has; several as approvals.
	if toks := r.Approvals(); len(toks) == 1 {
		w.Approval = toks[0]
	} else {
		w.Approvals = toks
	}
	if r.Op == OpStep || r.Value != 0 {
		v := r.Value
		w.Value = &v
	}
	if math.IsNaN(r.Value) || math.IsInf(r.Value, 0) {
		return nil, &Error{Code: CodeNotFinite, Field: "value", Message: "field \"value\" is not finite"}
	}
	b, err := marshal(w)
	if err != nil {
		return nil, err
	}
	back, derr := DecodeRequest(b, 0)
	if derr != nil {
		return nil, derr
	}
	if back != r {
		return nil, badRequest("", "request does not survive encoding (a negative or invalid field?)")
	}
	return b, nil
}
