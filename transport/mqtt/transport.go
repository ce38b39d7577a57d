package mqtt

import (
	"bytes"
	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/nodelay"
	"slices"

	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// Handler takes the requests a Transport receives; the supervisor
// implements it (through its per-agent lanes).
type Handler interface {
	// Submit takes one request from agent, received at the given time, or
	// — derr not nil — one that could not be decoded (req then holds the id
	// and agent that could be salvaged). It must not block: it is called on
	// the MQTT client's goroutine. reply is called once, now or later, with
	// the answer; replies to one agent are called in request order.
	Submit(agent string, req api.Request, derr *api.Error, received time.Time, reply func(api.Reply))
	// AgentGone is told that an agent's MQTT last will arrived: the agent's
	// connection died without a clean bye. It must not block.
	AgentGone(agent, will string)
}

// Shedder is implemented by a Handler that can refuse an agent's request
// before the transport decodes it: the agent is over its rate. Shed must
// not block; it counts the refusal itself (no reply is sent: an agent that
// far over its rate gets its refusals counted, not answered).
type Shedder interface {
	Shed(agent string) bool
}

// TransportOptions configures the supervisor's MQTT connection.
type TransportOptions struct {
	Broker   string // URL: tcp://host:1883, ssl://host:8883, ws://...
	ClientID string // fixed, for a persistent session
	Username string
	Password string
	TLS      *tls.Config // nil: none
	Topics   Topics
	// MaxPayload bounds what the supervisor publishes: replies and events
	// are summarised to fit it (api.EncodeReplyMax). Set it no higher than
	// the broker's limit (mosquitto's message_size_limit): MQTT 3.1.1
	// negotiates no maximum packet size, and a broker that refuses a
	// publish drops it or the connection. Default 64 KiB; never below
	// api.MinEncodeBytes. Requests are bounded by the API's own limit,
	// api.DefaultMaxRequestBytes (or MaxPayload, if lower): no valid
	// request is larger, and decoding a larger one is work for nothing.
	MaxPayload int
	QueueLen   int          // messages waiting to be published; default 4096
	Logger     *slog.Logger // nil: discard
}

// outbound is one message waiting to be published.
type outbound struct {
	topic     string
	retained  bool
	payload   []byte
	droppable bool // a refusal of a flood (RATE_LIMITED, BUSY): given up first when an agent's replies back up
}

// Transport is the supervisor's MQTT client: a persistent session, a last
// will of "offline" on the retained status topic, subscriptions renewed on
// every (re)connect, and a message handler that never blocks. Each message
// is routed and decoded on the client's goroutine, in arrival order, and
// handed to the Handler, whose per-agent lanes decide when it is served (a
// halt is latched right there). Replies and events are published by one
// goroutine of the transport's own, through a bounded queue, so that no
// Handler call ever waits on the broker.
type Transport struct {
	opt        TransportOptions
	h          Handler
	log        *slog.Logger
	client     paho.Client
	estop      paho.Client   // the e-stop topics' own connection
	estopSubd  chan struct{} // closed after the e-stop connection's first subscription
	estopOnce  sync.Once
	out        chan outbound
	urgent     chan outbound // halt replies and the status: published before out
	done       chan struct{}
	dropped    atomic.Uint64 // messages not published: the queue was full
	tooLarge   atomic.Uint64 // messages not published: nothing of them fits MaxPayload
	once       sync.Once
	subscribed chan struct{} // closed after the first successful subscription
	subOnce    sync.Once
	mu         sync.Mutex
	retained   map[string][]byte // last retained payload per topic (status, state/*), republished on every connect
	order      []string          // retained topics, least recently published first
	closed     bool              // out is closed: late messages are dropped
	statusSeq  uint64            // the seq of the newest status (api.Status.Seq)
	statusKey  string            // the newest status without its seq, to tell a change
	// repub asks the publisher goroutine to publish every retained topic
	// again (after a connect); one pending request stands for any number.
	repub chan struct{}
	// up: the command connection is connected and subscribed; estopUp:
	// the e-stop connection is. Both, or the supervisor is not ready.
	up, estopUp atomic.Bool
	// linked is closed while the command connection is up and subscribed
	// (guarded by mu; a new one replaces it when the connection is lost):
	// the publisher waits on it rather than dropping what is queued.
	linked     chan struct{}
	linkedOpen bool
	// store is the command connection's session store; resumed holds the
	// publishes it had unacknowledged when the connection came back, which
	// paho resends (in order) on a goroutine of its own: nothing new is sent
	// before they are acknowledged, or a reply would overtake an older one.
	store    *copyingStore
	resumed  map[string]bool // guarded by mu
	stopping chan struct{}   // closed by Close: stop waiting for the link
	// seen remembers the last requests received, by agent and id, so that
	// a broker's redelivery (DUP) of one already received is not served
	// again: its reply, sent or queued, would come twice and out of order.
	seen recentIDs
}

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

// StartTransport is NewTransport and Start in one.
func StartTransport(opt TransportOptions, h Handler) (*Transport, error) {
	t, err := NewTransport(opt)
	if err != nil {
		return nil, err
	}
	if err := t.Start(h); err != nil {
		return nil, err
	}
	return t, nil
}

// NewTransport prepares the transport without connecting: it can already
// take what the supervisor publishes (the retained status and states are
// kept and published once connected), so the supervisor is built with its
// Publisher in hand — nothing is bound late — and Start then connects it to
// the Handler, the supervisor itself.
func NewTransport(opt TransportOptions) (*Transport, error) {
	if err := opt.Topics.Validate(); err != nil {
		return nil, err
	}
	if opt.QueueLen <= 0 {
		opt.QueueLen = 4096
	}
	if opt.MaxPayload <= 0 {
		opt.MaxPayload = 64 << 10
	}
	opt.MaxPayload = max(opt.MaxPayload, api.MinEncodeBytes)
	lg := opt.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	t := &Transport{opt: opt, log: lg, out: make(chan outbound, opt.QueueLen), urgent: make(chan outbound, 256), done: make(chan struct{}),
		subscribed: make(chan struct{}), retained: map[string][]byte{opt.Topics.Status(): api.EncodeStatus(api.Status{State: api.StateOnline})},
		order: []string{opt.Topics.Status()}, estopSubd: make(chan struct{}), repub: make(chan struct{}, 1),
		linked: make(chan struct{}), stopping: make(chan struct{}),
		// A restarted daemon's statuses sort after its predecessor's, as
		// long as the clock did not step back by more than the statuses
		// published since.
		statusSeq: uint64(time.Now().UnixMicro())}
	t.store = newCopyingStore()
	co := t.clientOptions(opt.ClientID).
		SetStore(t.store).
		SetWill(opt.Topics.Status(), string(api.EncodeStatus(api.Status{State: api.StateOffline})), 1, true).
		SetOnConnectHandler(t.onConnect)
	// The e-stop topics have a connection of their own, so a halt published
	// there never queues at the broker behind a flood of commands to the
	// main connection (brokers queue per client; mosquitto drops QoS 1
	// messages beyond max_queued_messages).
	eo := t.clientOptions(opt.ClientID + EstopSuffix).SetOnConnectHandler(t.onEstopConnect)
	t.estop = paho.NewClient(eo)
	t.client = paho.NewClient(co)
	go t.publisher() // publishes nothing until connected; retained messages wait
	return t, nil
}

// Start connects both connections and serves requests to h. If the broker
// is not up yet it keeps retrying in the background: the supervisor runs
// (not ready to anyone) without it. On an error the transport is closed.
// Call it once.
func (t *Transport) Start(h Handler) error {
	if h == nil {
		return errors.New("mqtt: Start needs a Handler")
	}
	t.mu.Lock()
	t.h = h
	t.mu.Unlock()
	opt, lg := t.opt, t.log
	t.estop.Connect() // retries in the background; the main connection decides readiness to serve
	tok := t.client.Connect()
	// With ConnectRetry the token completes only once connected; the
	// daemon must come up without the broker, so do not wait long.
	tok.WaitTimeout(3 * time.Second)
	if err := tok.Error(); err != nil {
		t.once.Do(func() { // Close after this does nothing
			t.client.Disconnect(0)
			t.estop.Disconnect(0)
			t.stopWorker()
		})
		return fmt.Errorf("mqtt: connect %s: %w", opt.Broker, err)
	}
	// Serve only once subscribed: a request sent the moment this returns
	// must not be lost. If the broker is not up, the subscription follows
	// the connection whenever it comes.
	if t.client.IsConnected() {
		wait := time.After(5 * time.Second)
		for _, ch := range []chan struct{}{t.subscribed, t.estopSubd} {
			select {
			case <-ch:
			case <-wait:
				lg.Warn("mqtt: connected but not yet subscribed")
			}
		}
	}
	return nil
}

// clientOptions are the options both connections share.
func (t *Transport) clientOptions(clientID string) *paho.ClientOptions {
	co := paho.NewClientOptions().
		SetDialer(nodelay.Dialer(30 * time.Second)). // replies are small and latency-bound
		AddBroker(t.opt.Broker).
		SetClientID(clientID).
		// A persistent session: QoS 1 commands queued while the link was
		// down are delivered after it returns; each is still checked
		// against its lease and deadline, so nothing stale acts (a halt
		// sent meanwhile still halts).
		SetCleanSession(false).
		SetStore(newCopyingStore()).
		// In order, on the client's goroutine: replies to an agent must
		// leave in request order, and the handler never blocks.
		SetOrderMatters(true).
		SetAutoReconnect(true).
		SetConnectRetry(true).
		SetConnectRetryInterval(500 * time.Millisecond).
		SetMaxReconnectInterval(2 * time.Second).
		SetKeepAlive(10 * time.Second).
		SetConnectionLostHandler(func(c paho.Client, err error) { t.onLost(clientID, c, err) })
	if t.opt.Username != "" {
		// Each connection is its own login (see EstopSuffix), with the
		// supervisor's one password.
		user := t.opt.Username
		if suffix, ok := strings.CutPrefix(clientID, t.opt.ClientID); ok {
			user += suffix
		}
		co.SetUsername(user).SetPassword(t.opt.Password)
	}
	if t.opt.TLS != nil {
		co.SetTLSConfig(t.opt.TLS)
	}
	return co
}

// onLost marks a connection down. paho calls it on a goroutine of its own,
// so it may run after the next connection is up and subscribed (seen in
// CI: a client-id takeover, the reconnect's onConnect, then the old
// connection's loss marked the new one down — the daemon stayed not ready
// and its replies waited for a link that was up). A loss found with the
// client connected again is the old connection's, and changes nothing:
// the new connection's own loss, if it comes, is reported in turn.
func (t *Transport) onLost(clientID string, c paho.Client, err error) {
	t.log.Warn("mqtt connection lost", "client", clientID, "err", err)
	if c.IsConnectionOpen() {
		return
	}
	if clientID != t.opt.ClientID {
		t.estopUp.Store(false)
		return
	}
	t.up.Store(false)
	t.mu.Lock()
	if t.linkedOpen {
		t.linked, t.linkedOpen = make(chan struct{}), false
	}
	t.mu.Unlock()
}

// onEstopConnect subscribes the e-stop connection (again, after a
// reconnect).
func (t *Transport) onEstopConnect(c paho.Client) {
	t.estopUp.Store(false) // until this connection is subscribed
	subs := map[string]byte{t.opt.Topics.Estop(): 1, t.opt.Topics.EstopFilter(): 1}
	tok := c.SubscribeMultiple(subs, t.onEstop)
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.log.Error("mqtt e-stop subscribe failed", "err", tok.Error())
		return
	}
	t.estopUp.Store(c.IsConnectionOpen())
	t.estopOnce.Do(func() { close(t.estopSubd) })
}

