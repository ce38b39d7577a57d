package mqtt

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// ackClient is a connected paho client that stores each QoS 1 publish in
// the transport's session store, as paho does, and leaves it there until
// the test acknowledges it (as the broker's PUBACK would).
type ackClient struct {
	paho.Client
	store *copyingStore
	mu    sync.Mutex
	next  uint16
	sent  []fakeMsg
	ids   map[string][]uint16 // topic → ids of its publishes, in order
}

type idToken struct {
	doneToken
	id uint16
}

func (t idToken) MessageID() uint16 { return t.id }

func (c *ackClient) IsConnected() bool      { return true }
func (c *ackClient) Disconnect(uint)        {}
func (c *ackClient) IsConnectionOpen() bool { return true }
func (c *ackClient) SubscribeMultiple(map[string]byte, paho.MessageHandler) paho.Token {
	return doneToken{}
}

func (c *ackClient) Publish(topic string, qos byte, retained bool, payload any) paho.Token {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, fakeMsg{topic: topic, payload: string(payload.([]byte)), retained: retained})
	if qos == 0 {
		return doneToken{}
	}
	c.next++
	p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	p.TopicName, p.Qos, p.MessageID, p.Payload = topic, qos, c.next, payload.([]byte)
	c.store.Put("o."+strconv.Itoa(int(c.next)), p)
	if c.ids == nil {
		c.ids = map[string][]uint16{}
	}
	c.ids[topic] = append(c.ids[topic], c.next)
	return idToken{id: c.next}
}

// ack acknowledges the i-th publish (0-based) to topic.
func (c *ackClient) ack(topic string, i int) {
	c.mu.Lock()
	id := c.ids[topic][i]
	c.mu.Unlock()
	c.store.Del("o." + strconv.Itoa(int(id)))
}

// count is how many messages to topic were handed to the client.
func (c *ackClient) count(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids[topic])
}

// waitFor waits up to 5 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s", what)
		}
	}
}

func waitCount(t *testing.T, c *ackClient, topic string, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); c.count(topic) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d messages to %s handed to the client, want %d", c.count(topic), topic, n)
		}
	}
}

// An agent's next reply is handed to the client only once the broker has
// acknowledged the one before it; another agent's replies do not wait for
// it. With several in flight, a lost connection reordered them: paho
// resends the unacknowledged ones on reconnect while a Publish call caught
// by the loss is written by the new connection, racing the resend (issue
// 13: hb-12's reply before hb-11's after SIGSTOP and SIGCONT).
func TestRepliesWaitForTheOneBefore(t *testing.T) {
	tr, err := NewTransport(TransportOptions{Broker: "tcp://127.0.0.1:1", ClientID: "sup", Topics: Topics{Device: "arm1"}})
	if err != nil {
		t.Fatal(err)
	}
	c := &ackClient{store: tr.store}
	tr.client = c
	defer tr.Close()
	tr.onConnect(c)

	a, b := tr.opt.Topics.Reply("a"), tr.opt.Topics.Reply("b")
	for i := range 3 {
		tr.reply("a", api.Reply{ID: fmt.Sprintf("a-%d", i), OK: true}, false)
	}
	tr.reply("b", api.Reply{ID: "b-0", OK: true}, false)
	waitCount(t, c, a, 1)
	waitCount(t, c, b, 1) // b is not held up by a's backlog
	time.Sleep(50 * time.Millisecond)
	if n := c.count(a); n != 1 {
		t.Fatalf("%d replies to a in flight, want 1: the next must wait for the acknowledgement", n)
	}
	c.ack(a, 0)
	waitCount(t, c, a, 2)
	time.Sleep(50 * time.Millisecond)
	if n := c.count(a); n != 2 {
		t.Fatalf("%d replies to a handed over after one acknowledgement, want 2", n)
	}
	c.ack(a, 1)
	waitCount(t, c, a, 3)

	// In the order queued.
	c.mu.Lock()
	defer c.mu.Unlock()
	var got []string
	for _, m := range c.sent {
		if m.topic == a {
			got = append(got, m.payload)
		}
	}
	for i, p := range got {
		if want := fmt.Sprintf(`"id":"a-%d"`, i); !contains(p, want) {
			t.Errorf("reply %d to a is %s, want %s", i, p, want)
		}
	}
}

// When an agent's replies back up (it floods faster than the broker takes
// them one at a time), its refusals of the flood give way; the replies to
// requests that were served are all kept.
func TestBackedUpRefusalsGiveWay(t *testing.T) {
	tr, err := NewTransport(TransportOptions{Broker: "tcp://127.0.0.1:1", ClientID: "sup", Topics: Topics{Device: "arm1"}, QueueLen: 512})
	if err != nil {
		t.Fatal(err)
	}
	c := &ackClient{store: tr.store}
	tr.client = c
	defer tr.Close()
	tr.onConnect(c)
	a := tr.opt.Topics.Reply("a")
	tr.reply("a", api.Reply{ID: "first", OK: true}, false)
	waitCount(t, c, a, 1)
	const served, refused = 100, 1000
	// What is tested is the lanes' choice, not the queue in front of them:
	// that one drops whatever finds it full. The replies are put no faster
	// than the publisher takes them into the lanes, which a slow machine
	// (qemu, a Pi Zero) may not do as fast as this loop puts them.
	put := func(rep api.Reply) {
		waitFor(t, "the publisher to take a reply", func() bool { return len(tr.out) < cap(tr.out)-1 })
		tr.reply("a", rep, false)
	}
	for i := range refused {
		if i%10 == 0 {
			put(api.Reply{ID: fmt.Sprintf("ok-%d", i/10), OK: true})
		}
		put(api.ErrorReply(fmt.Sprintf("r-%d", i), &api.Error{Code: api.CodeRateLimited, Message: "over the rate"}))
	}
	waitFor(t, "the publisher to take them all", func() bool { return len(tr.out) == 0 })
	// Acknowledged one at a time until every reply was either handed to
	// the client or dropped: then none is left waiting.
	const total = 1 + served + refused
	for i := 0; c.count(a)+int(tr.Dropped()) < total; i++ {
		c.ack(a, i)
		waitFor(t, "the next reply, or the last dropped", func() bool { return c.count(a) >= i+2 || c.count(a)+int(tr.Dropped()) == total })
	}
	if tr.Dropped() > refused {
		t.Errorf("%d replies dropped, more than the %d refusals", tr.Dropped(), refused)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	oks, refusals := 0, 0
	for _, m := range c.sent {
		switch {
		case contains(m.payload, `"ok-`):
			oks++
		case contains(m.payload, `"r-`):
			refusals++
		}
	}
	if oks != served {
		t.Errorf("%d of %d served replies sent: a served reply gave way", oks, served)
	}
	if refusals == 1000 || tr.Dropped() == 0 {
		t.Errorf("%d refusals sent, %d dropped: the backlog was not bounded", refusals, tr.Dropped())
	}
	t.Logf("sent %d served replies and %d of 1000 refusals; %d dropped", oks, refusals, tr.Dropped())
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
