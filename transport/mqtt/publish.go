package mqtt

import (
	"slices"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// outbound is one message waiting to be published.
type outbound struct {
	topic     string
	retained  bool
	payload   []byte
	droppable bool // a refusal of a flood (RATE_LIMITED, BUSY): given up first when an agent's replies back up
}

// reply publishes rep to agent, or on the events topic when there is no
// agent to address.
//
// No message exceeds MaxPayload: a reply too large (the report of a long
// unwind, a status with many sagas) is summarised to fit. A broker refuses
// an oversized publish by dropping it or the connection; the supervisor
// would then reconnect and send it again, in a loop.
func (t *Transport) reply(agent string, rep api.Reply, urgent bool) {
	if api.ValidName(agent) == nil {
		t.publishBounded(t.opt.Topics.Reply(agent), api.EncodeReplyMax(rep, t.opt.MaxPayload), urgent, floodRefusal(rep))
		return
	}
	t.publishBounded(t.opt.Topics.Events(), api.EncodeEventMax(api.Event{Kind: api.EventReply, Reply: &rep}, t.opt.MaxPayload), urgent, floodRefusal(rep))
}

// publishBounded publishes a payload a bounded encoder made; nil (nothing
// fits) is counted and logged instead.
func (t *Transport) publishBounded(topic string, b []byte, urgent, droppable bool) {
	if b == nil {
		t.tooLarge.Add(1)
		t.log.Error("mqtt: message does not fit max_payload even summarised: not published", "topic", topic, "max_payload", t.opt.MaxPayload)
		return
	}
	t.publish(topic, false, b, urgent, droppable)
}

// floodRefusal reports whether rep refuses a request for the agent's rate
// or queue: when its replies back up, those give way first.
func floodRefusal(rep api.Reply) bool {
	return !rep.OK && (rep.Code == api.CodeRateLimited || rep.Code == api.CodeBusy)
}

// TooLarge is how many messages could not be published because not even
// their summary fits MaxPayload.
func (t *Transport) TooLarge() uint64 { return t.tooLarge.Load() }

// publisher is the goroutine that hands queued messages to the client. The
// urgent queue (halt replies, the status) goes first: under a flood, the
// out queue carries thousands of refusals a second, and what a halt did
// must not wait behind them.
//
// Messages of the out queue (replies, events) are handed to the client one
// topic at a time: the next message to a topic only once the broker has
// acknowledged the one before (topicLanes). With more than one in flight, a
// lost connection would reorder them: paho resends the unacknowledged ones
// from its store on reconnect, while a Publish call that was waiting to be
// written when the connection went is written by the new connection's
// writer, racing the resend. Topics (agents) still go out side by side, so
// one agent's backlog never delays another's replies, and a reply waits one
// broker round trip at most behind the one before it.
func (t *Transport) publisher() {
	defer close(t.done)
	lanes := &topicLanes{t: t, lanes: map[string]*topicLane{}}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	urgent, out := t.urgent, t.out
	for urgent != nil || out != nil {
		var m outbound
		var ok bool
		select {
		case <-t.repub:
			m, ok = outbound{retained: true}, true // every retained topic
		case m, ok = <-urgent:
			if !ok {
				urgent = nil
				continue
			}
		default:
			select {
			case <-t.repub:
				m, ok = outbound{retained: true}, true
			case m, ok = <-urgent:
				if !ok {
					urgent = nil
					continue
				}
			case <-t.store.acked:
				lanes.advance(false)
				continue
			case <-tick.C:
				lanes.advance(true)
				continue
			case m, ok = <-out:
				if !ok {
					out = nil
					continue
				}
				lanes.put(m)
				continue
			}
		}
		t.send(m)
	}
	lanes.flush()
}

// send publishes one message if the client is connected; a retained topic
// is sent with its newest payload, whatever payload it was queued with. A
// repub marker sends every retained topic, in the order they were last
// published: a reader that subscribes meanwhile sees the actuators in the
// order they last changed. It returns the client's token of a message that
// is not retained (nil if none was sent).
func (t *Transport) send(m outbound) paho.Token {
	if !t.waitLink() {
		return nil
	}
	if !m.retained {
		return t.client.Publish(m.topic, t.qos(m.topic, false), false, m.payload)
	}
	t.mu.Lock()
	var msgs []outbound
	if m.topic == "" {
		for _, topic := range t.order {
			msgs = append(msgs, outbound{topic: topic, retained: true, payload: t.retained[topic]})
		}
	} else {
		msgs = []outbound{{topic: m.topic, retained: true, payload: t.retained[m.topic]}}
	}
	t.mu.Unlock()
	for _, r := range msgs {
		t.client.Publish(r.topic, t.qos(r.topic, true), true, r.payload)
	}
	return nil
}

// waitLink waits until the command connection is up and subscribed, and
// reports whether it is; false once Close has begun with the link down.
// Replies wait here across an outage, in order, rather than being dropped:
// a dropped reply would reach the agent after the replies to requests sent
// during the outage, or never.
func (t *Transport) waitLink() bool {
	for {
		t.mu.Lock()
		linked := t.linked
		t.mu.Unlock()
		select {
		case <-linked:
			if t.client.IsConnectionOpen() {
				t.awaitResumed()
				return true
			}
			// Lost since: the handler replaces linked; wait again.
			time.Sleep(10 * time.Millisecond)
		case <-t.stopping:
			return t.client.IsConnectionOpen()
		}
	}
}

// awaitResumed waits, for a second at most, until the publishes the
// session resume resends are acknowledged.
func (t *Transport) awaitResumed() {
	t.mu.Lock()
	resumed := t.resumed
	t.mu.Unlock()
	if len(resumed) == 0 {
		return
	}
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && t.store.holdsAny(resumed); {
		time.Sleep(2 * time.Millisecond)
	}
	t.mu.Lock()
	t.resumed = nil
	t.mu.Unlock()
}

// Publish queues a message for the transport's publisher goroutine and
// returns at once; when the queue is full the message is dropped and
// counted (Dropped). Nothing is handed to the client while the connection
// is down: the publisher waits for it, and then sends what was queued in
// order (retained topics with their newest payload). Queueing QoS 1 publishes across a
// reconnect is also what races inside paho v1.5.1's session resume
// (eclipse-paho/paho.mqtt.golang#703).
func (t *Transport) Publish(topic string, retained bool, payload []byte) {
	t.publish(topic, retained, payload, false, false)
}

// publish queues a message, on the urgent queue or the ordinary one.
func (t *Transport) publish(topic string, retained bool, payload []byte, urgent, droppable bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if retained && payload != nil {
		t.storeRetained(topic, payload)
	}
	if retained {
		payload = nil // sent as the topic's newest payload (send)
	}
	if t.closed {
		return
	}
	q := t.out
	if urgent {
		q = t.urgent
	}
	select {
	case q <- outbound{topic: topic, retained: retained, payload: payload, droppable: droppable}:
	default:
		// The broker is not taking messages as fast as they come; a
		// retained one is kept above and republished on the next connect.
		t.countDropped(topic)
	}
}

// countDropped counts a message not published: the broker is not taking
// messages as fast as they come.
func (t *Transport) countDropped(topic string) {
	if n := t.dropped.Add(1); n&(n-1) == 0 { // log at 1, 2, 4, 8, ...
		t.log.Error("mqtt: outgoing queue full: message dropped", "topic", topic, "dropped", n)
	}
}

// storeRetained keeps a retained topic's newest payload. Call with t.mu
// held. order keeps the topics in the order of their latest publish, so a
// reconnect replays them as a reader saw them change.
func (t *Transport) storeRetained(topic string, payload []byte) {
	if _, ok := t.retained[topic]; ok {
		t.order = slices.DeleteFunc(t.order, func(s string) bool { return s == topic })
	}
	t.order = append(t.order, topic)
	t.retained[topic] = payload
}

// Dropped is how many messages were not published because the outgoing
// queue was full.
func (t *Transport) Dropped() uint64 { return t.dropped.Load() }

// qos is 1 for requests' replies, events and the status; retained
// last-value messages (actuator state) go at QoS 0. They are republished on
// every change and every connect, so a lost one is replaced, and delivering
// a burst of retained QoS 1 messages on subscribe stalls later QoS 1
// deliveries to that client on the embedded broker (mochi v2.7.9: a client
// that subscribes to state/+ before its reply topic loses replies).
func (t *Transport) qos(topic string, retained bool) byte {
	if retained && topic != t.opt.Topics.Status() {
		return 0
	}
	return 1
}

// PublishEvent publishes an event (supervisor.Publisher).
func (t *Transport) PublishEvent(ev api.Event) {
	t.publishBounded(t.opt.Topics.Events(), api.EncodeEventMax(ev, t.opt.MaxPayload), false, false)
}

// PublishState publishes an actuator's retained state (supervisor.Publisher).
func (t *Transport) PublishState(st api.State) {
	t.Publish(t.opt.Topics.State(st.Actuator), true, api.EncodeState(st))
}

// SetStatus publishes the retained status when it changed.
//
// Each status that differs from the last carries the next sequence number
// (Status.Seq): the retained status a reader finds is always the newest,
// and a reader that sees two can tell which.
func (t *Transport) SetStatus(s api.Status) {
	s.State, s.Seq = api.StateOnline, 0
	key := string(api.EncodeStatus(s))
	t.mu.Lock()
	if key == t.statusKey {
		t.mu.Unlock()
		return
	}
	t.statusKey = key
	t.statusSeq++
	s.Seq = t.statusSeq
	t.storeRetained(t.opt.Topics.Status(), api.EncodeStatus(s))
	t.mu.Unlock()
	t.publish(t.opt.Topics.Status(), true, nil, true, false)
}

// stopWorker marks the transport closed, so no publish queues any more, and
// returns once the worker has handed on what was queued and exited. Callers
// run it inside t.once, so it runs at most once.
func (t *Transport) stopWorker() {
	t.mu.Lock()
	t.closed = true
	close(t.stopping)
	close(t.out)
	close(t.urgent)
	t.mu.Unlock()
	<-t.done
}