// onEstop latches a halt for any message on an e-stop topic, whatever its
// payload: an e-stop is never refused for its form. A payload that is a
// valid halt request lends its id (for the reply) and reason. A retained
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
		req.ID, req.Reason = r.ID, r.Reason
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

// onConnect subscribes (again, after a reconnect) and republishes status.
func (t *Transport) onConnect(c paho.Client) {
	t.log.Info("mqtt connected", "broker", t.opt.Broker)
	t.up.Store(false) // until this connection is subscribed
	subs := map[string]byte{t.opt.Topics.Cmd(): 1, t.opt.Topics.CmdFilter(): 1, t.opt.Topics.WillFilter(): 1}
	tok := c.SubscribeMultiple(subs, t.enqueue)
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.log.Error("mqtt subscribe failed", "err", tok.Error())
	} else {
		t.up.Store(c.IsConnectionOpen())
		t.mu.Lock()
		t.resumed = t.store.outbound()
		if !t.linkedOpen {
			close(t.linked)
			t.linkedOpen = true
		}
		t.mu.Unlock()
		t.subOnce.Do(func() { close(t.subscribed) })
	}
	// Republish every retained message: the broker may have restarted
	// without them, and nothing was published while the link was down.
	// The publisher goroutine does it, as it publishes everything else:
	// from one goroutine, each retained topic's newest payload read as it
	// is sent, a retained topic can never go back to an older value (a
	// snapshot published from here raced the publisher's newer status and
	// left the broker with the older one).
	select {
	case t.repub <- struct{}{}:
	default: // one is pending already
	}
}

