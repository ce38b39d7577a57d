package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/nodelay"
	"github.com/saga-supervisor/saga-supervisor/internal/secretfile"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// DefaultBroker is the embedded broker of the supervisor's default
// configuration.
const DefaultBroker = "tcp://127.0.0.1:1883"

// DefaultTimeout bounds a call whose context has no deadline.
const DefaultTimeout = 5 * time.Second

// Options configures a Client.
type Options struct {
	// Broker is the broker's URL: tcp://host:1883, ssl://host:8883,
	// ws://host/mqtt, ... Default DefaultBroker.
	Broker string
	// Agent is who this controller is: a topic level (1..64 bytes, no '/',
	// '+', '#'). Replies come on <prefix>/<device>/reply/<agent>. Required.
	Agent string
	// Prefix and Device name the supervisor's topics; Prefix defaults to
	// mqtt.DefaultPrefix. Device is required.
	Prefix string
	Device string
	// ClientID is the MQTT client id; default Agent. Two connections with
	// one client id take the broker session from each other, as two
	// controllers with one agent name take the lease from each other. The
	// embedded broker accepts only Agent or Agent/<tag> (a watcher beside
	// the controller: "planner/watch").
	ClientID string
	// Username defaults to Agent when a password is given: the embedded
	// broker (and mosquitto with use_username_as_clientid) binds the
	// client id, the username and the agent name together.
	Username string
	Password string
	// PasswordFile, when Password is empty, is a file holding only the
	// password, such as the one the supervisor generates for the agent
	// (<mqtt.auth.credentials_dir>/<agent>): private to its owner (0600 or
	// 0400), one line. A missing or readable-by-others file is an error.
	PasswordFile string
	TLS          *tls.Config // nil: the URL's default (none for tcp://)
	// TTL is the lease TTL asked for (rounded up to a millisecond); 0: the
	// supervisor's default. What was granted is in Lease().
	TTL time.Duration
	// Timeout bounds connecting, and every call whose context has no
	// deadline. Default DefaultTimeout.
	Timeout time.Duration
	// NoLease connects without taking a lease: for operator tools and
	// watchers. Halt, Reset, Status and Watch work; Begin returns
	// ErrNoLease.
	NoLease bool

	// openConn replaces paho's dialer (tests kill the connection through
	// it, the way a crashed process drops it).
	openConn paho.OpenConnectionFunc
}

// Lease is the lease a Client holds, as granted.
type Lease struct {
	ID        string
	Epoch     uint64
	TTL       time.Duration
	Heartbeat time.Duration // how often the client heartbeats
}

// Client is one controller's connection to a supervisor, holding one lease
// (unless dialled with NoLease). Its methods are safe for concurrent use.
type Client struct {
	opt    Options
	topics mqtt.Topics
	mc     paho.Client
	idPre  string        // "<agent>-<session>-": ids are idPre + counter
	will   string        // this connection's will payload, named in hello
	n      atomic.Uint64 // request counter

	mu      sync.Mutex
	pending map[string]func(api.Reply)
	lease   Lease
	leased  bool
	ackAt   time.Time     // when the last acknowledged heartbeat (or the hello) was sent
	lostErr error         // why the lease is unusable; set once
	lost    chan struct{} // closed when lostErr is set
	goneErr error         // why the connection is unusable; set once
	gone    chan struct{} // closed when goneErr is set

	hbStop chan struct{}
	hbDone chan struct{}
	hbOnce sync.Once

	closeOnce sync.Once

	watchMu    sync.Mutex // subscribing to the watched topics
	subbed     bool       // subscribed (under watchMu)
	wmu        sync.Mutex // the fields below
	watchers   map[*watcher]struct{}
	lastStatus *Update           // the last status seen, replayed to a new watcher
	lastState  map[string]Update // the last state seen per topic, likewise
}

