package mqtt

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// onEstop latches a halt for any message on an e-stop topic, whatever its
// payload: an e-stop is never refused for its form. A payload that is a
// valid halt request lends its id (for the reply), reason and zone. A retained
// message is ignored, like a retained command: acting on it would halt the
// robot again at every reconnect, long after it was sent.
func (t *Transport) onEstop(_ paho.Client, m paho.Message) {
	topic, received := m.Topic(), time.Now()
	if m.Retained() {
		t.log.Warn("mqtt: retained message on an e-stop topic ignored", "topic", topic)
		return
	}
	agent, _ := strings.CutPrefix(topic, t.opt.Topics.Estop()+"/")
	if topic == t.opt.Topics.Estop() || api.ValidName(agent) != nil {
		agent = ""
	}
	req := api.Request{Op: api.OpHalt, Agent: agent, Reason: "e-stop topic"}
	if r, derr := api.DecodeRequest(m.Payload(), t.maxRequest()); derr == nil && r.Op == api.OpHalt && (agent == "" || r.Agent == agent) {
		// Only a valid halt request can narrow the halt to a zone: any
		// other payload halts everything.
		req.ID, req.Reason, req.Zone = r.ID, r.Reason, r.Zone
		if agent == "" {
			agent = r.Agent
		}
		req.Agent = agent
	}
	t.h.Submit(agent, req, nil, received, func(rep api.Reply) {
		if req.ID != "" {
			t.reply(agent, rep, true)
		}
	})
}

// enqueue is paho's message handler, called in arrival order on the
// client's goroutine. It must never block, or it stalls the client's pings
// and can deadlock it: it routes and decodes, and the Handler only queues
// (or latches a halt).
// enqueueSession is the command connection's default handler (see
// NewTransport): a message on a command or will topic is enqueued; any
// other is dropped (paho acknowledges it once this returns).
func (t *Transport) enqueueSession(c paho.Client, m paho.Message) {
	topic := m.Topic()
	if topic == t.opt.Topics.Cmd() || strings.HasPrefix(topic, t.opt.Topics.Cmd()+"/") ||
		strings.HasPrefix(topic, strings.TrimSuffix(t.opt.Topics.WillFilter(), "+")) {
		t.enqueue(c, m)
	}
}

func (t *Transport) enqueue(_ paho.Client, m paho.Message) {
	topic, received := m.Topic(), time.Now()
	if m.Retained() {
		// A retained command would be replayed to every new subscription,
		// long after it was sent: never act on one. A retained will is as
		// stale: it would end the agent's lease at every reconnect.
		t.log.Warn("mqtt: retained message on a command or will topic ignored", "topic", topic)
		return
	}
	if agent, ok := strings.CutPrefix(topic, strings.TrimSuffix(t.opt.Topics.WillFilter(), "+")); ok {
		if api.ValidName(agent) == nil {
			t.h.AgentGone(agent, string(m.Payload()))
		}
		return
	}
	topicAgent, own := strings.CutPrefix(topic, t.opt.Topics.Cmd()+"/")
	if own && api.ValidName(topicAgent) == nil && !mayBeHalt(m.Payload()) && t.shed(topicAgent) {
		// The agent is over its rate: refused before decoding, so a flood
		// costs the supervisor as little as possible. A payload that may
		// be a halt is always decoded: the halt path never sheds.
		return
	}
	req, derr := api.DecodeRequest(m.Payload(), t.maxRequest())
	agent := req.Agent
	if own {
		if api.ValidName(topicAgent) != nil {
			return // cannot be answered, and cannot be anyone's
		}
		if derr == nil && req.Agent != topicAgent {
			derr = &api.Error{Code: api.CodeBadRequest, Field: "agent",
				Message: fmt.Sprintf("agent %q does not match the topic %s: an agent speaks only for itself", req.Agent, topic)}
			req = api.Request{ID: req.ID}
		}
		agent = topicAgent // the reply goes to whoever may write this topic
		req.Agent = topicAgent
	}
	if key := [2]string{agent, req.ID}; req.ID != "" && t.seen.add(key) && m.Duplicate() {
		// The broker sent it again (it had no acknowledgement: a stop, a
		// reconnect). It was received and is answered, or queued to be.
		return
	}
	halt := derr == nil && req.Op == api.OpHalt
	t.h.Submit(agent, req, derr, received, func(rep api.Reply) { t.reply(agent, rep, halt) })
}