// enqueue is paho's message handler, called in arrival order on the
// client's goroutine. It must never block, or it stalls the client's pings
// and can deadlock it: it routes and decodes, and the Handler only queues
// (or latches a halt).
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

// shed asks the Handler whether agent's request may be refused unread.
func (t *Transport) shed(agent string) bool {
	s, ok := t.h.(Shedder)
	return ok && s.Shed(agent)
}

// maxRequest is the bound on a request payload.
func (t *Transport) maxRequest() int { return min(api.DefaultMaxRequestBytes, t.opt.MaxPayload) }

// reply publishes rep to agent, or on the events topic when there is no
// agent to address.
//
// No message exceeds MaxPayload: a reply too large (the report of a long
// unwind, a status with many sagas) is summarised to fit. A broker refuses
// an oversized publish by dropping it or the connection; the supervisor
// then reconnected and sent it again, in a loop.
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
// lost connection reordered them: paho resends the unacknowledged ones from
// its store on reconnect, while a Publish call that was waiting to be
// written when the connection went is written by the new connection's
// writer, racing the resend — an agent saw hb-12's reply before hb-11's
// after the daemon was stopped (SIGSTOP) and continued. Topics (agents)
// still go out side by side, so one agent's backlog never delays another's
// replies, and a reply waits one broker round trip at most behind the one
// before it.
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
// a reply dropped while requests sent during the outage were still to
// come reached the agent after theirs, or never (issue 13).
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

