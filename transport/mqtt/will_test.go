package mqtt

import (
	"log/slog"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
)

type fakeMsg struct {
	topic    string
	payload  string
	retained bool
}

func (m fakeMsg) Duplicate() bool   { return false }
func (m fakeMsg) Qos() byte         { return 1 }
func (m fakeMsg) Retained() bool    { return m.retained }
func (m fakeMsg) Topic() string     { return m.topic }
func (m fakeMsg) MessageID() uint16 { return 1 }
func (m fakeMsg) Payload() []byte   { return []byte(m.payload) }
func (m fakeMsg) Ack()              {}

type goneHandler struct{ gone []string }

func (h *goneHandler) Submit(string, api.Request, *api.Error, time.Time, func(api.Reply)) {}
func (h *goneHandler) AgentGone(agent, will string)                                       { h.gone = append(h.gone, agent+"="+will) }

// A will reaches the handler with its payload (which names the connection
// it belongs to); a retained will — replayed to the supervisor at every
// new subscription, long after the connection it belonged to — does not
// reach it at all. Before, a retained will ended the agent's lease.
func TestWillPayloadAndRetainedWill(t *testing.T) {
	h := &goneHandler{}
	tr := &Transport{opt: TransportOptions{Topics: Topics{Prefix: "saga/v1", Device: "arm1"}}, h: h, log: slog.New(slog.DiscardHandler)}
	tr.enqueue(nil, fakeMsg{topic: "saga/v1/arm1/will/planner", payload: "w1", retained: true})
	tr.enqueue(nil, fakeMsg{topic: "saga/v1/arm1/will/planner", payload: "w2"})
	if len(h.gone) != 1 || h.gone[0] != "planner=w2" {
		t.Fatalf("AgentGone calls %q, want only the live will planner=w2", h.gone)
	}
}

type countSubmits struct {
	goneHandler
	n int
}

func (h *countSubmits) Submit(string, api.Request, *api.Error, time.Time, func(api.Reply)) { h.n++ }

// The command connection's default handler (a resumed session's messages
// before the subscription) takes the command and will topics and drops
// any other: a late message of a Retained read is not a command.
func TestEnqueueSessionTopics(t *testing.T) {
	h := &countSubmits{}
	tr := &Transport{opt: TransportOptions{Topics: Topics{Prefix: "saga/v1", Device: "arm1"}, MaxPayload: 1 << 16}, h: h, log: slog.New(slog.DiscardHandler)}
	req := `{"id":"1","agent":"planner","op":"status"}`
	tr.enqueueSession(nil, fakeMsg{topic: "saga/v1/arm1/homeassistant/sensor/x/config", payload: req})
	tr.enqueueSession(nil, fakeMsg{topic: "saga/v1/arm1/cmdx", payload: req})
	if h.n != 0 {
		t.Fatalf("%d messages on other topics were taken as commands", h.n)
	}
	tr.enqueueSession(nil, fakeMsg{topic: "saga/v1/arm1/cmd/planner", payload: req})
	tr.enqueueSession(nil, fakeMsg{topic: "saga/v1/arm1/will/planner", payload: "w"})
	if h.n != 1 || len(h.gone) != 1 {
		t.Fatalf("a command and a will: %d commands, wills %q; want 1 and 1", h.n, h.gone)
	}
}
