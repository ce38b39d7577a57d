package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/nodelay"
	"github.com/saga-supervisor/saga-supervisor/internal/retrylog"
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
	// dial and estopDial remember each connection's failed attempts: the
	// last error (in Ready) and when it is logged again.
	dial, estopDial retrylog.Gate
	// tried is closed once the command connection's first attempt has
	// connected or failed: Start waits no longer for a broker that is not
	// there.
	tried     chan struct{}
	triedOnce sync.Once
	// seen remembers the last requests received, by agent and id, so that
	// a broker's redelivery (DUP) of one already received is not served
	// again: its reply, sent or queued, would come twice and out of order.
	seen recentIDs
}

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
		linked: make(chan struct{}), stopping: make(chan struct{}), tried: make(chan struct{}),
		// A restarted daemon's statuses sort after its predecessor's, as
		// long as the clock did not step back by more than the statuses
		// published since.
		statusSeq: uint64(time.Now().UnixMicro())}
	t.store = newCopyingStore()
	// Each connection's handler is its default handler too: on a resumed
	// session the broker sends what it queued for the client (up to its
	// in-flight window) right after CONNACK, before onConnect has
	// subscribed. paho acknowledges nothing that no handler takes, so
	// without one a restarted daemon left the broker's window full of
	// unacknowledged messages, and the broker sent it nothing more: ready,
	// and deaf to every command (or e-stop). The e-stop connection
	// subscribes to nothing else; on the command connection a message on
	// another topic (one Retained read, arriving after it unsubscribed)
	// is acknowledged and dropped (enqueueSession).
	co := t.clientOptions(opt.ClientID).
		SetStore(t.store).
		SetWill(opt.Topics.Status(), string(api.EncodeStatus(api.Status{State: api.StateOffline})), 1, true).
		SetOnConnectHandler(t.onConnect).
		SetDefaultPublishHandler(t.enqueueSession)
	// The e-stop topics have a connection of their own, so a halt published
	// there never queues at the broker behind a flood of commands to the
	// main connection (brokers queue per client; mosquitto drops QoS 1
	// messages beyond max_queued_messages).
	eo := t.clientOptions(opt.ClientID + EstopSuffix).SetOnConnectHandler(t.onEstopConnect).SetDefaultPublishHandler(t.onEstop)
	t.estop = paho.NewClient(eo)
	t.client = paho.NewClient(co)
	go t.publisher() // publishes nothing until connected; retained messages wait
	return t, nil
}

// Start connects both connections and serves requests to h. It waits
// briefly (3 s for the first attempt, 5 s more for both subscriptions once
// connected) for both to be subscribed, so that a request
// sent the moment it returns is not lost when the broker is there; if the
// broker is not, it returns without them and keeps retrying in the
// background: the supervisor runs, observable and not ready, without it.
// Each failed attempt's error is in Ready; it is logged at the first
// failure, when it changes, and then with a doubling pause (package
// retrylog). On an error the transport is closed. Call it once.
func (t *Transport) Start(h Handler) error {
	if h == nil {
		return errors.New("mqtt: Start needs a Handler")
	}
	t.mu.Lock()
	t.h = h
	t.mu.Unlock()
	t.estop.Connect() // retries in the background; the main connection decides readiness to serve
	tok := t.client.Connect()
	first := time.NewTimer(startConnectWait)
	defer first.Stop()
	select { // the first attempt's verdict
	case <-t.tried:
	case <-first.C:
	}
	if t.dial.Err() == nil && t.client.IsConnectionOpen() {
		// The broker is there: wait for both subscriptions, with one
		// bound for the two (never one each).
		subs := time.NewTimer(startSubscribeWait)
		defer subs.Stop()
	wait:
		for _, ch := range []chan struct{}{t.subscribed, t.estopSubd} {
			select {
			case <-ch:
			case <-subs.C:
				t.log.Warn("mqtt: connected to the broker, but not yet subscribed: serving once the subscriptions are confirmed", "broker", t.opt.Broker)
				break wait
			}
		}
	}
	// With ConnectRetry the token completes only once connected, or with
	// an error that is not retried.
	if tok.WaitTimeout(0) && tok.Error() != nil {
		t.once.Do(func() { // Close after this does nothing
			t.client.Disconnect(0)
			t.estop.Disconnect(0)
			t.stopWorker()
		})
		return fmt.Errorf("mqtt: connect %s: %w", t.opt.Broker, tok.Error())
	}
	return nil
}