// Name names the transport as a safety input of the supervisor.
func (t *Transport) Name() string { return "mqtt" }

// Ready reports whether commands and e-stops can reach the supervisor:
// both connections to the broker up and subscribed. While not, the
// supervisor is not ready (a controller cannot be answered, and an e-stop
// published on the broker would not arrive).
func (t *Transport) Ready() error {
	switch {
	case !t.up.Load():
		return fmt.Errorf("not connected to the broker %s", t.opt.Broker)
	case !t.estopUp.Load():
		return fmt.Errorf("the e-stop connection to the broker %s is down", t.opt.Broker)
	}
	return nil
}

// Dropped is how many messages were not published because the outgoing
// queue was full.
func (t *Transport) Dropped() uint64 { return t.dropped.Load() }

// qos is 1 for requests' replies, events and the status; retained
// last-value messages (actuator state) go at QoS 0. They are republished on
// every change and every connect, so a lost one is replaced, and delivering
// a burst of retained QoS 1 messages on subscribe stalls later QoS 1
// deliveries to that client on the embedded broker (mochi v2.7.9: replies
// were lost after a client subscribed to state/+ before its reply topic).
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

// Close publishes "offline" on the status topic first — a clean disconnect
// suppresses the will — then stops the worker and disconnects.
func (t *Transport) Close() error {
	var err error
	t.once.Do(func() {
		if t.client.IsConnected() {
			tok := t.client.Publish(t.opt.Topics.Status(), 1, true, api.EncodeStatus(api.Status{State: api.StateOffline}))
			if !tok.WaitTimeout(2*time.Second) || tok.Error() != nil {
				err = errors.Join(errors.New("mqtt: offline status not confirmed"), tok.Error())
			}
		}
		t.stopWorker() // what was queued is handed to the client before it disconnects (if it is connected)
		t.client.Disconnect(250)
		t.estop.Disconnect(250)
	})
	return err
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

// Retained returns the topics under filter that hold a retained message,
// read on the command connection: it subscribes, gathers what the broker
// sends until quiet passes with nothing new (or ctx ends), and
// unsubscribes. For start-up housekeeping (Home Assistant's discovery
// configs), never for the command path.
func (t *Transport) Retained(ctx context.Context, filter string, quiet time.Duration) ([]string, error) {
	var mu sync.Mutex
	seen := map[string]bool{}
	got := make(chan struct{}, 1)
	tok := t.client.Subscribe(filter, 1, func(_ paho.Client, m paho.Message) {
		if !m.Retained() || len(m.Payload()) == 0 {
			return
		}
		mu.Lock()
		seen[m.Topic()] = true
		mu.Unlock()
		select {
		case got <- struct{}{}:
		default:
		}
	})
	if err := waitToken(ctx, tok); err != nil {
		return nil, fmt.Errorf("mqtt: subscribe %s: %w", filter, err)
	}
	defer t.client.Unsubscribe(filter)
	timer := time.NewTimer(quiet)
	defer timer.Stop()
	for done := false; !done; {
		select {
		case <-got:
			timer.Reset(quiet)
		case <-timer.C:
			done = true
		case <-ctx.Done():
			done = true
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Sorted(maps.Keys(seen)), nil
}

func waitToken(ctx context.Context, tok paho.Token) error {
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}
