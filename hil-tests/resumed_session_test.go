//go:build !saga_lean

package hil

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// countingHandler counts the requests and e-stops that reach it.
type countingHandler struct{ n, halts atomic.Int64 }

func (h *countingHandler) Submit(_ string, req api.Request, _ *api.Error, _ time.Time, _ func(api.Reply)) {
	if req.Op == api.OpHalt {
		h.halts.Add(1)
		return
	}
	h.n.Add(1)
}
func (h *countingHandler) AgentGone(string, string) {}

// slowConnectLog holds up the log line the transport writes as it
// connects, before it subscribes: a loaded CPU, made certain.
type slowConnectLog struct{ slog.Handler }

func (slowConnectLog) Enabled(context.Context, slog.Level) bool { return true }
func (h slowConnectLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "mqtt connected" {
		time.Sleep(500 * time.Millisecond)
	}
	return h.Handler.Handle(ctx, r)
}
func (h slowConnectLog) WithAttrs(as []slog.Attr) slog.Handler {
	return slowConnectLog{h.Handler.WithAttrs(as)}
}
func (h slowConnectLog) WithGroup(g string) slog.Handler {
	return slowConnectLog{h.Handler.WithGroup(g)}
}

// TestTransportResumedSessionHears is the soak's deaf supervisor (seed 4:
// fault #21 of run 2, #6 of run 3, #10 of run 5): the supervisor killed
// with commands queued for its persistent session and restarted. The
// broker sends the queued commands (up to its in-flight window, 20 for
// mosquitto) right after CONNACK; the restarted process's MQTT client had
// no handler for them until its subscription was made (paho v1.5.1 then
// acknowledges nothing: "no handler was available. Message will NOT be
// acknowledged"), the window stayed full, and the broker sent nothing
// more: ready, and deaf to every command and e-stop. Here the subscription
// is held back by the connect's log line; the queued commands and e-stop,
// and one sent after, must all reach the handler.
func TestTransportResumedSessionHears(t *testing.T) {
	m := startMosquitto(t, t.TempDir())
	topics := mqtt.Topics{Prefix: "saga/v1", Device: "resume"}
	const id = "saga-supervisor-resume"
	// The sessions as a killed supervisor leaves them: subscribed at QoS
	// 1, not cleaned, the clients gone.
	for cid, filters := range map[string][]string{id: {topics.CmdFilter()}, id + mqtt.EstopSuffix: {topics.Estop()}} {
		c := paho.NewClient(paho.NewClientOptions().AddBroker(m.URL()).SetClientID(cid).SetCleanSession(false))
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect: %v", tok.Error())
		}
		for _, f := range filters {
			if tok := c.Subscribe(f, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe: %v", tok.Error())
			}
		}
		c.Disconnect(0)
	}
	// Commands and an e-stop sent while it is down: queued for the
	// sessions.
	agent := paho.NewClient(paho.NewClientOptions().AddBroker(m.URL()).SetClientID("resume-agent"))
	if tok := agent.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer agent.Disconnect(0)
	publish := func(topic, payload string) {
		if tok := agent.Publish(topic, 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	send := func(i int) {
		publish(topics.Cmd()+"/planner", fmt.Sprintf(`{"id":"%d","agent":"planner","op":"status"}`, i))
	}
	const queued = 30
	for i := range queued {
		send(i)
	}
	publish(topics.Estop(), "stop")

	h := &countingHandler{}
	lg := slog.New(slowConnectLog{slog.DiscardHandler})
	tr, err := mqtt.NewTransport(mqtt.TransportOptions{Broker: m.URL(), ClientID: id, Topics: topics, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Start(h); err != nil {
		t.Fatal(err)
	}
	all := waitUntil(10*time.Second, func() bool { return h.n.Load() >= queued })
	got := h.n.Load()
	send(queued)
	if !waitUntil(10*time.Second, func() bool { return h.n.Load() > got }) {
		t.Errorf("a command sent after the restart did not reach the supervisor in 10 s (of the %d queued while it was down, %d did): deaf", queued, got)
	} else if !all {
		t.Errorf("%d of the %d commands queued while the supervisor was down reached it", got, queued)
	}
	if !waitUntil(10*time.Second, func() bool { return h.halts.Load() > 0 }) {
		t.Errorf("the e-stop published while the supervisor was down never reached it")
	}
}
