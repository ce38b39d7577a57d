package embedded

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

const paceFilter = "saga/v1/arm1/cmd/+"

// slowSubscriber subscribes to paceFilter at QoS 1 and acknowledges
// nothing until open is closed: a supervisor that has fallen behind.
type slowSubscriber struct {
	open  chan struct{}
	got   chan string // payloads of messages from topic other
	other string
	n     atomic.Int64 // messages received, all topics
}

func newSlowSubscriber(t *testing.T, b *Broker, other string) *slowSubscriber {
	t.Helper()
	s := &slowSubscriber{open: make(chan struct{}), got: make(chan string, 64), other: other}
	c := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID("sup"))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(0) })
	tok := c.Subscribe(paceFilter, 1, func(_ paho.Client, m paho.Message) {
		<-s.open
		s.n.Add(1)
		if m.Topic() == s.other {
			s.got <- string(m.Payload())
		}
	})
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	return s
}

func dial(t *testing.T, b *Broker, id string) paho.Client {
	t.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID(id))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("%s: connect: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c
}

// inflight is how many QoS 1 messages the broker holds for client id.
func inflight(b *Broker, id string) int {
	cl, ok := b.srv.Clients.Get(id)
	if !ok {
		return 0
	}
	return cl.State.Inflight.Len()
}

// A flood from one client does not crowd another client's messages out of
// a slow subscriber's queue. Unpaced, an agent flooding steps fills the
// supervisor's in-flight queue on the embedded broker (1024 messages),
// mochi drops every message beyond it, and another agent's heartbeats may
// be among them: its lease expires while it heartbeats on time. On a paced
// topic the flooder waits for the queue to drain, rather than anyone's
// message being dropped.
func TestFloodDoesNotCrowdOutOthers(t *testing.T) {
	b, err := StartOptions(Options{Addr: "127.0.0.1:0", Paced: []string{paceFilter}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const other = "saga/v1/arm1/cmd/a02"
	sup := newSlowSubscriber(t, b, other)
	flooder, agent := dial(t, b, "a01"), dial(t, b, "a02")

	const flood = 3000
	go func() {
		for i := range flood {
			flooder.Publish("saga/v1/arm1/cmd/a01", 1, false, fmt.Sprintf(`{"id":"f-%d","op":"step"}`, i))
		}
	}()
	// The subscriber is congested: its queue is full (before pacing) or
	// the flooder waits (with it).
	deadline := time.Now().Add(20 * time.Second)
	for inflight(b, "sup") < DefaultMaxInflight && b.Stats().Paced == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the subscriber never became congested: %d in flight", inflight(b, "sup"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	const mine = 5
	for i := range mine {
		agent.Publish(other, 1, false, fmt.Sprintf(`{"id":"a-%d","op":"heartbeat"}`, i))
	}
	time.Sleep(100 * time.Millisecond) // the agent's messages reach the broker while congested
	close(sup.open)
	var got []string
	for len(got) < mine {
		select {
		case p := <-sup.got:
			got = append(got, p)
		case <-time.After(15 * time.Second):
			t.Fatalf("the other client's messages delivered: %d of %d %v; the broker dropped %d; %d messages received in all",
				len(got), mine, got, b.Stats().Dropped, sup.n.Load())
		}
	}
	for i, p := range got {
		if want := fmt.Sprintf(`"a-%d"`, i); !strings.Contains(p, want) {
			t.Errorf("message %d from the other client is %s, want id %s: out of order", i, p, want)
		}
	}
	// The flood arrives whole too: it waited, it was not dropped.
	for deadline := time.Now().Add(30 * time.Second); sup.n.Load() < flood+mine; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages delivered; the broker dropped %d", sup.n.Load(), flood+mine, b.Stats().Dropped)
		}
	}
	if st := b.Stats(); st.Dropped != 0 || st.Paced == 0 {
		t.Errorf("stats %+v: want nothing dropped and the flood paced", st)
	}
}