// How long Start waits for the first connection attempt's verdict, and
// then, with the broker there, for both subscriptions.
const (
	startConnectWait   = 3 * time.Second
	startSubscribeWait = 5 * time.Second
)

// onNotify follows one connection's attempts: a failure is remembered
// (Ready says it) and logged through the connection's gate; the first
// connect after failures is logged with how long it took.
func (t *Transport) onNotify(clientID string, n paho.ConnectionNotification) {
	g, which := &t.dial, "command"
	if clientID != t.opt.ClientID {
		g, which = &t.estopDial, "e-stop"
	}
	switch n.(type) {
	case paho.ConnectionNotificationFailed, paho.ConnectionNotificationConnected:
		if g == &t.dial {
			defer t.triedOnce.Do(func() { close(t.tried) })
		}
	}
	switch n := n.(type) {
	case paho.ConnectionNotificationFailed:
		if g != &t.dial && !t.up.Load() {
			// Both are down: the command connection's line says it for
			// both (one part, one line).
			g.Record(n.Reason, time.Now())
			return
		}
		if log, attempts := g.Failed(n.Reason, time.Now()); log {
			t.log.Warn("mqtt: cannot connect to the broker; retrying", "broker", t.opt.Broker, "connection", which,
				"client", clientID, "err", n.Reason, "attempts", attempts)
		}
	case paho.ConnectionNotificationConnected:
		if was, d, logged := g.Up(time.Now()); was && (logged || g == &t.dial) {
			t.log.Info("mqtt: connected to the broker after failing", "broker", t.opt.Broker, "connection", which, "down_for", d.Round(time.Millisecond))
		}
	}
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
		SetConnectionLostHandler(func(c paho.Client, err error) { t.onLost(clientID, c, err) }).
		SetConnectionNotificationHandler(func(_ paho.Client, n paho.ConnectionNotification) { t.onNotify(clientID, n) })
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
// so it may run after the next connection is up and subscribed (after a
// client-id takeover, the reconnect's onConnect can come first). A loss
// found with the client connected again is the old connection's, and
// changes nothing: marking the new one down would leave the daemon not
// ready and its replies waiting for a link that is up. The new
// connection's own loss, if it comes, is reported in turn.
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
	// snapshot published from here could race the publisher's newer status
	// and leave the broker with the older one).
	select {
	case t.repub <- struct{}{}:
	default: // one is pending already
	}
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

// Name names the transport as a safety input of the supervisor.
func (t *Transport) Name() string { return "mqtt" }

// Ready reports whether commands and e-stops can reach the supervisor:
// both connections to the broker up and subscribed. While not, the
// supervisor is not ready (a controller cannot be answered, and an e-stop
// published on the broker would not arrive).
func (t *Transport) Ready() error {
	switch {
	case !t.up.Load():
		if err := t.dial.Err(); err != nil {
			return fmt.Errorf("not connected to the broker %s: %w", t.opt.Broker, err)
		}
		return fmt.Errorf("not connected to the broker %s", t.opt.Broker)
	case !t.estopUp.Load():
		if err := t.estopDial.Err(); err != nil {
			return fmt.Errorf("the e-stop connection to the broker %s is down: %w", t.opt.Broker, err)
		}
		return fmt.Errorf("the e-stop connection to the broker %s is down", t.opt.Broker)
	}
	return nil
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
