package supervisor_test

import (
	"encoding/json"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

func TestSagaOverMQTT(t *testing.T) {
	d := daemontest.Start(t, "", nil)
	a := daemontest.NewAgent(t, d.URL(), d.Topics, "planner")
	a.Hello(5 * time.Second)
	saga := a.Must(map[string]any{"op": "begin"}).Saga
	r := a.Must(map[string]any{"op": "step", "saga": saga, "actuator": "base", "value": 45})
	if r.Step != 1 || *r.Prior != 0 || *r.Value != 45 {
		t.Fatalf("step reply %+v", r)
	}
	if r := a.Send(map[string]any{"op": "step", "saga": saga, "actuator": "elbow", "value": 170}); r.Code != "LIMIT_MAX" {
		t.Fatalf("over-limit step: %+v", r)
	}
	a.Must(map[string]any{"op": "step", "saga": saga, "actuator": "elbow", "value": 90, "deadline_ms": 1000})
	a.Must(map[string]any{"op": "commit", "saga": saga})
	daemontest.WaitFor(t, "retained state elbow=90", 5*time.Second, func() bool { v, _ := a.State("elbow"); return v == 90 })

	// A second saga, aborted: the report comes back clean.
	saga = a.Must(map[string]any{"op": "begin"}).Saga
	a.Must(map[string]any{"op": "step", "saga": saga, "actuator": "shoulder", "value": 60})
	ab := a.Must(map[string]any{"op": "abort", "saga": saga, "reason": "changed my mind"})
	if ab.Report == nil || ab.Report.Verdict != "clean" {
		t.Fatalf("abort report %+v", ab.Report)
	}
	// Status over MQTT: ready, nothing open.
	st := a.Must(map[string]any{"op": "status"})
	var full supervisor.Status
	if err := json.Unmarshal(st.Status, &full); err != nil || !full.Ready || len(full.OpenSagas) != 0 {
		t.Fatalf("status %s (%v)", st.Status, err)
	}
}

// A controller that dies mid-saga: its lease runs out and the supervisor
// unwinds its saga; the retained state topics show the priors again.
func TestControllerDeathUnwinds(t *testing.T) {
	d := daemontest.Start(t, "", nil)
	watcher := daemontest.NewAgent(t, d.URL(), d.Topics, "watcher")
	a := daemontest.NewAgent(t, d.URL(), d.Topics, "planner")
	const ttl = 300 * time.Millisecond
	a.Hello(ttl)
	saga := a.Must(map[string]any{"op": "begin"}).Saga
	a.Must(map[string]any{"op": "step", "saga": saga, "actuator": "base", "value": 45})
	a.Must(map[string]any{"op": "step", "saga": saga, "actuator": "shoulder", "value": 60})
	daemontest.WaitFor(t, "the steps on the state topics", 5*time.Second, func() bool { v, _ := watcher.State("shoulder"); return v == 60 })
	// The controller stops heartbeating (it hung): no will, only expiry.
	died := time.Now()
	daemontest.WaitFor(t, "unwind after lease expiry", 5*time.Second, func() bool {
		b, _ := watcher.State("base")
		s, _ := watcher.State("shoulder")
		return b == 0 && s == 10
	})
	t.Logf("controller death → actuators at priors: %v (lease TTL %v)", time.Since(died), ttl)
	if r := a.Send(map[string]any{"op": "step", "saga": saga, "actuator": "base", "value": 5}); r.Code != "LEASE_EXPIRED" {
		t.Fatalf("a command under the expired lease: %+v", r)
	}
	// The world agrees with the retained state.
	w := d.Built.World.Snapshot()
	if w["base"].Commanded != 0 || w["shoulder"].Commanded != 10 {
		t.Fatalf("world after unwind: %+v", w)
	}
}

// An agent whose connection dies: its MQTT will ends the lease at once,
// long before the TTL, and its saga is unwound.
func TestAgentWillEndsLease(t *testing.T) {
	d := daemontest.Start(t, "", nil)
	watcher := daemontest.NewAgent(t, d.URL(), d.Topics, "watcher")
	conn := connectWithWill(t, d.Broker.Addr(), "planner-link", d.Topics.Will("planner"))
	a := daemontest.NewAgent(t, d.URL(), d.Topics, "planner")
	a.Hello(60 * time.Second)
	saga := a.Must(map[string]any{"op": "begin"}).Saga
	a.Must(map[string]any{"op": "step", "saga": saga, "actuator": "elbow", "value": 100})
	daemontest.WaitFor(t, "elbow at 100", 5*time.Second, func() bool { v, _ := watcher.State("elbow"); return v == 100 })
	died := time.Now()
	conn.Close() // no DISCONNECT: the broker publishes the will
	daemontest.WaitFor(t, "unwind on the agent's will", 5*time.Second, func() bool { v, _ := watcher.State("elbow"); return v == 20 })
	t.Logf("will → elbow back at its prior: %v (lease TTL 60s)", time.Since(died))
	if r := a.Send(map[string]any{"op": "heartbeat"}); r.Code != "LEASE_EXPIRED" {
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

// On its own topic cmd/<agent> an agent speaks only for itself: a request
// naming another agent is refused, and the victim's lease is untouched.
func TestAgentTopicBindsTheAgent(t *testing.T) {
	d := daemontest.Start(t, "", nil)
	victim := daemontest.NewAgent(t, d.URL(), d.Topics, "victim")
	victim.Hello(60 * time.Second)
	mallory := daemontest.NewAgent(t, d.URL(), d.Topics, "mallory")
	r, ok := mallory.SendRaw(d.Topics.AgentCmd("mallory"), false,
		map[string]any{"agent": "victim", "op": "bye", "lease": victim.Lease, "epoch": victim.Epoch}, 5*time.Second)
	if !ok || r.Code != "BAD_REQUEST" {
		t.Fatalf("a request naming another agent on cmd/mallory: %+v (replied %v)", r, ok)
	}
	victim.Must(map[string]any{"op": "heartbeat"}) // still holds its lease
}

// A retained request is delivered again to every new subscription — a
// restarted supervisor would find it — and must never be acted on then.
func TestRetainedRequestIsNotReplayed(t *testing.T) {
	d := daemontest.Start(t, "", nil)
	a := daemontest.NewAgent(t, d.URL(), d.Topics, "planner")
	var mu sync.Mutex
	var replies []string // the ids of the replies seen
	spy := paho.NewClient(paho.NewClientOptions().AddBroker(d.URL()).SetClientID("spy"))
	if tok := spy.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer spy.Disconnect(0)
	spy.Subscribe(d.Topics.Reply("planner"), 1, func(_ paho.Client, m paho.Message) {
		var r struct{ ID string }
		json.Unmarshal(m.Payload(), &r)
		mu.Lock()
		replies = append(replies, r.ID)
		mu.Unlock()
	}).WaitTimeout(5 * time.Second)
	// Live, the broker delivers it as any other message (MQTT clears the
	// retain flag for existing subscribers): it is answered once.
	live, ok := a.SendRaw(d.Topics.Cmd(), true, map[string]any{"agent": "planner", "op": "status"}, 5*time.Second)
	if !ok {
		t.Fatal("no reply to the live request")
	}
	// A new subscription (the supervisor's transport reconnecting) gets it
	// again, flagged retained: it is dropped.
	d.Transport.Close()
	tr, err := mqtt.StartTransport(mqtt.TransportOptions{Broker: d.URL(), ClientID: "saga-supervisor-test-2", Topics: d.Topics}, d.Sup)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	// A request sent now, on the same topic by the same agent, comes after
	// the replayed one and is served after it (an agent's requests are
	// served in order): once its reply is seen, a reply to the replayed
	// one would have been too. (A fixed wait instead would let a slow
	// machine pass a supervisor that does act on it.)
	after, ok := a.SendRaw(d.Topics.Cmd(), false, map[string]any{"agent": "planner", "op": "status"}, 5*time.Second)
	if !ok {
		t.Fatal("no reply from the new subscription")
	}
	daemontest.WaitFor(t, "the reply to the request after the replay", 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(replies, after.ID)
	})
	mu.Lock()
	defer mu.Unlock()
	if want := []string{live.ID, after.ID}; !slices.Equal(replies, want) {
		t.Fatalf("replies %v, want %v: the retained request was replayed to the new subscription", replies, want)
	}
}

// The e-stop topics halt whatever their payload; a halt request on an
// agent's own e-stop topic is answered on its reply topic; a retained
// message replayed to a new subscription is ignored (it would halt again
// at every reconnect).
func TestEstopTopicHalts(t *testing.T) {
	d := daemontest.Start(t, "", nil)
	a := daemontest.NewAgent(t, d.URL(), d.Topics, "planner")
	halted := func() bool { h, _ := d.Sup.Engine().Halted(); return h }
	reset := func() {
		t.Helper()
		d.Sup.Engine().WaitHalts()
		if err := d.Sup.Reset(daemontest.Token, "test"); err != nil {
			t.Fatalf("reset: %v", err)
		}
	}

	// Any payload on the shared topic halts — here a retained one, which
	// a live subscription receives as a plain message.
	a.C.Publish(d.Topics.Estop(), 1, true, []byte("STOP")).Wait()
	daemontest.WaitFor(t, "the e-stop topic to halt", 5*time.Second, halted)
	if _, why := d.Sup.Engine().Halted(); why != "mqtt e-stop topic: e-stop topic" {
		t.Fatalf("halt reason %q", why)
	}
	reset()

	// A new subscription (a reconnect) gets the retained message replayed,
	// flagged retained: ignored. Then a halt request on the agent's own
	// topic halts — the first halt since the reset — and is answered.
	tr, err := mqtt.StartTransport(mqtt.TransportOptions{Broker: d.URL(), ClientID: "second", Topics: d.Topics}, d.Sup)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	rep, ok := a.SendRaw(d.Topics.EstopAgent("planner"), false, map[string]any{"agent": "planner", "op": "halt", "reason": "person in the cell"}, 5*time.Second)
	if !ok || !rep.OK {
		t.Fatalf("halt on estop/planner: %+v (answered %v)", rep, ok)
	}
	daemontest.WaitFor(t, "the halt", 5*time.Second, halted)
	if _, why := d.Sup.Engine().Halted(); why != "agent planner: person in the cell" {
		t.Fatalf("halt reason %q: the retained e-stop message was acted on again", why)
	}
	a.C.Publish(d.Topics.Estop(), 1, true, nil).Wait() // clear the retained message
}

// The report of a 700-step abort is far larger than the broker's packet
// limit. Published whole, it would be refused by the embedded broker, which
// drops the connection: the reply would never come, and the supervisor
// would reconnect into the same refusal. So it is summarised to fit, with
// the verdict and bucket counts of every step.
func TestLargeReportFitsTheBroker(t *testing.T) {
	d := daemontest.Start(t, "", func(c *config.Config) {
		c.MQTT.MaxPayload = 16 << 10
		c.Agents.Rate = 100000 // a fast disk serves one agent faster than the default rate
	})
	a := daemontest.NewAgent(t, d.URL(), d.Topics, "planner")
	a.Hello(30 * time.Second)
	saga := a.Must(map[string]any{"op": "begin"}).Saga
	const steps = 700
	for i := range steps {
		a.Must(map[string]any{"op": "step", "saga": saga, "actuator": "base", "value": float64(i%2*10 + 1)})
	}
	rep := a.Must(map[string]any{"op": "abort", "saga": saga})
	r := rep.Report
	if r == nil || !r.Truncated || r.StepsTotal != steps || r.Buckets["compensated"] != steps || r.Verdict != "clean" {
		t.Fatalf("abort report: %+v", r)
	}
	// The connection survived: the next request is answered at once.
	a.Must(map[string]any{"op": "status"})
	if n := d.Transport.TooLarge(); n != 0 {
		t.Fatalf("%d messages did not fit", n)
	}
}

// A will ends only the lease of the connection it belongs to: a hello that
// names its will ("will") is ended by that will alone. A late will of an
// earlier process of the same agent ends nothing: it must not end the
// live lease and unwind its saga. (A retained will is ignored by the
// transport: transport/mqtt's TestWillPayloadAndRetainedWill.)
func TestStaleWillEndsNoLease(t *testing.T) {
	d := daemontest.Start(t, "", nil)
	watcher := daemontest.NewAgent(t, d.URL(), d.Topics, "watcher")
	a := daemontest.NewAgent(t, d.URL(), d.Topics, "planner")
	r := a.Must(map[string]any{"op": "hello", "ttl_ms": 60000, "will": "w-now"})
	a.Lease, a.Epoch = r.Lease, r.Epoch
	saga := a.Must(map[string]any{"op": "begin"}).Saga
	a.Must(map[string]any{"op": "step", "saga": saga, "actuator": "elbow", "value": 100})
	daemontest.WaitFor(t, "elbow at 100", 5*time.Second, func() bool { v, _ := watcher.State("elbow"); return v == 100 })

	forger := daemontest.NewAgent(t, d.URL(), d.Topics, "forger")
	pub := func(payload string) {
		t.Helper()
		if tok := forger.C.Publish(d.Topics.Will("planner"), 1, false, payload); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	pub("w-earlier") // an earlier connection's will, arriving late
	pub("gone")
	time.Sleep(300 * time.Millisecond)
	if r := a.Send(map[string]any{"op": "heartbeat"}); !r.OK {
		t.Fatalf("a stale will ended the lease: heartbeat %+v", r)
	}
	if v, _ := watcher.State("elbow"); v != 100 {
		t.Fatalf("elbow %v: the saga was unwound by a stale will", v)
	}
	pub("w-now")
	daemontest.WaitFor(t, "unwind on the agent's own will", 5*time.Second, func() bool { v, _ := watcher.State("elbow"); return v == 20 })
}
