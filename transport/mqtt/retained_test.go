package mqtt

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// doneToken is a paho token that has completed.
type doneToken struct{}

func (doneToken) Wait() bool                     { return true }
func (doneToken) WaitTimeout(time.Duration) bool { return true }
func (doneToken) Done() <-chan struct{}          { c := make(chan struct{}); close(c); return c }
func (doneToken) Error() error                   { return nil }

// gateClient is a connected paho client that records what is published
// to it, in order, and can hold one Publish call until released.
type gateClient struct {
	paho.Client
	mu       sync.Mutex
	sent     []fakeMsg
	armed    bool
	held     chan struct{} // closed when the gated call arrives
	released chan struct{}
}

func (c *gateClient) IsConnected() bool      { return true }
func (c *gateClient) Disconnect(uint)        {}
func (c *gateClient) IsConnectionOpen() bool { return true }
func (c *gateClient) SubscribeMultiple(map[string]byte, paho.MessageHandler) paho.Token {
	return doneToken{}
}

func (c *gateClient) Publish(topic string, _ byte, retained bool, payload any) paho.Token {
	c.mu.Lock()
	gate := c.armed
	c.armed = false
	c.mu.Unlock()
	if gate {
		close(c.held)
		<-c.released
	}
	c.mu.Lock()
	c.sent = append(c.sent, fakeMsg{topic: topic, payload: string(payload.([]byte)), retained: retained})
	c.mu.Unlock()
	return doneToken{}
}

// lastStatus is the last status published, and how many were.
func (c *gateClient) lastStatus(t *testing.T, topic string) (api.Status, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var last api.Status
	n := 0
	for _, m := range c.sent {
		if m.topic == topic {
			n++
			if err := json.Unmarshal([]byte(m.payload), &last); err != nil {
				t.Fatal(err)
			}
		}
	}
	return last, n
}

// TestReconnectNeverRepublishesAnOlderStatus: a reconnect republishes the
// retained topics while the supervisor publishes a newer status. The
// broker must be left with the newer one, even when the reconnect's
// snapshot, taken before the newer status on paho's goroutine, is sent
// after the publisher goroutine sent the newer one. Here the republish is
// held at its first Publish until the newer status has been set: the worst
// interleaving, made certain.
func TestReconnectNeverRepublishesAnOlderStatus(t *testing.T) {
	tr, err := NewTransport(TransportOptions{Broker: "tcp://127.0.0.1:1", ClientID: "sup", Topics: Topics{Device: "arm1"}})
	if err != nil {
		t.Fatal(err)
	}
	c := &gateClient{held: make(chan struct{}), released: make(chan struct{})}
	tr.client = c // before anything is queued: the publisher reads it after a receive
	defer tr.Close()
	topic := tr.opt.Topics.Status()

	tr.onConnect(c) // the first connection: the initial status is republished
	waitSent(t, c, topic, 1)
	tr.SetStatus(api.Status{Ready: false, Reasons: []string{"recovery has not finished"}})
	waitSent(t, c, topic, 2)
	old, _ := c.lastStatus(t, topic)

	// The connection returns; its republish is held at its first Publish
	// (the status, the only retained topic).
	c.mu.Lock()
	c.armed = true
	c.mu.Unlock()
	go tr.onConnect(c)
	<-c.held
	// Meanwhile the supervisor becomes ready.
	tr.SetStatus(api.Status{Ready: true})
	time.Sleep(50 * time.Millisecond) // let any other goroutine publish what it would
	close(c.released)
	waitSent(t, c, topic, 4)
	time.Sleep(50 * time.Millisecond) // and anything after that

	last, n := c.lastStatus(t, topic)
	if !last.Ready || last.Seq <= old.Seq {
		t.Errorf("after %d status publishes the broker holds %+v: older than the newest (ready, seq > %d)", n, last, old.Seq)
	}
	// Every status published carries a seq, and none goes back.
	c.mu.Lock()
	defer c.mu.Unlock()
	var prev uint64
	for _, m := range c.sent {
		var s api.Status
		json.Unmarshal([]byte(m.payload), &s)
		if s.Seq < prev {
			t.Errorf("status seq went back from %d to %d: %s", prev, s.Seq, m.payload)
		}
		prev = s.Seq
	}
}

func waitSent(t *testing.T, c *gateClient, topic string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, got := c.lastStatus(t, topic); got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d statuses published", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A connection's loss reported after the next connection is up and
// subscribed (paho reports losses on a goroutine of its own) leaves the
// transport up. Marking the new one down would leave the daemon not ready
// and its replies waiting for the link forever (a client-id takeover
// makes such a late report likely).
func TestLateLossOfAnOldConnection(t *testing.T) {
	tr, err := NewTransport(TransportOptions{Broker: "tcp://127.0.0.1:1", ClientID: "sup", Topics: Topics{Device: "arm1"}})
	if err != nil {
		t.Fatal(err)
	}
	c := &gateClient{held: make(chan struct{}), released: make(chan struct{})}
	tr.client = c
	defer tr.Close()
	tr.onConnect(c)
	tr.onEstopConnect(c)
	if err := tr.Ready(); err != nil {
		t.Fatalf("connected and subscribed: %v", err)
	}
	// The old connections' losses, reported late: the client is connected.
	tr.onLost("sup", c, errors.New("EOF"))
	tr.onLost("sup"+EstopSuffix, c, errors.New("EOF"))
	if err := tr.Ready(); err != nil {
		t.Fatalf("after a late loss report of an old connection: %v", err)
	}
	done := make(chan struct{})
	go func() { tr.waitLink(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the publisher waits for a link that is up")
	}
}