// Dial connects to the broker with a clean session and a last will on the
// agent's will topic, subscribes to the agent's reply topic and, unless
// NoLease, takes a lease and starts heartbeating. ctx bounds connecting and
// the hello; with no deadline, Options.Timeout does. A refused hello is an
// *Error (TOO_MANY_LEASES, SHUTTING_DOWN, BAD_REQUEST for a TTL out of
// bounds).
func Dial(ctx context.Context, opt Options) (*Client, error) {
	if opt.Broker == "" {
		opt.Broker = DefaultBroker
	}
	if opt.Prefix == "" {
		opt.Prefix = mqtt.DefaultPrefix
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.ClientID == "" {
		opt.ClientID = opt.Agent
	}
	if opt.Password == "" && opt.PasswordFile != "" {
		pw, err := secretfile.Read(opt.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("client: password: %w", err)
		}
		opt.Password = pw
	}
	if opt.Username == "" && opt.Password != "" {
		opt.Username = opt.Agent
	}
	if err := api.ValidName(opt.Agent); err != nil {
		return nil, fmt.Errorf("client: agent %q: %w", opt.Agent, err)
	}
	topics := mqtt.Topics{Prefix: opt.Prefix, Device: opt.Device}
	if err := topics.Validate(); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if opt.TTL < 0 {
		return nil, fmt.Errorf("client: negative TTL %v", opt.TTL)
	}
	var session [4]byte
	rand.Read(session[:])
	// The will's payload names this connection: the supervisor ends the
	// lease only for a will naming the connection that took it, so a late
	// will of an earlier process of this agent cannot end ours.
	var will [12]byte
	rand.Read(will[:])
	c := &Client{opt: opt, topics: topics, idPre: opt.Agent + "-" + hex.EncodeToString(session[:]) + "-", will: "w" + hex.EncodeToString(will[:]), pending: map[string]func(api.Reply){},
		lost: make(chan struct{}), gone: make(chan struct{}),
		hbStop: make(chan struct{}), hbDone: make(chan struct{}), watchers: map[*watcher]struct{}{}}

	ctx, cancel := c.bound(ctx)
	defer cancel()
	connectTimeout := opt.Timeout
	if dl, ok := ctx.Deadline(); ok {
		connectTimeout = time.Until(dl)
	}
	co := paho.NewClientOptions().
		// No Nagle: a request and its reply are small packets that wait
		// for each other (docs/API.md, "Latency").
		SetDialer(nodelay.Dialer(connectTimeout)).
		AddBroker(opt.Broker).
		SetClientID(opt.ClientID).
		// A clean session: a controller that reconnects must take a new
		// lease anyway, and nothing queued for the old one may act.
		SetCleanSession(true).
		// No reconnect: the will has ended the lease; see the package doc.
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(connectTimeout).
		SetKeepAlive(10*time.Second).
		SetWill(topics.Will(opt.Agent), c.will, 1, false).
		SetConnectionLostHandler(func(_ paho.Client, err error) { c.connectionLost(err) })
	if opt.Username != "" {
		co.SetUsername(opt.Username).SetPassword(opt.Password)
	}
	if opt.TLS != nil {
		co.SetTLSConfig(opt.TLS)
	}
	if opt.openConn != nil {
		co.SetCustomOpenConnectionFn(opt.openConn)
	}
	c.mc = paho.NewClient(co)
	if err := wait(ctx, c.mc.Connect()); err != nil {
		c.mc.Disconnect(0)
		if errors.Is(err, packets.ErrorRefusedNotAuthorised) || errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword) {
			if opt.Username != "" && loginWithoutWill(ctx, co) {
				return nil, fmt.Errorf("client: connect %s as %q: %w %s: the login is good, but the broker's ACL gives %s no topic of "+
					"device %q (prefix %q): its supervisor serves another device (%v)",
					opt.Broker, opt.Username, ErrWillRefused, topics.Will(opt.Agent), opt.Username, opt.Device, topics.Prefix, err)
			}
			return nil, fmt.Errorf("client: connect %s as %q: %w (%v)", opt.Broker, opt.Username, ErrLoginRefused, err)
		}
		return nil, fmt.Errorf("client: connect %s: %w", opt.Broker, err)
	}
	// Subscribe to the replies before the first request.
	if err := wait(ctx, c.mc.Subscribe(topics.Reply(opt.Agent), 1, c.onReply)); err != nil {
		c.mc.Disconnect(0)
		return nil, fmt.Errorf("client: subscribe %s: %w", topics.Reply(opt.Agent), err)
	}
	if opt.NoLease {
		close(c.hbDone)
		return c, nil
	}
	if err := c.hello(ctx); err != nil {
		close(c.hbDone)
		c.mc.Disconnect(0)
		return nil, err
	}
	go c.heartbeat()
	return c, nil
}

