package supervisor_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/drivers/mqtt"
	"github.com/saga-supervisor/saga-supervisor/drivers/mqtt/embedded"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// daemon is a supervisor on the default config (the sim arm), with an
// embedded broker and its MQTT transport, in temporary directories.
type daemon struct {
	sup    *supervisor.Supervisor
	built  *supervisor.Built
	broker *embedded.Broker
	tr     *mqtt.Transport
	topics mqtt.Topics
}

func startDaemon(t *testing.T, dir string, mod func(*config.Config)) *daemon {
	t.Helper()
	cfg := config.Default()
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = filepath.Join(dir, "world")
	cfg.HTTP.ResetToken = "operator-token"
	if mod != nil {
		mod(cfg)
	}
	b, err := supervisor.FromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.New(b.Options)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	broker, err := embedded.Start("127.0.0.1:0", 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{sup: sup, built: b, broker: broker, topics: b.Options.Topics}
	d.tr, err = mqtt.StartTransport(mqtt.TransportOptions{Broker: broker.URL(), ClientID: "sup-test", Topics: d.topics}, sup)
	if err != nil {
		t.Fatal(err)
	}
	sup.SetPublisher(d.tr)
	t.Cleanup(d.close)
	return d
}

func (d *daemon) close() {
	d.tr.Close()
	d.sup.Close()
	d.built.Close()
	d.broker.Close()
}

// agent is a controller speaking MQTT API v1 through the broker.
type agent struct {
	t      *testing.T
	name   string
	c      paho.Client
	topics mqtt.Topics
	mu     sync.Mutex
	wait   map[string]chan mqtt.Reply
	states map[string]float64
	n      int
	lease  string
	epoch  uint64
}

func newAgent(t *testing.T, d *daemon, name string) *agent {
	a := &agent{t: t, name: name, topics: d.topics, wait: map[string]chan mqtt.Reply{}, states: map[string]float64{}}
	a.c = paho.NewClient(paho.NewClientOptions().AddBroker(d.broker.URL()).SetClientID(name).
		SetWill(d.topics.Will(name), "gone", 1, false))
	if tok := a.c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("agent connect: %v", tok.Error())
	}
	a.c.Subscribe(d.topics.Reply(name), 1, func(_ paho.Client, m paho.Message) {
		var r mqtt.Reply
		if err := json.Unmarshal(m.Payload(), &r); err != nil {
			t.Errorf("bad reply %s: %v", m.Payload(), err)
			return
		}
		a.mu.Lock()
		ch := a.wait[r.ID]
		a.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}).WaitTimeout(5 * time.Second)
	a.c.Subscribe(d.topics.State("+"), 1, func(_ paho.Client, m paho.Message) {
		var st struct {
			Actuator  string  `json:"actuator"`
			Commanded float64 `json:"commanded"`
		}
		json.Unmarshal(m.Payload(), &st)
		a.mu.Lock()
		a.states[st.Actuator] = st.Commanded
		a.mu.Unlock()
	}).WaitTimeout(5 * time.Second)
	return a
}

// send publishes a request and waits for its reply.
func (a *agent) send(req map[string]any) mqtt.Reply {
	a.t.Helper()
	a.mu.Lock()
	a.n++
	id := fmt.Sprintf("%s-%d", a.name, a.n)
	ch := make(chan mqtt.Reply, 1)
	a.wait[id] = ch
	a.mu.Unlock()
	req["id"], req["agent"] = id, a.name
	if op := req["op"]; a.lease != "" && op != "hello" && op != "status" && op != "halt" && op != "reset" {
		if _, ok := req["lease"]; !ok {
			req["lease"], req["epoch"] = a.lease, a.epoch
		}
	}
	b, _ := json.Marshal(req)
	a.c.Publish(a.topics.Cmd(), 1, false, b)
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		a.t.Fatalf("no reply to %s", b)
		return mqtt.Reply{}
	}
}

func (a *agent) must(req map[string]any) mqtt.Reply {
	a.t.Helper()
	r := a.send(req)
	if !r.OK {
		a.t.Fatalf("%v refused: %s %s", req, r.Code, r.Message)
	}
	return r
}

func (a *agent) hello(ttlMS int) {
	r := a.must(map[string]any{"op": "hello", "ttl_ms": ttlMS})
	a.lease, a.epoch = r.Lease, r.Epoch
}