// A message Urgent says must not wait (a halt) passes a congested
// subscriber's queue at once; any other waits for it to drain.
func TestUrgentIsNotPaced(t *testing.T) {
	b, err := StartOptions(Options{Addr: "127.0.0.1:0", Paced: []string{paceFilter}, PaceAt: 4, PaceWait: time.Minute,
		Urgent: func(p []byte) bool { return strings.Contains(string(p), "halt") }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const other = "saga/v1/arm1/cmd/a02"
	sup := newSlowSubscriber(t, b, other)
	defer close(sup.open)
	filler, agent := dial(t, b, "a01"), dial(t, b, "a02")
	for i := range 4 {
		if tok := filler.Publish("saga/v1/arm1/cmd/a01", 1, false, fmt.Sprintf("step %d", i)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d below the pace mark: %v", i, tok.Error())
		}
	}
	for deadline := time.Now().Add(10 * time.Second); inflight(b, "sup") < 4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d in flight, want 4", inflight(b, "sup"))
		}
	}
	// Congested: a step waits (for a minute, PaceWait); a halt does not.
	step := agent.Publish(other, 1, false, "step")
	halt := filler.Publish("saga/v1/arm1/cmd/a01", 1, false, `{"op":"halt"}`)
	if !halt.WaitTimeout(10*time.Second) || halt.Error() != nil {
		t.Fatalf("a halt waited behind a congested subscriber: %v", halt.Error())
	}
	if step.WaitTimeout(200 * time.Millisecond) {
		t.Errorf("a step was not paced behind a congested subscriber")
	}
	if st := b.Stats(); st.Dropped != 0 {
		t.Errorf("stats %+v: nothing should be dropped", st)
	}
}

