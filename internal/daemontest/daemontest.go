// Package daemontest runs a supervisor the way `saga-supervisor run` does —
// the embedded default configuration, an in-process MQTT broker and the
// MQTT transport — in temporary directories, and speaks MQTT API v1 to it
// as a raw agent. Tests of the supervisor, the client, the CLI and the MQTT
// drivers share it, so they exercise one production path.
package daemontest

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/daemon"
	"github.com/saga-supervisor/saga-supervisor/internal/nodelay"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/embedded"
)

// Token is the operator reset token a started daemon accepts.
const Token = "operator-token-0123456789abcdef-test"

// Daemon is a running in-process supervisor with its broker and transport.
type Daemon struct {
	Sup       *supervisor.Supervisor
	Built     *supervisor.Built
	Broker    *embedded.Broker
	Transport *mqtt.Transport
	Topics    mqtt.Topics
	Config    *config.Config
}

// Start runs a daemon as `run` does (package daemon) on config.Default —
// anonymous embedded broker on a free loopback port, no HTTP — changed by
// mod, if set, with its journal and world in dir ("" for a new temporary
// directory). Everything is closed when the test ends.
func Start(t testing.TB, dir string, mod func(*config.Config)) *Daemon {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := config.Default()
	// Agents of every name, logging in as nobody (on loopback): access
	// control is on only where a test asks (the security table runs the
	// locked broker against the real binary).
	cfg.Agents.Allow = nil
	cfg.MQTT.Auth.Anonymous = true
	cfg.MQTT.Listen = "127.0.0.1:0"
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = filepath.Join(dir, "world")
	cfg.HTTP.ResetToken = Token
	cfg.HTTP.ResetTokenFile = "" // the token is the test's, in no file
	if mod != nil {
		mod(cfg)
	}
	dm, err := daemon.Start(daemon.Options{Config: cfg, NoHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dm.Close() })
	return &Daemon{Sup: dm.Sup, Built: dm.Built, Broker: dm.Broker.Broker, Transport: dm.Transport,
		Topics: mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device}, Config: cfg}
}

// URL is the broker's URL.
func (d *Daemon) URL() string { return d.Broker.URL() }

// Agent is a controller (or a watcher) speaking MQTT API v1 over its own
// paho connection, with its MQTT will on its will topic. It records the
// retained actuator states and the supervisor's status as they arrive.
type Agent struct {
	t      testing.TB
	Name   string
	C      paho.Client
	Topics mqtt.Topics
	// Lease and Epoch are filled by Hello and added to every request that
	// needs them.
	Lease string
	Epoch uint64

	mu     sync.Mutex
	wait   map[string]chan api.Reply
	states map[string]float64
	status string
	n      int
}

// NewAgent connects an agent to broker. It is disconnected when the test
// ends.
func NewAgent(t testing.TB, broker string, topics mqtt.Topics, name string) *Agent {
	t.Helper()
	return NewAgentLogin(t, broker, topics, name, "")
}

// NewAgentLogin is NewAgent logging in to the broker as user name with
// password (none when password is "").
func NewAgentLogin(t testing.TB, broker string, topics mqtt.Topics, name, password string) *Agent {
	t.Helper()
	a := &Agent{t: t, Name: name, Topics: topics, wait: map[string]chan api.Reply{}, states: map[string]float64{}}
	opts := paho.NewClientOptions().SetDialer(nodelay.Dialer(30*time.Second)).AddBroker(broker).SetClientID(name).SetWill(topics.Will(name), "gone", 1, false)
	if password != "" {
		opts.SetUsername(name).SetPassword(password)
	}
	a.C = paho.NewClient(opts)
	if tok := a.C.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("agent %s connect: %v", name, tok.Error())
	}
	t.Cleanup(func() { a.C.Disconnect(50) })
	subs := map[string]paho.MessageHandler{
		topics.Reply(name): func(_ paho.Client, m paho.Message) {
			var r api.Reply
			if err := json.Unmarshal(m.Payload(), &r); err != nil {
				t.Errorf("agent %s: bad reply %s: %v", name, m.Payload(), err)
				return
			}
			a.mu.Lock()
			ch := a.wait[r.ID]
			a.mu.Unlock()
			if ch != nil {
				ch <- r
			}
		},
		topics.State("+"): func(_ paho.Client, m paho.Message) {
			var st struct {
				Actuator  string  `json:"actuator"`
				Commanded float64 `json:"commanded"`
			}
			if json.Unmarshal(m.Payload(), &st) == nil {
				a.mu.Lock()
				a.states[st.Actuator] = st.Commanded
				a.mu.Unlock()
			}
		},
		topics.Status(): func(_ paho.Client, m paho.Message) {
			var st api.Status
			if json.Unmarshal(m.Payload(), &st) == nil {
				a.mu.Lock()
				a.status = st.State
				a.mu.Unlock()
			}
		},
	}
	// State first, the reply topic last: the order in which the embedded
	// broker would lose replies if retained states went at QoS 1 (delivered
	// on subscribe, they stall later deliveries; the transport sends
	// retained state at QoS 0 for that). Every test exercises that order.
	for _, topic := range []string{topics.State("+"), topics.Status(), topics.Reply(name)} {
		subscribe(t, a.C, name, topic, subs[topic])
	}
	return a
}

