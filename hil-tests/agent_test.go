//go:build !saga_lean

package hil

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// replyTimeout bounds the wait for one reply: a hang guard.
const replyTimeout = 15 * time.Second

// errNoReply is a request that got no reply within replyTimeout.
var errNoReply = errors.New("no reply")

// agent is a controller speaking MQTT API v1 over its own raw paho
// connection, as any third-party controller would: its will on its will
// topic, requests on cmd/<agent>, replies matched by id. Unlike the Go
// client it reconnects on its own (and subscribes again), which the broker
// scenario needs to show what a reconnecting controller gets. It records
// the events and the retained status it sees.
type agent struct {
	t      *testing.T
	name   string
	topics mqtt.Topics
	c      paho.Client
	// timeout bounds the wait for each reply (0: replyTimeout). The soak's
	// agents give up sooner and carry on.
	timeout time.Duration

	mu       sync.Mutex
	lease    string
	epoch    uint64
	ttl      time.Duration
	n        int
	wait     map[string]chan api.Reply
	events   []api.Event
	states   map[string]float64 // retained state/<actuator>: commanded values
	status   api.Status
	statuses int // retained status messages received
	conns    int // successful connects (1 + reconnects)
	hbStop   chan struct{}
}

// newAgent connects an agent and waits until it is subscribed to its
// replies, the events and the status.
func (r *rig) newAgent(name string) *agent {
	r.t.Helper()
	a := &agent{t: r.t, name: name, topics: r.plan.Topics, wait: map[string]chan api.Reply{}, states: map[string]float64{}}
	subscribed := make(chan error, 1)
	opts := paho.NewClientOptions().AddBroker(r.plan.Broker).SetClientID(name).
		SetCleanSession(true).
		SetWill(a.topics.Will(name), "gone", 1, false).
		SetUsername(r.agentLogin(name)).
		SetPassword(r.plan.AgentPassword).
		SetAutoReconnect(true).
		SetConnectRetry(false).
		SetMaxReconnectInterval(500 * time.Millisecond).
		SetConnectTimeout(5 * time.Second).
		SetOnConnectHandler(func(c paho.Client) {
			// A clean session forgets subscriptions: take them again on
			// every (re)connect.
			err := a.subscribe(c)
			a.mu.Lock()
			a.conns++
			a.mu.Unlock()
			select {
			case subscribed <- err:
			default:
			}
		})
	a.c = paho.NewClient(opts)
	if tok := a.c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		r.t.Fatalf("agent %s: connect to %s: %v", name, r.plan.Broker, tok.Error())
	}
	select {
	case err := <-subscribed:
		if err != nil {
			r.t.Fatalf("agent %s: %v", name, err)
		}
	case <-time.After(10 * time.Second):
		r.t.Fatalf("agent %s: not subscribed after 10s", name)
	}
	r.t.Cleanup(a.close)
	return a
}

// agentLogin is the broker username of an agent: its name when the rig
// file gives logins, none otherwise.
func (r *rig) agentLogin(name string) string {
	if len(r.plan.Agents) > 0 {
		return name
	}
	return ""
}

func (a *agent) subscribe(c paho.Client) error {
	subs := map[string]paho.MessageHandler{
		a.topics.Reply(a.name): a.onReply,
		a.topics.Events():      a.onEvent,
		a.topics.Status():      a.onStatus,
		a.topics.State("+"):    a.onState,
	}
	for topic, h := range subs {
		if tok := c.Subscribe(topic, 1, h); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			return fmt.Errorf("subscribe %s: %v", topic, tok.Error())
		}
	}
	return nil
}

func (a *agent) onReply(_ paho.Client, m paho.Message) {
	var rep api.Reply
	if err := json.Unmarshal(m.Payload(), &rep); err != nil {
		a.t.Errorf("agent %s: a reply that is not JSON: %q: %v", a.name, m.Payload(), err)
		return
	}
	a.mu.Lock()
	ch := a.wait[rep.ID]
	delete(a.wait, rep.ID) // the first reply for an id is the truth
	a.mu.Unlock()
	if ch != nil {
		ch <- rep
	}
}

func (a *agent) onEvent(_ paho.Client, m paho.Message) {
	var ev api.Event
	if json.Unmarshal(m.Payload(), &ev) == nil {
		a.mu.Lock()
		a.events = append(a.events, ev)
		a.mu.Unlock()
	}
}

func (a *agent) onStatus(_ paho.Client, m paho.Message) {
	var st api.Status
	if json.Unmarshal(m.Payload(), &st) == nil {
		a.mu.Lock()
		a.status = st
		a.statuses++
		a.mu.Unlock()
	}
}

func (a *agent) onState(_ paho.Client, m paho.Message) {
	var st struct {
		Actuator  string  `json:"actuator"`
		Commanded float64 `json:"commanded"`
	}
	if json.Unmarshal(m.Payload(), &st) == nil {
		a.mu.Lock()
		a.states[st.Actuator] = st.Commanded
		a.mu.Unlock()
	}
}