// Publishes on topics not paced never wait: the supervisor's replies to an
// agent that does not read must not hold up its replies to everyone else.
func TestUnpacedTopicsDoNotWait(t *testing.T) {
	b, err := StartOptions(Options{Addr: "127.0.0.1:0", Paced: []string{paceFilter}, PaceAt: 1, PaceWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	open := make(chan struct{})
	defer close(open)
	reader := dial(t, b, "slow-agent")
	if tok := reader.Subscribe("saga/v1/arm1/reply/slow-agent", 1, func(paho.Client, paho.Message) { <-open }); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	sup := dial(t, b, "saga-supervisor-arm1")
	for i := range 10 {
		if tok := sup.Publish("saga/v1/arm1/reply/slow-agent", 1, false, fmt.Sprint(i)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("reply %d to a congested reader waited: %v", i, tok.Error())
		}
	}
	if st := b.Stats(); st.Paced != 0 {
		t.Errorf("stats %+v: a topic not paced was paced", st)
	}
}

func TestFilterMatches(t *testing.T) {
	for _, tt := range []struct {
		filter, topic string
		want          bool
	}{
		{"a/b", "a/b", true},
		{"a/b", "a/c", false},
		{"a/+", "a/b", true},
		{"a/+", "a/b/c", false},
		{"a/+", "a", false},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"#", "a/b", true},
		{"#", "$SYS/x", false},
		{"+/b", "$SYS/b", false},
		{"a/+/c", "a/b/c", true},
		{"a/+/c", "a//c", true},
		{"a/b", "a/b/", false},
	} {
		if got := filterMatches(tt.filter, tt.topic); got != tt.want {
			t.Errorf("filterMatches(%q, %q) = %v, want %v", tt.filter, tt.topic, got, tt.want)
		}
	}
}

// With PacedFor naming the supervisor, another subscriber of the command
// topics that never acknowledges only loses its own messages: commands do
// not wait for it. (Without a policy anyone may subscribe there; such a
// reader made every command wait the full PaceWait.)
func TestOnlyTheNamedSubscriberPaces(t *testing.T) {
	b, err := StartOptions(Options{Addr: "127.0.0.1:0", Paced: []string{paceFilter}, PacedFor: []string{"supervisor"}, PaceAt: 1, PaceWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lurker := newSlowSubscriber(t, b, "") // client id "sup": not the one named
	defer close(lurker.open)
	agent := dial(t, b, "a01")
	for i := range 10 {
		if tok := agent.Publish("saga/v1/arm1/cmd/a01", 1, false, fmt.Sprint(i)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("command %d waited for a subscriber that is not the supervisor: %v", i, tok.Error())
		}
	}
	if st := b.Stats(); st.Paced != 0 {
		t.Errorf("stats %+v: paced for a subscriber not named", st)
	}
}

// With PaceRate, a publisher past its burst waits for its tokens at the
// broker; another publisher has a bucket of its own and does not wait
// for it, and an urgent publish (a halt) never waits.
func TestPaceRateHoldsOnlyTheFlooder(t *testing.T) {
	b, err := StartOptions(Options{Addr: "127.0.0.1:0", Paced: []string{paceFilter}, PaceRate: 5, PaceBurst: 2,
		Urgent: func(p []byte) bool { return string(p) == "halt" }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub := dial(t, b, "sup")
	if tok := sub.Subscribe(paceFilter, 1, func(paho.Client, paho.Message) {}); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	publish := func(c paho.Client, topic, payload string, n int) {
		t.Helper()
		var toks []paho.Token
		for range n {
			toks = append(toks, c.Publish(topic, 1, false, payload))
		}
		for _, tok := range toks {
			if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("publish: %v", tok.Error())
			}
		}
	}
	flooder, other := dial(t, b, "a01"), dial(t, b, "a02")
	publish(flooder, "saga/v1/arm1/cmd/a01", "step", 6)
	waits := b.Stats().RateWaits
	if waits == 0 {
		t.Fatal("6 publishes at once past a burst of 2: none waited for its rate")
	}
	publish(flooder, "saga/v1/arm1/cmd/a01", "halt", 3)
	publish(other, "saga/v1/arm1/cmd/a02", "step", 2)
	if got := b.Stats().RateWaits; got != waits {
		t.Errorf("a halt, or another publisher within its burst, waited for a rate: %d waits, want %d", got, waits)
	}
}

// Reroute moves a publish to the topic it names before it is routed, and
// never a retained one (a retained halt would be stored on the e-stop
// topic and replayed to each new subscription).
func TestReroute(t *testing.T) {
	const cmd, estop = "saga/v1/arm1/cmd/a01", "saga/v1/arm1/estop/a01"
	b, err := StartOptions(Options{Addr: "127.0.0.1:0", Reroute: func(topic string, payload []byte) string {
		if topic == cmd && string(payload) == "halt" {
			return estop
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := make(chan string, 8)
	sub := dial(t, b, "sup")
	for _, f := range []string{cmd, estop} {
		if tok := sub.Subscribe(f, 1, func(_ paho.Client, m paho.Message) {
			got <- fmt.Sprintf("%s %s retained=%t", m.Topic(), m.Payload(), m.Retained())
		}); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("subscribe: %v", tok.Error())
		}
	}
	pub := dial(t, b, "a01")
	for _, p := range []struct {
		payload string
		retain  bool
		want    string
	}{
		{"step", false, cmd + " step retained=false"},
		{"halt", false, estop + " halt retained=false"},
		{"halt", true, cmd + " halt retained=false"}, // a subscriber already there gets it unflagged
	} {
		if tok := pub.Publish(cmd, 1, p.retain, p.payload); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
		select {
		case g := <-got:
			if g != p.want {
				t.Errorf("published %q (retain %t) on %s: got %q, want %q", p.payload, p.retain, cmd, g, p.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("published %q: nothing delivered", p.payload)
		}
	}
	if n := b.Stats().Rerouted; n != 1 {
		t.Errorf("Stats().Rerouted = %d, want 1", n)
	}
}