// loginWithoutWill reports whether the broker takes the connection co
// describes once its last will is left out, and then disconnects at once.
// The locked embedded broker refuses a will on a topic its ACL does not
// give the user with the same CONNACK code as a wrong password; a will on
// another device's topic (a controller pointed at the wrong device or
// prefix) is told apart this way. Asked only after a refusal: a wrong
// password is refused again, and nothing else was connected.
func loginWithoutWill(ctx context.Context, co *paho.ClientOptions) bool {
	probe := *co
	probe.UnsetWill().SetConnectionLostHandler(func(paho.Client, error) {})
	mc := paho.NewClient(&probe)
	if wait(ctx, mc.Connect()) != nil {
		mc.Disconnect(0)
		return false
	}
	mc.Disconnect(0)
	return true
}

// wait waits for a paho token, or for ctx.
func wait(ctx context.Context, tok paho.Token) error {
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// bound gives ctx the client's timeout when it has no deadline.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.opt.Timeout)
}

func (c *Client) hello(ctx context.Context) error {
	req := api.Request{Op: api.OpHello, Will: c.will}
	if c.opt.TTL > 0 {
		req.TTLMS = int64((c.opt.TTL + time.Millisecond - 1) / time.Millisecond)
	}
	sent := time.Now()
	r, err := c.call(ctx, req, false)
	if err != nil {
		return err
	}
	l := Lease{ID: r.Lease, Epoch: r.Epoch, TTL: time.Duration(r.TTLMS) * time.Millisecond,
		Heartbeat: time.Duration(r.HeartbeatMS) * time.Millisecond}
	if l.ID == "" || l.Epoch == 0 || l.TTL <= 0 {
		return &Error{Op: string(api.OpHello), ID: r.ID, Code: api.CodeInternal,
			Message: fmt.Sprintf("hello granted no usable lease (lease %q, epoch %d, ttl_ms %d)", r.Lease, r.Epoch, r.TTLMS)}
	}
	if l.Heartbeat <= 0 || l.Heartbeat > l.TTL/4 {
		l.Heartbeat = l.TTL / 4
	}
	if l.Heartbeat <= 0 {
		l.Heartbeat = time.Millisecond
	}
	c.mu.Lock()
	c.lease, c.leased = l, true
	c.mu.Unlock()
	c.acked(sent)
	return nil
}

// Lease returns the lease held, and false when the client holds none (NoLease).
func (c *Client) Lease() (Lease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lease, c.leased
}

// Agent returns the agent name.
func (c *Client) Agent() string { return c.opt.Agent }

// Topics returns the supervisor's topic layout the client uses.
func (c *Client) Topics() mqtt.Topics { return c.topics }

// Lost is closed when the lease can no longer be used: lost (see the
// package doc), or the client closed. Err says why.
func (c *Client) Lost() <-chan struct{} { return c.lost }

// Err is nil while the lease is usable; then why it is not. It matches
// ErrLeaseLost (or ErrClosed after Close), and wraps the *Error that ended
// the lease, if any.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lostErr
}

// markLost records why the lease is unusable, once. bye: the supervisor
// may still hold the lease (the client gave up on it), so tell it to end it
// now rather than at expiry.
func (c *Client) markLost(err error, bye bool) {
	c.mu.Lock()
	if c.lostErr != nil {
		c.mu.Unlock()
		return
	}
	c.lostErr = err
	close(c.lost)
	l, leased := c.lease, c.leased
	c.mu.Unlock()
	if bye && leased {
		// Fire and forget, off the caller's goroutine (it may be paho's).
		go func() {
			b, err := api.EncodeRequest(api.Request{ID: c.nextID(), Agent: c.opt.Agent, Op: api.OpBye, Lease: l.ID, Epoch: l.Epoch})
			if err == nil {
				c.mc.Publish(c.topics.AgentCmd(c.opt.Agent), 1, false, b)
			}
		}()
	}
}

// markGone records why the connection is unusable, once.
func (c *Client) markGone(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.goneErr != nil {
		return
	}
	c.goneErr = err
	close(c.gone)
}

func (c *Client) connectionLost(err error) {
	c.markGone(fmt.Errorf("%w: %v", ErrConnectionLost, err))
	c.mu.Lock()
	leased := c.leased
	c.mu.Unlock()
	if leased {
		// The broker publishes the will: the supervisor ends the lease.
		c.markLost(fmt.Errorf("%w: %w: %v", ErrLeaseLost, ErrConnectionLost, err), false)
	} else {
		c.markLost(fmt.Errorf("%w: %v", ErrConnectionLost, err), false)
	}
}