// state is the last retained commanded value seen for an actuator.
func (a *agent) state(actuator string) (float64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.states[actuator]
	return v, ok
}

// close disconnects cleanly (no will). A second close does nothing.
func (a *agent) close() {
	a.stopHeartbeat()
	if a.c.IsConnected() {
		a.c.Disconnect(100)
	}
}

// send publishes req (id, agent, and the lease when the op needs one
// filled in) and waits for its reply.
func (a *agent) send(req map[string]any) (api.Reply, error) {
	a.mu.Lock()
	a.n++
	id := fmt.Sprintf("%s-%d", a.name, a.n)
	ch := make(chan api.Reply, 1)
	a.wait[id] = ch
	lease, epoch := a.lease, a.epoch
	a.mu.Unlock()
	req["id"], req["agent"] = id, a.name
	switch req["op"] {
	case "hello", "status", "halt", "reset":
	default:
		if _, set := req["lease"]; !set && lease != "" {
			req["lease"], req["epoch"] = lease, epoch
		}
	}
	b, err := json.Marshal(req)
	if err != nil {
		return api.Reply{}, err
	}
	a.c.Publish(a.topics.AgentCmd(a.name), 1, false, b)
	timeout := cmp.Or(a.timeout, replyTimeout)
	select {
	case rep := <-ch:
		return rep, nil
	case <-time.After(timeout):
		a.mu.Lock()
		delete(a.wait, id)
		a.mu.Unlock()
		return api.Reply{}, fmt.Errorf("agent %s: %s: %w after %v", a.name, b, errNoReply, timeout)
	}
}

// do is send, failing the test when no reply comes.
func (a *agent) do(req map[string]any) api.Reply {
	a.t.Helper()
	rep, err := a.send(req)
	if err != nil {
		a.t.Fatal(err)
	}
	return rep
}

// must is do, failing the test on a refusal.
func (a *agent) must(req map[string]any) api.Reply {
	a.t.Helper()
	rep := a.do(req)
	if !rep.OK {
		a.t.Fatalf("agent %s: %v refused: %s %s", a.name, req, rep.Code, rep.Message)
	}
	return rep
}

// refused is do, failing the test unless the reply is a refusal with code.
func (a *agent) refused(code string, req map[string]any) api.Reply {
	a.t.Helper()
	rep := a.do(req)
	if rep.OK || rep.Code != code {
		a.t.Fatalf("agent %s: %v: got ok=%v %s %q, want refused %s", a.name, req, rep.OK, rep.Code, rep.Message, code)
	}
	return rep
}

// hello takes a lease with ttl.
func (a *agent) hello(ttl time.Duration) {
	a.t.Helper()
	rep := a.must(map[string]any{"op": "hello", "ttl_ms": ttl.Milliseconds()})
	a.mu.Lock()
	a.lease, a.epoch, a.ttl = rep.Lease, rep.Epoch, time.Duration(rep.TTLMS)*time.Millisecond
	a.mu.Unlock()
}

// begin opens a saga.
func (a *agent) begin() uint64 {
	a.t.Helper()
	return a.must(map[string]any{"op": "begin"}).Saga
}

// step sends one step and returns the reply, whatever it says.
func (a *agent) step(saga uint64, actuator string, value float64) api.Reply {
	a.t.Helper()
	return a.do(map[string]any{"op": "step", "saga": saga, "actuator": actuator, "value": value})
}

// heartbeat keeps the lease alive from a goroutine every TTL/4, without
// waiting for replies, until stopHeartbeat; while the broker is away the
// heartbeats are lost, as a real controller's would be.
func (a *agent) heartbeat() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hbStop != nil {
		return
	}
	stop := make(chan struct{})
	a.hbStop = stop
	every := a.ttl / 4
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				a.mu.Lock()
				if a.lease == "" {
					a.mu.Unlock() // no lease to keep alive (the soak's workers drop theirs)
					continue
				}
				a.n++
				b, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("%s-%d", a.name, a.n), "agent": a.name, "op": "heartbeat", "lease": a.lease, "epoch": a.epoch})
				a.mu.Unlock()
				if a.c.IsConnectionOpen() {
					a.c.Publish(a.topics.AgentCmd(a.name), 1, false, b)
				}
			}
		}
	}()
}

func (a *agent) stopHeartbeat() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hbStop != nil {
		close(a.hbStop)
		a.hbStop = nil
	}
}

// rollbackFor returns the first rollback event seen for saga.
func (a *agent) rollbackFor(saga uint64) (*api.ReportJSON, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range a.events {
		if ev.Kind == "rollback" && ev.Report != nil && ev.Report.Saga == saga {
			return ev.Report, true
		}
	}
	return nil, false
}

// lastStatus returns the last retained status seen and how many arrived.
func (a *agent) lastStatus() (api.Status, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status, a.statuses
}

// connects is how many times the agent has connected.
func (a *agent) connects() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conns
}
