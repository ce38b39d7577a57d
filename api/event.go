package api

// Event is one message on the events topic. Clients must ignore kinds they
// do not know: the transport will add kinds (steps, refusals, halts).
type Event struct {
	Kind   string      `json:"kind"`
	Reply  *Reply      `json:"reply,omitempty"`  // EventReply
	Report *ReportJSON `json:"report,omitempty"` // EventRollback
	// EventDrift: the actuator, and where its device now holds it.
	Actuator string   `json:"actuator,omitempty"`
	Value    *float64 `json:"value,omitempty"`
}

// The kinds of Event defined so far.
const (
	// EventReply carries a reply that had no agent to go to: the request's
	// agent could not be read, so reply/<agent> has no topic.
	EventReply = "reply"
	// EventRollback carries the report of every unwind the running
	// supervisor does, asked for or not: an abort (its reply carries the
	// report too), a failed step, a lease's end, a supply trip, a halt.
	// Crash recovery's, at start, are logged, not published.
	EventRollback = "rollback"
	// EventDrift reports an actuator its device moved on its own (a
	// board's watchdog, restart or e-stop): the supervisor now takes the
	// device's value as the actuator's position.
	EventDrift = "drift"
)

// EncodeEvent encodes an event with the same guarantees as EncodeReply.
func EncodeEvent(e Event) []byte { return mustMarshal(sanitizeEvent(e)) }

func sanitizeEvent(e Event) Event {
	if e.Reply != nil {
		r := sanitizeReply(*e.Reply)
		e.Reply = &r
	}
	e.Report = sanitizeReport(e.Report)
	return e
}