func (c *Client) nextID() string {
	return c.idPre + strconv.FormatUint(c.n.Add(1), 10)
}

// onReply is paho's handler for the reply topic. It must not block.
func (c *Client) onReply(_ paho.Client, m paho.Message) {
	var r api.Reply
	if err := json.Unmarshal(m.Payload(), &r); err != nil || r.ID == "" {
		return // not a reply to anything of ours
	}
	c.mu.Lock()
	f := c.pending[r.ID]
	delete(c.pending, r.ID) // the first reply for an id is the truth
	c.mu.Unlock()
	if f != nil {
		f(r)
	}
}

// publish sends req (filling in its id and agent), with f to be called with
// its reply, and (if waitAck) waits until the broker has taken it or ctx
// ends.
func (c *Client) publish(ctx context.Context, req *api.Request, waitAck bool, f func(api.Reply)) error {
	req.ID, req.Agent = c.nextID(), c.opt.Agent
	b, err := api.EncodeRequest(*req)
	if err != nil {
		return encodeError(req.Op, err)
	}
	c.mu.Lock()
	if c.goneErr != nil {
		err := c.goneErr
		c.mu.Unlock()
		return err
	}
	c.pending[req.ID] = f
	c.mu.Unlock()
	topic := c.topics.AgentCmd(c.opt.Agent)
	if req.Op == api.OpHalt {
		// The e-stop topic is read on the supervisor's own connection for
		// it: a halt there never waits at the broker behind commands.
		topic = c.topics.EstopAgent(c.opt.Agent)
	}
	tok := c.mc.Publish(topic, 1, false, b)
	if !waitAck {
		return nil
	}
	if err := wait(ctx, tok); err != nil {
		c.forget(req.ID)
		if gerr := c.gone0(); gerr != nil {
			return gerr
		}
		return fmt.Errorf("client: %s %s: publish: %w", req.Op, req.ID, err)
	}
	return nil
}

func (c *Client) forget(id string) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

func (c *Client) gone0() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.goneErr
}

// call sends a request and waits for its reply. leased: the request acts
// under the lease, which is filled in; it is not sent once the lease is
// lost, and a reply saying the lease ended marks the client lost.
func (c *Client) call(ctx context.Context, req api.Request, leased bool) (api.Reply, error) {
	var lost <-chan struct{}
	if leased {
		c.mu.Lock()
		switch {
		case c.lostErr != nil:
			err := c.lostErr
			c.mu.Unlock()
			return api.Reply{}, err
		case !c.leased:
			c.mu.Unlock()
			return api.Reply{}, ErrNoLease
		}
		req.Lease, req.Epoch = c.lease.ID, c.lease.Epoch
		c.mu.Unlock()
		lost = c.lost
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	ch := make(chan api.Reply, 1)
	if err := c.publish(ctx, &req, true, func(r api.Reply) { ch <- r }); err != nil {
		return api.Reply{}, err
	}
	answer := func(r api.Reply) (api.Reply, error) {
		if r.OK {
			return r, nil
		}
		e := replyError(req.Op, r)
		if leased && errors.Is(e, ErrLeaseLost) {
			c.markLost(fmt.Errorf("%w: %w", ErrLeaseLost, e), false)
		}
		return r, e
	}
	var err error
	select {
	case r := <-ch:
		return answer(r)
	case <-lost:
		err = c.Err()
	case <-c.gone:
		err = c.gone0()
	case <-ctx.Done():
		err = fmt.Errorf("client: %s %s: no reply: %w", req.Op, req.ID, ctx.Err())
	}
	c.forget(req.ID)
	select {
	case r := <-ch: // the reply came after all: it is the truth
		return answer(r)
	default:
		return api.Reply{}, err
	}
}

// heartbeat renews the lease every Lease().Heartbeat, without waiting for
// one heartbeat's reply before sending the next; it marks the client lost
// when a heartbeat is refused or none has been acknowledged for a TTL.
func (c *Client) heartbeat() {
	defer close(c.hbDone)
	l, _ := c.Lease()
	t := time.NewTicker(l.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-c.hbStop:
			return
		case <-c.lost:
			return
		case <-t.C:
		}
		if since := time.Since(c.lastAck()); since > l.TTL {
			c.markLost(fmt.Errorf("%w: no heartbeat acknowledged for %v (TTL %v)", ErrLeaseLost, since.Round(time.Millisecond), l.TTL), true)
			return
		}
		sent := time.Now()
		req := api.Request{Op: api.OpHeartbeat, Lease: l.ID, Epoch: l.Epoch}
		// Not waiting for the broker's PUBACK: the reply is what counts,
		// and the next heartbeat must not wait for this one.
		err := c.publish(context.Background(), &req, false, func(r api.Reply) {
			if r.OK {
				c.acked(sent)
				return
			}
			c.markLost(fmt.Errorf("%w: heartbeat refused: %w", ErrLeaseLost, replyError(api.OpHeartbeat, r)), false)
		})
		if err == nil {
			// A reply that never comes must not stay pending for ever.
			id := req.ID
			time.AfterFunc(l.TTL, func() { c.forget(id) })
		}
	}
}

