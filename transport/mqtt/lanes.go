package mqtt

import (
	"slices"
	"strconv"
	"time"
)

// topicLanes are the messages of the out queue waiting for the one before
// them on their topic to be acknowledged. Only the publisher goroutine
// touches them.
type topicLanes struct {
	t     *Transport
	lanes map[string]*topicLane // topics with a message in flight
	held  int                   // messages waiting in all lanes
}

type topicLane struct {
	q     []outbound
	key   string // the client's store key of the message in flight
	seq   uint64 // and the order it was stored in (keys are reused)
	since time.Time
}

// laneStall bounds the wait for one acknowledgement while the connection
// is up: a broker that never acknowledges must not silence a topic.
const laneStall = 10 * time.Second

// put sends m at once if nothing is in flight on its topic, or queues it
// behind what is. Held messages are bounded by QueueLen in all, and one
// topic may hold an eighth of that before its refusals (droppable) give
// way: a flooding agent drops its own refusal replies, not the replies to
// requests that were served, nor anyone else's.
func (l *topicLanes) put(m outbound) {
	ln := l.lanes[m.topic]
	if ln == nil {
		ln = &topicLane{}
		l.lanes[m.topic] = ln
	}
	if ln.key == "" && len(ln.q) == 0 {
		l.sendTracked(ln, m)
		l.forget(m.topic, ln)
		return
	}
	if len(ln.q) >= max(64, l.t.opt.QueueLen/8) || l.held >= l.t.opt.QueueLen {
		i := slices.IndexFunc(ln.q, func(o outbound) bool { return o.droppable })
		switch {
		case m.droppable || i < 0 && l.held >= l.t.opt.QueueLen:
			l.t.countDropped(m.topic)
			return
		case i >= 0:
			ln.q = slices.Delete(ln.q, i, i+1)
			l.held--
			l.t.countDropped(m.topic)
		}
	}
	ln.q = append(ln.q, m)
	l.held++
}

// advance sends the next message of every lane whose message in flight was
// acknowledged; on a tick, also of a lane that waited laneStall with the
// connection up.
func (l *topicLanes) advance(tick bool) {
	for topic, ln := range l.lanes {
		if ln.key != "" && !l.t.store.holds(ln.key, ln.seq) {
			ln.key = ""
		}
		if tick && ln.key != "" && time.Since(ln.since) > laneStall && l.t.client.IsConnectionOpen() {
			l.t.log.Warn("mqtt: no acknowledgement from the broker: sending the next message anyway", "topic", topic, "waited", time.Since(ln.since).Round(time.Second))
			ln.key = ""
		}
		if ln.key == "" && len(ln.q) > 0 {
			m := ln.q[0]
			ln.q[0] = outbound{}
			ln.q = ln.q[1:]
			l.held--
			l.sendTracked(ln, m)
		}
		l.forget(topic, ln)
	}
}

// forget drops an idle lane.
func (l *topicLanes) forget(topic string, ln *topicLane) {
	if ln.key == "" && len(ln.q) == 0 {
		delete(l.lanes, topic)
	}
}

// sendTracked sends m and remembers its store key, if the client stored it
// (it did not if it is already acknowledged, or was not sent).
func (l *topicLanes) sendTracked(ln *topicLane, m outbound) {
	tok := l.t.send(m)
	pt, ok := tok.(interface{ MessageID() uint16 })
	if !ok || pt.MessageID() == 0 {
		return
	}
	key := "o." + strconv.Itoa(int(pt.MessageID()))
	if seq, ok := l.t.store.stored(key); ok {
		ln.key, ln.seq, ln.since = key, seq, time.Now()
	}
}

// flush hands the client what the lanes still hold, at Close, in order
// per topic and without waiting for acknowledgements (the connection is
// about to end; at worst a reply is lost, not reordered by a resume).
func (l *topicLanes) flush() {
	for _, ln := range l.lanes {
		for _, m := range ln.q {
			l.t.send(m)
		}
	}
	clear(l.lanes)
}
