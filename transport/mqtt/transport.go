package mqtt

import (
	"github.com/saga-supervisor/saga-supervisor/api"

	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// Handler serves the requests a Transport receives; the supervisor
// implements it. Calls come from one goroutine, in arrival order.
type Handler interface {
	// Handle answers a decoded request received at the given time.
	Handle(req api.Request, received time.Time) api.Reply
	// Refused is told of a request the decoder refused, so that it can be
	// journaled; req holds whatever id and agent could be salvaged.
	Refused(req api.Request, err *api.Error)
	// AgentGone is told that an agent's MQTT last will arrived: the agent's
	// connection died without a clean bye.
	AgentGone(agent string)
}

// TransportOptions configures the supervisor's MQTT connection.
type TransportOptions struct {
	Broker     string // URL: tcp://host:1883, ssl://host:8883, ws://...
	ClientID   string // fixed, for a persistent session
	Username   string
	Password   string
	TLS        *tls.Config // nil: none
	Topics     Topics
	MaxPayload int          // requests over this are refused (PAYLOAD_TOO_LARGE)
	QueueLen   int          // messages waiting for the handler; default 1024
	Logger     *slog.Logger // nil: discard
}

type inbound struct {
	topic    string
	payload  []byte
	received time.Time
}

// Transport is the supervisor's MQTT client: a persistent session, a last
// will of "offline" on the retained status topic, subscriptions renewed on
// every (re)connect, and message handlers that never block — messages are
// queued for one worker goroutine, which calls the Handler and publishes
// the reply.
type Transport struct {
	opt        TransportOptions
	h          Handler
	log        *slog.Logger
	client     paho.Client
	q          chan inbound
	done       chan struct{}
	once       sync.Once
	subscribed chan struct{} // closed after the first successful subscription
	subOnce    sync.Once
	mu         sync.Mutex
	retained   map[string][]byte // last retained payload per topic (status, state/*), republished on every connect
	closed     bool              // q is closed: late messages from paho are dropped
}

// StartTransport connects and starts serving requests. If the broker is not
// up yet it keeps retrying in the background: the supervisor runs (not
// ready to anyone) without it.
func StartTransport(opt TransportOptions, h Handler) (*Transport, error) {
	if err := opt.Topics.Validate(); err != nil {
		return nil, err
	}
	if opt.QueueLen <= 0 {
		opt.QueueLen = 1024
	}
	if opt.MaxPayload <= 0 {
		opt.MaxPayload = api.DefaultMaxRequestBytes
	}
	lg := opt.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	t := &Transport{opt: opt, h: h, log: lg, q: make(chan inbound, opt.QueueLen), done: make(chan struct{}),
		subscribed: make(chan struct{}), retained: map[string][]byte{opt.Topics.Status(): api.EncodeStatus(api.Status{State: api.StateOnline})}}
	co := paho.NewClientOptions().
		AddBroker(opt.Broker).
		SetClientID(opt.ClientID).
		// A persistent session: QoS 1 commands queued while the link was
		// down are delivered after it returns; each is still checked
		// against its lease and deadline, so nothing stale acts.
		SetCleanSession(false).
		SetStore(newCopyingStore()).
		SetOrderMatters(false).
		SetAutoReconnect(true).
		SetConnectRetry(true).
		SetConnectRetryInterval(500*time.Millisecond).
		SetMaxReconnectInterval(2*time.Second).
		SetKeepAlive(10*time.Second).
		SetWill(opt.Topics.Status(), string(api.EncodeStatus(api.Status{State: api.StateOffline})), 1, true).
		SetOnConnectHandler(t.onConnect).
		SetConnectionLostHandler(func(_ paho.Client, err error) { lg.Warn("mqtt connection lost", "err", err) })
	if opt.Username != "" {
		co.SetUsername(opt.Username).SetPassword(opt.Password)
	}
	if opt.TLS != nil {
		co.SetTLSConfig(opt.TLS)
	}
	t.client = paho.NewClient(co)
	go t.work()
	tok := t.client.Connect()
	// With ConnectRetry the token completes only once connected; the
	// daemon must come up without the broker, so do not wait long.
	tok.WaitTimeout(3 * time.Second)
	if err := tok.Error(); err != nil {
		t.client.Disconnect(0)
		t.mu.Lock()
		t.closed = true
		close(t.q)
		t.mu.Unlock()
		return nil, fmt.Errorf("mqtt: connect %s: %w", opt.Broker, err)
	}
	// Serve only once subscribed: a request sent the moment this returns
	// must not be lost. If the broker is not up, the subscription follows
	// the connection whenever it comes.
	if t.client.IsConnected() {
		select {
		case <-t.subscribed:
		case <-time.After(5 * time.Second):
			lg.Warn("mqtt: connected but not yet subscribed")
		}
	}
	return t, nil
}

// onConnect subscribes (again, after a reconnect) and republishes status.
func (t *Transport) onConnect(c paho.Client) {
	t.log.Info("mqtt connected", "broker", t.opt.Broker)
	subs := map[string]byte{t.opt.Topics.Cmd(): 1, t.opt.Topics.CmdFilter(): 1, t.opt.Topics.WillFilter(): 1}
	tok := c.SubscribeMultiple(subs, t.enqueue)
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.log.Error("mqtt subscribe failed", "err", tok.Error())
	} else {
		t.subOnce.Do(func() { close(t.subscribed) })
	}
	// Republish every retained message: the broker may have restarted
	// without them, and nothing was published while the link was down.
	t.mu.Lock()
	msgs := make(map[string][]byte, len(t.retained))
	for topic, b := range t.retained {
		msgs[topic] = b
	}
	t.mu.Unlock()
	for topic, b := range msgs {
		c.Publish(topic, t.qos(topic, true), true, b)
	}
}