// acked records that a heartbeat (or the hello) sent at sent was
// acknowledged: the supervisor renewed the lease no earlier than that.
func (c *Client) acked(sent time.Time) {
	c.mu.Lock()
	if sent.After(c.ackAt) {
		c.ackAt = sent
	}
	c.mu.Unlock()
}

func (c *Client) lastAck() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ackAt
}

// stopHeartbeat stops the heartbeats and waits until none is being sent.
func (c *Client) stopHeartbeat() {
	c.hbOnce.Do(func() { close(c.hbStop) })
	<-c.hbDone
}

// Close ends the lease with a bye (its open sagas are unwound: commit or
// abort them first), then disconnects cleanly, which suppresses the will.
// ctx bounds waiting for the bye's reply. It returns the bye's refusal, if
// any (LEASE_EXPIRED: the lease had ended already); the client is closed
// either way, and later calls return ErrClosed. A second Close returns nil.
func (c *Client) Close(ctx context.Context) error {
	var err error
	c.closeOnce.Do(func() {
		c.stopHeartbeat()
		c.mu.Lock()
		byeNeeded := c.leased && c.lostErr == nil && c.goneErr == nil
		c.mu.Unlock()
		if byeNeeded {
			_, err = c.call(ctx, api.Request{Op: api.OpBye}, true)
			if errors.Is(err, ErrLeaseLost) {
				err = c.Err() // the lease ended before the bye: say so
			}
		}
		c.markLost(ErrClosed, false)
		c.markGone(ErrClosed)
		c.mc.Disconnect(250)
	})
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// Halt latches the supervisor's e-stop: every actuator to its safe policy,
// every command refused with HALTED until an operator resets. It needs no
// lease (it works on a lost or NoLease client while connected).
//
// The halt goes on the agent's e-stop topic (estop/<agent>), which the
// supervisor reads on an MQTT connection of its own.
func (c *Client) Halt(ctx context.Context, reason string) error {
	_, err := c.call(ctx, api.Request{Op: api.OpHalt, Reason: reason}, false)
	return err
}

// Reset clears a halt with the operator token. A wrong token is an *Error
// matching ErrUnauthorized; a supervisor not ready again, ErrNotReady.
func (c *Client) Reset(ctx context.Context, token string) error {
	_, err := c.call(ctx, api.Request{Op: api.OpReset, Token: token}, false)
	return err
}

// HaltZone latches the halt of one zone of the supervisor's configuration:
// its actuators go to their safe policies and steps on them are refused
// with ZONE_HALTED until an operator resets the zone; the other zones keep
// serving. A zone the supervisor does not have halts everything instead,
// and the error carries UNKNOWN_ZONE. It needs no lease.
func (c *Client) HaltZone(ctx context.Context, zone, reason string) error {
	_, err := c.call(ctx, api.Request{Op: api.OpHalt, Reason: reason, Zone: zone}, false)
	return err
}

// ResetZone clears one zone's halt with the operator token (a full halt
// is cleared by Reset, and neither clears the other).
func (c *Client) ResetZone(ctx context.Context, token, zone string) error {
	_, err := c.call(ctx, api.Request{Op: api.OpReset, Token: token, Zone: zone}, false)
	return err
}

// Status returns the supervisor's full status object (what its HTTP status
// endpoint serves; it always has "ready" and "halted").
func (c *Client) Status(ctx context.Context) (json.RawMessage, error) {
	r, err := c.call(ctx, api.Request{Op: api.OpStatus}, false)
	if err != nil {
		return nil, err
	}
	return r.Status, nil
}
