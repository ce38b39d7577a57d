package api_test

import (
	"fmt"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// A transport's side of one request: decode it, answer the agent, or publish
// the refusal as an event when there is no agent to answer.
func ExampleDecodeRequest() {
	received := time.Now() // on receipt: deadlines count from here

	payload := []byte(`{"id":"4","agent":"me","op":"step","lease":"L42","epoch":42,"saga":7,"actuator":"elbow","value":75.5,"deadline_ms":200}`)
	req, err := api.DecodeRequest(payload, 0)
	fmt.Println(err == nil, req.Op, req.Actuator, req.Value, req.Deadline(received).Sub(received))

	// A hostile duplicate: refused, yet still answerable to its agent.
	payload = []byte(`{"id":"5","agent":"me","op":"step","lease":"L42","epoch":42,"saga":7,"actuator":"elbow","value":1,"value":900}`)
	req, err = api.DecodeRequest(payload, 0)
	fmt.Println(req.Agent, string(api.EncodeReply(api.ErrorReply(req.ID, err))))

	// Not JSON at all: no agent, so the refusal goes to events.
	req, err = api.DecodeRequest([]byte(`NaN`), 0)
	if req.Agent == "" {
		ev := api.Event{Kind: api.EventReply, Reply: new(api.ErrorReply(req.ID, err))}
		fmt.Println(string(api.EncodeEvent(ev)))
	}
	// Output:
	// true step elbow 75.5 200ms
	// me {"id":"5","ok":false,"code":"BAD_REQUEST","message":"field \"value\" appears more than once"}
	// {"kind":"reply","reply":{"id":"","ok":false,"code":"BAD_REQUEST","message":"request is not valid JSON: invalid character 'N' looking for beginning of value"}}
}

// Engine results become replies: a step that was applied, and one the gate
// refused.
func ExampleStepReply() {
	ok := api.StepReply("4", 7, rollback.StepResult{Step: 1, Prior: 30, Value: 75.5, Requested: 75.5})
	fmt.Println(string(api.EncodeReply(ok)))

	refused := &rollback.Error{Code: rollback.LimitCode(limits.LimitMax), Message: "elbow: 200 is above max 180"}
	fmt.Println(string(api.EncodeReply(api.ErrorReply("5", refused))))
	// Output:
	// {"id":"4","ok":true,"saga":7,"step":1,"value":75.5,"prior":30}
	// {"id":"5","ok":false,"code":"LIMIT_MAX","message":"elbow: 200 is above max 180"}
}

// A client encodes its requests with the same rules the supervisor decodes
// them by.
func ExampleEncodeRequest() {
	b, err := api.EncodeRequest(api.Request{ID: "1", Agent: "me", Op: api.OpHello, TTLMS: 5000})
	fmt.Println(string(b), err)
	_, err = api.EncodeRequest(api.Request{ID: "2", Agent: "me/you", Op: api.OpStatus})
	fmt.Println(err)
	// Output:
	// {"id":"1","agent":"me","op":"hello","ttl_ms":5000} <nil>
	// BAD_REQUEST: field "agent": name "me/you" holds '/', which MQTT topics reserve
}

// A transport whose broker takes packets of at most 1 KiB: a report too
// large for it is summarised, its verdict that of every step.
func ExampleEncodeEventMax() {
	rep := &rollback.Report{Saga: 9, Agent: "me", Reason: "lease expired", Order: rollback.Retrace}
	for step := uint32(40); step >= 1; step-- {
		b := rollback.Compensated
		if step == 20 {
			b = rollback.FallbackSafe
		}
		rep.Steps = append(rep.Steps, rollback.StepReport{Step: step, Actuator: "elbow", Prior: float64(step - 1), Target: float64(step),
			Outcome: rollback.Applied, Bucket: b, Attempts: 1})
	}
	ev := api.Event{Kind: api.EventRollback, Report: api.ReportFromRollback(rep)}
	fmt.Println(len(api.EncodeEvent(ev)) > 1024)
	fmt.Println(string(api.EncodeEventMax(ev, 1024)))
	// Output:
	// true
	// {"kind":"rollback","report":{"saga":9,"agent":"me","reason":"lease expired","order":"retrace","verdict":"partial","truncated":true,"steps_total":40,"steps_omitted":33,"buckets":{"compensated":39,"fallback_safe":1},"steps":[{"step":20,"actuator":"elbow","prior":19,"target":20,"outcome":"applied","bucket":"fallback_safe","attempts":1},{"step":6,"actuator":"elbow","prior":5,"target":6,"outcome":"applied","bucket":"compensated","attempts":1},{"step":5,"actuator":"elbow","prior":4,"target":5,"outcome":"applied","bucket":"compensated","attempts":1},{"step":4,"actuator":"elbow","prior":3,"target":4,"outcome":"applied","bucket":"compensated","attempts":1},{"step":3,"actuator":"elbow","prior":2,"target":3,"outcome":"applied","bucket":"compensated","attempts":1},{"step":2,"actuator":"elbow","prior":1,"target":2,"outcome":"applied","bucket":"compensated","attempts":1},{"step":1,"actuator":"elbow","prior":0,"target":1,"outcome":"applied","bucket":"compensated","attempts":1}]}}
}