// enqueue is paho's message handler: it must never block, or it stalls the
// client's pings and can deadlock it.
func (t *Transport) enqueue(_ paho.Client, m paho.Message) {
	if m.Retained() && !strings.HasPrefix(m.Topic(), t.opt.Topics.base()+"/will/") {
		// A retained command would be replayed to every new subscription,
		// long after it was sent: never act on one.
		t.log.Warn("mqtt: retained message on a command topic ignored", "topic", m.Topic())
		return
	}
	in := inbound{topic: m.Topic(), payload: m.Payload(), received: time.Now()}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	select {
	case t.q <- in:
	default:
		t.log.Error("mqtt inbound queue full: message dropped", "topic", in.topic)
	}
}

func (t *Transport) work() {
	defer close(t.done)
	willPrefix := strings.TrimSuffix(t.opt.Topics.WillFilter(), "+")
	agentPrefix := t.opt.Topics.Cmd() + "/"
	for in := range t.q {
		if agent, ok := strings.CutPrefix(in.topic, willPrefix); ok {
			if api.ValidName(agent) == nil {
				t.h.AgentGone(agent)
			}
			continue
		}
		req, derr := api.DecodeRequest(in.payload, t.opt.MaxPayload)
		if topicAgent, own := strings.CutPrefix(in.topic, agentPrefix); own {
			if api.ValidName(topicAgent) != nil {
				continue // cannot be answered, and cannot be anyone's
			}
			if derr == nil && req.Agent != topicAgent {
				derr = &api.Error{Code: api.CodeBadRequest, Field: "agent",
					Message: fmt.Sprintf("agent %q does not match the topic %s: an agent speaks only for itself", req.Agent, in.topic)}
			}
			req.Agent = topicAgent // the reply goes to whoever may write this topic
		}
		var rep api.Reply
		if derr != nil {
			t.h.Refused(req, derr)
			rep = api.ErrorReply(req.ID, derr)
		} else {
			rep = t.h.Handle(req, in.received)
		}
		if api.ValidName(req.Agent) == nil {
			t.Publish(t.opt.Topics.Reply(req.Agent), false, api.EncodeReply(rep))
		} else {
			// Nobody to address: the refusal goes to the events topic.
			t.Publish(t.opt.Topics.Events(), false, api.EncodeEvent(api.Event{Kind: api.EventReply, Reply: &rep}))
		}
	}
}

// Publish sends a message without waiting for the broker. Nothing is
// queued while the connection is down: retained messages are kept and
// republished on the next connect; others (events) are dropped. Queueing
// QoS 1 publishes across a reconnect is also what races inside paho
// v1.5.1's session resume (eclipse-paho/paho.mqtt.golang#703).
func (t *Transport) Publish(topic string, retained bool, payload []byte) {
	if retained {
		t.mu.Lock()
		t.retained[topic] = payload
		t.mu.Unlock()
	}
	if t.client.IsConnectionOpen() {
		t.client.Publish(topic, t.qos(topic, retained), retained, payload)
	}
}

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
	t.Publish(t.opt.Topics.Events(), false, api.EncodeEvent(ev))
}

// PublishState publishes an actuator's retained state (supervisor.Publisher).
func (t *Transport) PublishState(st api.State) {
	t.Publish(t.opt.Topics.State(st.Actuator), true, api.EncodeState(st))
}

// SetStatus publishes the retained status when it changed.
func (t *Transport) SetStatus(s api.Status) {
	s.State = api.StateOnline
	b := api.EncodeStatus(s)
	t.mu.Lock()
	changed := string(b) != string(t.retained[t.opt.Topics.Status()])
	t.mu.Unlock()
	if changed {
		t.Publish(t.opt.Topics.Status(), true, b)
	}
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
		t.client.Disconnect(250)
		t.mu.Lock()
		t.closed = true
		close(t.q)
		t.mu.Unlock()
		<-t.done
	})
	return err
}
