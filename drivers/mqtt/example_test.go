package mqtt_test

import (
	"fmt"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/mqtt"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// The supervisor's side of one message on the cmd topic: decode it, answer
// on the agent's reply topic, or on events when there is no agent to answer.
func ExampleDecodeRequest() {
	topics := mqtt.Topics{Device: "arm1"}
	received := time.Now() // on receipt: deadlines count from here

	payload := []byte(`{"id":"4","agent":"me","op":"step","lease":"L42","epoch":42,"saga":7,"actuator":"elbow","value":75.5,"deadline_ms":200}`)
	req, err := mqtt.DecodeRequest(payload, 0)
	fmt.Println(err == nil, req.Op, req.Actuator, req.Value, req.Deadline(received).Sub(received))

	// A hostile duplicate: refused, yet still answerable to its agent.
	payload = []byte(`{"id":"5","agent":"me","op":"step","lease":"L42","epoch":42,"saga":7,"actuator":"elbow","value":1,"value":900}`)
	req, err = mqtt.DecodeRequest(payload, 0)
	fmt.Println(topics.Reply(req.Agent), string(mqtt.EncodeReply(mqtt.ErrorReply(req.ID, err))))

	// Not JSON at all: no agent, so the refusal goes to events.
	req, err = mqtt.DecodeRequest([]byte(`NaN`), 0)
	if req.Agent == "" {
		ev := mqtt.Event{Kind: mqtt.EventReply, Reply: new(mqtt.ErrorReply(req.ID, err))}
		fmt.Println(topics.Events(), string(mqtt.EncodeEvent(ev)))
	}
	// Output:
	// true step elbow 75.5 200ms
	// saga/v1/arm1/reply/me {"id":"5","ok":false,"code":"BAD_REQUEST","message":"field \"value\" appears more than once"}
	// saga/v1/arm1/events {"kind":"reply","reply":{"id":"","ok":false,"code":"BAD_REQUEST","message":"request is not valid JSON: invalid character 'N' looking for beginning of value"}}
}

// Engine results become replies: a step that was applied, and one the gate
// refused.
func ExampleStepReply() {
	ok := mqtt.StepReply("4", 7, rollback.StepResult{Step: 1, Prior: 30, Value: 75.5, Requested: 75.5})
	fmt.Println(string(mqtt.EncodeReply(ok)))

	refused := &rollback.Error{Code: rollback.LimitCode(limits.LimitMax), Message: "elbow: 200 is above max 180"}
	fmt.Println(string(mqtt.EncodeReply(mqtt.ErrorReply("5", refused))))
	// Output:
	// {"id":"4","ok":true,"saga":7,"step":1,"value":75.5,"prior":30}
	// {"id":"5","ok":false,"code":"LIMIT_MAX","message":"elbow: 200 is above max 180"}
}

// A client encodes its requests with the same rules the supervisor decodes
// them by.
func ExampleEncodeRequest() {
	b, err := mqtt.EncodeRequest(mqtt.Request{ID: "1", Agent: "me", Op: mqtt.OpHello, TTLMS: 5000})
	fmt.Println(string(b), err)
	_, err = mqtt.EncodeRequest(mqtt.Request{ID: "2", Agent: "me/you", Op: mqtt.OpStatus})
	fmt.Println(err)
	// Output:
	// {"id":"1","agent":"me","op":"hello","ttl_ms":5000} <nil>
	// BAD_REQUEST: field "agent": name "me/you" holds '/', which MQTT topics reserve
}

func ExampleTopics() {
	t := mqtt.Topics{Device: "arm1"}
	fmt.Println(t.Cmd())
	fmt.Println(t.Reply("me"))
	fmt.Println(t.Will("me"))
	fmt.Println(t.Status(), string(mqtt.EncodeStatus(mqtt.Status{State: mqtt.StateOffline})))
	fmt.Println(mqtt.ValidLevel("me+you"))
	// Output:
	// saga/v1/arm1/cmd
	// saga/v1/arm1/reply/me
	// saga/v1/arm1/will/me
	// saga/v1/arm1/status {"state":"offline","ready":false,"halted":false}
	// name "me+you" holds '+', which MQTT topics reserve
}