func (a *agent) state(name string) (float64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.states[name]
	return v, ok
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSagaOverMQTT(t *testing.T) {
	d := startDaemon(t, t.TempDir(), nil)
	a := newAgent(t, d, "planner")
	a.hello(5000)
	saga := a.must(map[string]any{"op": "begin"}).Saga
	r := a.must(map[string]any{"op": "step", "saga": saga, "actuator": "base", "value": 45})
	if r.Step != 1 || *r.Prior != 0 || *r.Value != 45 {
		t.Fatalf("step reply %+v", r)
	}
	if r := a.send(map[string]any{"op": "step", "saga": saga, "actuator": "elbow", "value": 170}); r.Code != "LIMIT_MAX" {
		t.Fatalf("over-limit step: %+v", r)
	}
	a.must(map[string]any{"op": "step", "saga": saga, "actuator": "elbow", "value": 90, "deadline_ms": 1000})
	a.must(map[string]any{"op": "commit", "saga": saga})
	waitFor(t, "retained state elbow=90", 5*time.Second, func() bool { v, _ := a.state("elbow"); return v == 90 })

	// A second saga, aborted: the report comes back clean.
	saga = a.must(map[string]any{"op": "begin"}).Saga
	a.must(map[string]any{"op": "step", "saga": saga, "actuator": "shoulder", "value": 60})
	ab := a.must(map[string]any{"op": "abort", "saga": saga, "reason": "changed my mind"})
	if ab.Report == nil || ab.Report.Verdict != "clean" {
		t.Fatalf("abort report %+v", ab.Report)
	}
	// Status over MQTT: ready, nothing open.
	st := a.must(map[string]any{"op": "status"})
	var full supervisor.Status
	if err := json.Unmarshal(st.Status, &full); err != nil || !full.Ready || len(full.OpenSagas) != 0 {
		t.Fatalf("status %s (%v)", st.Status, err)
	}
}

// A controller that dies mid-saga: its lease runs out and the supervisor
// unwinds its saga; the retained state topics show the priors again.
func TestControllerDeathUnwinds(t *testing.T) {
	d := startDaemon(t, t.TempDir(), nil)
	watcher := newAgent(t, d, "watcher")
	a := newAgent(t, d, "planner")
	const ttl = 300 * time.Millisecond
	a.hello(int(ttl / time.Millisecond))
	saga := a.must(map[string]any{"op": "begin"}).Saga
	a.must(map[string]any{"op": "step", "saga": saga, "actuator": "base", "value": 45})
	a.must(map[string]any{"op": "step", "saga": saga, "actuator": "shoulder", "value": 60})
	waitFor(t, "the steps on the state topics", 5*time.Second, func() bool { v, _ := watcher.state("shoulder"); return v == 60 })
	// The controller stops heartbeating (it hung): no will, only expiry.
	died := time.Now()
	waitFor(t, "unwind after lease expiry", 5*time.Second, func() bool {
		b, _ := watcher.state("base")
		s, _ := watcher.state("shoulder")
		return b == 0 && s == 10
	})
	took := time.Since(died)
	t.Logf("controller death → actuators at priors: %v (lease TTL %v)", took, ttl)
	if r := a.send(map[string]any{"op": "step", "saga": saga, "actuator": "base", "value": 5}); r.Code != "LEASE_EXPIRED" {
		t.Fatalf("a command under the expired lease: %+v", r)
	}
	// The world agrees with the retained state.
	w := d.built.World.Snapshot()
	if w["base"].Commanded != 0 || w["shoulder"].Commanded != 10 {
		t.Fatalf("world after unwind: %+v", w)
	}
}

// An agent whose connection dies: its MQTT will ends the lease at once,
// long before the TTL, and its saga is unwound.
func TestAgentWillEndsLease(t *testing.T) {
	d := startDaemon(t, t.TempDir(), nil)
	watcher := newAgent(t, d, "watcher")
	conn := connectWithWill(t, d.broker.Addr(), "planner-link", d.topics.Will("planner"))
	a := newAgent(t, d, "planner")
	a.hello(60000)
	saga := a.must(map[string]any{"op": "begin"}).Saga
	a.must(map[string]any{"op": "step", "saga": saga, "actuator": "elbow", "value": 100})
	waitFor(t, "elbow at 100", 5*time.Second, func() bool { v, _ := watcher.state("elbow"); return v == 100 })
	died := time.Now()
	conn.Close() // no DISCONNECT: the broker publishes the will
	waitFor(t, "unwind on the agent's will", 5*time.Second, func() bool { v, _ := watcher.state("elbow"); return v == 20 })
	t.Logf("will → elbow back at its prior: %v (lease TTL 60s)", time.Since(died))
	if r := a.send(map[string]any{"op": "heartbeat"}); r.Code != "LEASE_EXPIRED" {
		t.Fatalf("heartbeat after the will: %+v", r)
	}
}

// connectWithWill opens a raw MQTT 3.1.1 connection that carries a will, so
// a test can drop it the way a crashed process would: without DISCONNECT.
func connectWithWill(t *testing.T, addr, clientID, willTopic string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	str := func(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }
	var body []byte
	body = append(body, str("MQTT")...)
	body = append(body, 4, 0x04|0x08|0x02, 0, 60) // level 4; will, will QoS 1, clean session; keepalive 60 s
	body = append(body, str(clientID)...)
	body = append(body, str(willTopic)...)
	body = append(body, str("gone")...)
	pkt := append([]byte{0x10, byte(len(body))}, body...)
	if _, err := conn.Write(pkt); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 4)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conn, ack); err != nil || ack[0] != 0x20 || ack[3] != 0 {
		t.Fatalf("CONNACK %x: %v", ack, err)
	}
	return conn
}