// mayBeHalt reports whether payload could decode to a halt request: it
// holds "halt", or a \u escape (JSON may spell any letter of "halt" as
// one, "\u0068alt"). A payload that is neither cannot be a halt, and may be
// shed unread.
func mayBeHalt(payload []byte) bool {
	return bytes.Contains(payload, []byte("halt")) || bytes.Contains(payload, []byte(`\u`))
}

// IsHalt reports whether payload is a halt request. The embedded broker
// asks it of every command it would hold back for a congested supervisor
// (embedded.Options.Urgent): a halt is never held back. Most payloads are
// told apart by mayBeHalt alone; the few that may be a halt are decoded,
// so a flooder cannot slip past by naming "halt" in another field.
func IsHalt(payload []byte) bool {
	if !mayBeHalt(payload) {
		return false
	}
	req, err := api.DecodeRequest(payload, api.DefaultMaxRequestBytes)
	return err == nil && req.Op == api.OpHalt
}

// EstopRoute returns the embedded broker's Reroute for t
// (embedded.Options.Reroute): a halt request on an agent's command topic,
// naming that agent, goes to the agent's e-stop topic instead. The
// transport reads the e-stop topics on a connection of their own and acts
// on a halt request there as on the command topic (its id answered, its
// reason journaled), so the halt is served the same way but is not queued
// behind the commands the broker holds for the command connection. Any
// other payload, one naming another agent (refused on the command topic),
// and the shared command topic stay where they are.
func EstopRoute(t Topics) func(topic string, payload []byte) string {
	prefix := t.Cmd() + "/"
	return func(topic string, payload []byte) string {
		agent, ok := strings.CutPrefix(topic, prefix)
		if !ok || api.ValidName(agent) != nil || !mayBeHalt(payload) {
			return ""
		}
		req, err := api.DecodeRequest(payload, api.DefaultMaxRequestBytes)
		if err != nil || req.Op != api.OpHalt || req.Agent != agent {
			return ""
		}
		return t.EstopAgent(agent)
	}
}

// AgentDoor returns the embedded broker's door for t
// (embedded.Broker.SetDoor): a publish on an agent's command topic asks
// enter (the supervisor's Enter) whether the agent's lane has room for it,
// and is held at the broker until it has. Publishes on any other topic —
// the shared command topic, whose agent is in the payload — pass. The
// broker never asks about a halt.
func AgentDoor(t Topics, enter func(agent string) <-chan struct{}) func(topic string) <-chan struct{} {
	prefix := t.Cmd() + "/"
	return func(topic string) <-chan struct{} {
		agent, ok := strings.CutPrefix(topic, prefix)
		if !ok || api.ValidName(agent) != nil {
			return nil
		}
		return enter(agent)
	}
}

// shed asks the Handler whether agent's request may be refused unread.
func (t *Transport) shed(agent string) bool {
	s, ok := t.h.(Shedder)
	return ok && s.Shed(agent)
}

// maxRequest is the bound on a request payload.
func (t *Transport) maxRequest() int { return min(api.DefaultMaxRequestBytes, t.opt.MaxPayload) }

// recentIDs is a bounded set of the last (agent, id) pairs received.
type recentIDs struct {
	mu   sync.Mutex
	set  map[[2]string]struct{}
	ring [][2]string
	next int
}

// add records k and reports whether it was already there.
func (r *recentIDs) add(k [2]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.set[k]; ok {
		return true
	}
	if r.set == nil {
		r.set, r.ring = map[[2]string]struct{}{}, make([][2]string, recentRequests)
	}
	delete(r.set, r.ring[r.next])
	r.ring[r.next] = k
	r.next = (r.next + 1) % len(r.ring)
	r.set[k] = struct{}{}
	return false
}

// recentRequests is how many received requests recentIDs remembers: far
// more than a broker redelivers at a reconnect (its in-flight window).
const recentRequests = 4096
