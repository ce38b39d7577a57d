package bench

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// rssFlood is bench rss's flood through the daemon's broker: what any
// local client could do to it, all at once. rssFloodClients clients
// publish QoS 1 requests to their command topics as fast as the broker
// acknowledges them, rssFloodWindow unacknowledged each: status requests
// (answered with the whole status) and, one in rssBigEvery, an oversize
// payload the supervisor refuses only after the broker and the transport
// have carried it. rssIdleClients more connections are held open
// meanwhile, and one subscriber of every reply never reads its socket, so
// that the broker queues to it all it may.
type rssFlood struct {
	clients []paho.Client
	idle    []paho.Client
	slow    net.Conn

	sent, acked, replies atomic.Uint64
	stopCh               chan struct{}
	wg                   sync.WaitGroup
}

// startRSSFlood connects the flood's clients to the broker at url and
// starts publishing as agents (one after another, round robin).
func startRSSFlood(url string, topics mqtt.Topics, agents []string) (f *rssFlood, err error) {
	f = &rssFlood{stopCh: make(chan struct{})}
	defer func() {
		if err != nil {
			f.stop()
		}
	}()
	if f.slow, err = rawSubscriber(strings.TrimPrefix(url, "tcp://"), "rss-slow-reader", topics.Reply("+")); err != nil {
		return f, err
	}
	for i := range rssIdleClients {
		c, err := connect(url, login{clientID: fmt.Sprintf("rss-idle-%d", i)})
		if err != nil {
			return f, err
		}
		f.idle = append(f.idle, c)
	}
	big := []byte(strings.Repeat("x", rssBigBytes))
	for i := range rssFloodClients {
		name := agents[i%len(agents)]
		c, err := connect(url, login{clientID: fmt.Sprintf("rss-flood-%d", i)})
		if err != nil {
			return f, err
		}
		f.clients = append(f.clients, c)
		tok := c.Subscribe(topics.Reply(name), 1, func(paho.Client, paho.Message) { f.replies.Add(1) })
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			return f, fmt.Errorf("flood: subscribing %s: %s", topics.Reply(name), cli.ErrOr(tok.Error(), "timed out"))
		}
		f.wg.Add(1)
		go f.pump(c, topics.AgentCmd(name), name, i, big)
	}
	return f, nil
}

// pump publishes until stop, at most rssFloodWindow unacknowledged.
func (f *rssFlood) pump(c paho.Client, topic, name string, client int, big []byte) {
	defer f.wg.Done()
	window := make(chan struct{}, rssFloodWindow)
	var acks sync.WaitGroup
	defer acks.Wait()
	prefix := `{"agent":"` + name + `","op":"status","id":"rss-` + strconv.Itoa(client) + "-"
	for n := 0; ; n++ {
		select {
		case <-f.stopCh:
			return
		case window <- struct{}{}:
		}
		payload := big
		if n%rssBigEvery != 0 {
			payload = []byte(prefix + strconv.Itoa(n) + `"}`)
		}
		tok := c.Publish(topic, 1, false, payload)
		f.sent.Add(1)
		acks.Add(1)
		go func() {
			defer acks.Done()
			if tok.WaitTimeout(30*time.Second) && tok.Error() == nil {
				f.acked.Add(1)
			}
			<-window
		}()
	}
}

// stop ends the flood, disconnects every client and returns what it sent,
// what the broker acknowledged and the replies that came back.
func (f *rssFlood) stop() (sent, acked, replies uint64) {
	select {
	case <-f.stopCh:
	default:
		close(f.stopCh)
	}
	f.wg.Wait()
	for _, c := range append(f.clients, f.idle...) {
		c.Disconnect(100)
	}
	if f.slow != nil {
		f.slow.Close()
	}
	return f.sent.Load(), f.acked.Load(), f.replies.Load()
}

// rawSubscriber connects to addr as clientID over MQTT 3.1.1 written by
// hand, subscribes to filter at QoS 1 and then never reads: a client whose
// socket fills, so the broker queues to it all it may and drops the rest.
func rawSubscriber(addr, clientID, filter string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("flood: slow subscriber: %w", err)
	}
	str := func(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }
	packet := func(first byte, body []byte) []byte {
		// Remaining length, at most two bytes here (bodies < 16 KiB).
		if len(body) < 128 {
			return append([]byte{first, byte(len(body))}, body...)
		}
		return append([]byte{first, byte(len(body)&0x7f | 0x80), byte(len(body) >> 7)}, body...)
	}
	// CONNECT: protocol MQTT level 4, clean session, keepalive 0 (never
	// pinged: the broker must not drop it for silence).
	connectPacket := append(append(str("MQTT"), 4, 0x02, 0, 0), str(clientID)...)
	subscribePacket := append(append([]byte{0, 1}, str(filter)...), 1)
	if _, err := c.Write(append(packet(0x10, connectPacket), packet(0x82, subscribePacket)...)); err != nil {
		c.Close()
		return nil, fmt.Errorf("flood: slow subscriber: %w", err)
	}
	// CONNACK and SUBACK: read them, then nothing more.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	ack := make([]byte, 4+5)
	if _, err := io.ReadFull(c, ack); err != nil {
		c.Close()
		return nil, fmt.Errorf("flood: slow subscriber: no CONNACK and SUBACK: %w", err)
	}
	if ack[0] != 0x20 || ack[3] != 0 || ack[4] != 0x90 || ack[8] > 2 {
		c.Close()
		return nil, fmt.Errorf("flood: slow subscriber: refused (% x)", ack)
	}
	return c, nil
}