// subscribe subscribes c to topic, again while the broker refuses it.
// paho's token has no error for a SUBACK that refuses a filter (0x80): the
// code is only in its Result. And the embedded broker (mochi v2.7.9)
// refuses a SUBSCRIBE whose packet id is that of a QoS 1 message it has
// sent the client and not yet had acknowledged ("packet identifier in
// use"), though MQTT keeps the two directions' ids apart: here the
// retained status, delivered on the subscription before. Where the client
// acknowledged it late (qemu, make test-arm), the reply topic went
// unsubscribed, and every reply to the agent was lost.
func subscribe(t testing.TB, c paho.Client, agent, topic string, h paho.MessageHandler) {
	t.Helper()
	deadline := time.Now().Add(testtool.Slow(5 * time.Second))
	for {
		tok := c.Subscribe(topic, 1, h)
		if !tok.WaitTimeout(time.Until(deadline)) || tok.Error() != nil {
			t.Fatalf("agent %s subscribe %s: %v", agent, topic, tok.Error())
		}
		code, ok := tok.(*paho.SubscribeToken).Result()[topic]
		if ok && code <= 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %s subscribe %s: refused (SUBACK %#x)", agent, topic, code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// needsLease reports whether an op carries lease and epoch.
func needsLease(op any) bool {
	switch op {
	case "hello", "status", "halt", "reset":
		return false
	}
	return true
}

// Send publishes a request (its id and agent filled in, and the lease when
// the op needs one and the request has none) and waits for the reply.
func (a *Agent) Send(req map[string]any) api.Reply {
	a.t.Helper()
	a.mu.Lock()
	id, ch := a.expectLocked("")
	lease, epoch := a.Lease, a.Epoch
	a.mu.Unlock()
	req["id"], req["agent"] = id, a.Name
	if _, set := req["lease"]; !set && lease != "" && needsLease(req["op"]) {
		req["lease"], req["epoch"] = lease, epoch
	}
	b, _ := json.Marshal(req)
	r, ok := a.exchange(a.Topics.AgentCmd(a.Name), false, b, ch, 10*time.Second)
	if !ok {
		a.t.Fatalf("agent %s: no reply to %s", a.Name, b)
	}
	return r
}

// SendRaw publishes req on topic exactly as given (only its id is set) and
// waits up to d for a reply on this agent's reply topic; ok is false if none
// came. It is for requests an agent should not be able to make.
func (a *Agent) SendRaw(topic string, retained bool, req map[string]any, d time.Duration) (rep api.Reply, ok bool) {
	a.t.Helper()
	a.mu.Lock()
	id, ch := a.expectLocked("raw-")
	a.mu.Unlock()
	req["id"] = id
	b, _ := json.Marshal(req)
	return a.exchange(topic, retained, b, ch, d)
}

// expectLocked numbers a new request, "<agent>-<infix><n>", and registers
// the channel its reply will be handed to. The caller holds a.mu.
func (a *Agent) expectLocked(infix string) (id string, reply <-chan api.Reply) {
	a.n++
	id = fmt.Sprintf("%s-%s%d", a.Name, infix, a.n)
	ch := make(chan api.Reply, 1)
	a.wait[id] = ch
	return id, ch
}

// exchange publishes the encoded request b on topic and waits up to d
// (testtool.Slow: a guard against a hang, not a bound the test asserts)
// for its reply on reply; ok is false if none came.
func (a *Agent) exchange(topic string, retained bool, b []byte, reply <-chan api.Reply, d time.Duration) (rep api.Reply, ok bool) {
	a.C.Publish(topic, 1, retained, b)
	select {
	case r := <-reply:
		return r, true
	case <-time.After(testtool.Slow(d)):
		return api.Reply{}, false
	}
}

// Must is Send, failing the test on a refusal.
func (a *Agent) Must(req map[string]any) api.Reply {
	a.t.Helper()
	r := a.Send(req)
	if !r.OK {
		a.t.Fatalf("agent %s: %v refused: %s %s", a.Name, req, r.Code, r.Message)
	}
	return r
}

// Hello takes a lease with the given TTL.
func (a *Agent) Hello(ttl time.Duration) {
	a.t.Helper()
	r := a.Must(map[string]any{"op": "hello", "ttl_ms": ttl.Milliseconds()})
	a.mu.Lock()
	a.Lease, a.Epoch = r.Lease, r.Epoch
	a.mu.Unlock()
}

// State is the last retained commanded value seen for an actuator.
func (a *Agent) State(actuator string) (float64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.states[actuator]
	return v, ok
}

// SupervisorState is the last "state" seen on the retained status topic
// (api.StateOnline or api.StateOffline).
func (a *Agent) SupervisorState() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

// WaitFor polls cond every 5 ms until it holds, failing the test after d,
// stretched by testtool.Slow: d guards against a hang, it is not a bound
// the test asserts.
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	d = testtool.Slow(d)
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Stranger listens on a free loopback port as another process's server
// would, accepting and closing every connection and counting them: a test
// holds an address with it and checks that nothing dialled it. It is
// closed at the test's end (closing it earlier frees the port).
func Stranger(t testing.TB) (net.Listener, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	dialled := new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()
	return ln, dialled
}
