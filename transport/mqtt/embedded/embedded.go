// Package embedded runs an in-process MQTT broker (mochi-mqtt) for the
// daemon's embedded default: `saga-supervisor run` with no configuration
// needs no broker installed.
//
// With a password file and an access policy (transport/mqtt/access), the
// broker checks every client's password, requires its client id to equal
// its username, and holds every publish, retain and subscribe to the
// policy, as the mosquitto acl_file the policy renders would. Without them
// it allows anonymous clients to do anything, which it accepts only on a
// loopback address: for tests, benches and a single robot's own computer.
// It refuses to listen beyond loopback without both passwords and TLS.
//
// Memory is bounded whoever connects: clients, queued and in-flight
// messages per client, and retained messages (see Options).
package embedded

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/saga-supervisor/saga-supervisor/internal/retrylog"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/access"
)

// Defaults of the bounds in Options (a zero field means its default).
const (
	// DefaultMaxClients bounds connected clients. A robot's broker serves
	// the supervisor's three connections, its devices and a handful of
	// agents; every client costs its queues below.
	DefaultMaxClients = 256
	// DefaultMaxPendingWrites bounds the messages (QoS 0, 1 and 2) queued
	// for delivery to one client. A client that does not read has its
	// further messages dropped (and counted) instead of growing the queue.
	DefaultMaxPendingWrites = 1024
	// DefaultMaxInflight bounds the QoS 1/2 messages held per client
	// awaiting its acknowledgement (connected or in a kept session);
	// beyond it a message for that client is dropped.
	DefaultMaxInflight = 1024
	// DefaultReceiveMaximum bounds the QoS 1/2 messages a client may have
	// unacknowledged towards the broker (mochi's default).
	DefaultReceiveMaximum = 1024
	// DefaultMaxRetained bounds the retained messages clients store. A
	// publish that would add a retained topic beyond it is refused (an
	// update or removal of an existing one is not). The policy already
	// bounds retained topics by the configuration (status, one state topic
	// per actuator, one per device); this holds in anonymous mode too (and
	// in both, for a new topic published by several clients at once, up to
	// one message per client over). mochi's own $SYS topics (about 20, a
	// fixed set it stores on its own schedule) are not counted: counted,
	// one appearing just then took the room a client's status needed.
	DefaultMaxRetained = 4096
	// DefaultPaceAt is how many messages may be queued to one subscriber
	// (QoS 1 and 2, awaiting its acknowledgement) before publishes on a
	// paced topic wait for it (see Options.Paced). Small, so that a message
	// that had to wait still has few ahead of it; far below MaxInflight,
	// so that publishers arriving together never overflow the queue.
	DefaultPaceAt = 64
	// DefaultPaceWait bounds one publish's wait for a congested
	// subscriber. A subscriber that acknowledges nothing for this long is
	// not slow but stuck; the publish then goes ahead as it would without
	// pacing. Well below the keepalive deadline of the waiting client
	// (1.5 times its keepalive, at least 1 s), which its wait holds up.
	DefaultPaceWait = 500 * time.Millisecond
	// DefaultSessionExpiry is how long a disconnected client's session
	// (subscriptions, unacknowledged messages) is kept: long enough for the
	// supervisor to reconnect after a network hiccup without losing
	// commands, short enough that sessions of departed clients do not
	// accumulate (mochi's default keeps them forever).
	DefaultSessionExpiry = time.Hour
)

// sysTopicsEvery is how often mochi refreshes its $SYS topics. Its default,
// every second, stopped the world (runtime.ReadMemStats) and stored some
// twenty retained messages a second on an idle robot: garbage that kept the
// idle heap growing towards its next collection. Nothing here reads them;
// a monitor that does sees values up to a minute old.
const sysTopicsEvery = time.Minute

// Options configures a broker. The zero value of every bound means its
// default above.
type Options struct {
	Addr      string       // listen address, "127.0.0.1:1883"; port 0 picks a free one
	MaxPacket uint32       // bound on a packet's size (0: none)
	Log       *slog.Logger // nil: discard
	// WaitForPort: a listen address in use by another process (another
	// broker on 1883) is no error: StartOptions returns a broker that is
	// not listening yet, and retries the listen in the background
	// (ListenRetry, logged with backoff) until the port is free. Up is
	// closed, and Listening returns nil, once it listens. Off: the port in
	// use is StartOptions' error.
	WaitForPort bool

	// Passwords and Policy lock the broker: a client must give a username
	// and the password Passwords holds for it, and the Policy decides what
	// it may do. Both nil: anonymous, anything allowed (loopback only).
	// One without the other is refused.
	Passwords *access.Passwords
	Policy    *access.Policy
	// TLS, if not nil, serves MQTT over TLS. Required with Passwords off
	// loopback: passwords must not cross a network in clear.
	TLS *tls.Config

	// Paced lists topic filters whose publishes wait while a subscriber
	// of the topic is congested: DefaultPaceAt messages or more queued to
	// it. Without it a client flooding such a topic filled the
	// subscriber's queue, and the broker dropped what came next from
	// anyone: another agent's heartbeat among a flood of steps to the
	// supervisor. Waiting holds up only the publishing client (its
	// packets are read in turn, on a goroutine of its own), so the
	// flooder is slowed to what the subscriber takes, and a client that
	// publishes now and then finds few messages ahead of its own. The
	// daemon paces the command topics. A topic the supervisor publishes to
	// must not be paced: an agent that does not read its replies would
	// hold up the replies to everyone else.
	Paced []string
	// PacedFor, if not empty, names the only subscribers (client ids)
	// whose congestion holds paced publishes back: the supervisor's command
	// connection. Another subscriber of a paced topic that does not read
	// (possible without a policy, which otherwise keeps everyone else off
	// the command topics) then only loses its own messages, instead of
	// making every command wait PaceWait.
	PacedFor []string
	// Urgent, if not nil, picks the payloads on a paced topic that never
	// wait: a halt. (A subscriber's queue has room far beyond PaceAt, so
	// they are not dropped either.)
	Urgent   func(payload []byte) bool
	PaceAt   int           // default DefaultPaceAt
	PaceWait time.Duration // default DefaultPaceWait
	// PaceRate, if positive, also paces each publisher of a paced topic
	// to a token bucket of its own — PaceRate publishes a second
	// sustained, PaceBurst at once — keyed by its username (its client id
	// when anonymous). A publish over the rate waits for its token on its
	// client's goroutine, at most PaceWait, like one waiting for a
	// congested subscriber (an urgent one never waits). The daemon gives
	// the agents' own rate and burst (agents.rate, agents.burst): a
	// flooding agent is then held at the door at the rate its lane admits,
	// its excess left unread in its socket, instead of being read, routed,
	// decoded and refused at whatever rate the CPU allows — on a small
	// board, all of it, and the halt path's share with it.
	PaceRate  float64
	PaceBurst int
	// Reroute, if not nil, may move a publish to another topic before it
	// is routed: it returns the new topic, or "" to leave it. The daemon
	// moves a halt request sent on an agent's command topic to the
	// agent's e-stop topic, which the supervisor reads on a connection of
	// its own, so the halt is not queued behind commands already waiting
	// for the supervisor. A retained publish is never moved, nor one to a
	// topic its publisher may not write.
	Reroute func(topic string, payload []byte) string

	MaxClients       int
	MaxPendingWrites int
	MaxInflight      int
	ReceiveMaximum   int
	MaxRetained      int
	SessionExpiry    time.Duration
}

// Broker is a running in-process broker.
type Broker struct {
	srv      *mqtt.Server
	ln       atomic.Pointer[net.Listener] // nil until it listens (WaitForPort)
	addr     string                       // the address asked for
	hook     *guard
	tls      bool
	once     sync.Once
	closeErr error

	up       chan struct{} // closed once it listens
	waitErr  atomic.Pointer[error]
	stopWait chan struct{} // ends the listen's retries
	waitDone chan struct{} // closed when they have ended (or never ran)
}

// ListenRetry is how often a port in use is tried again (WaitForPort).
const ListenRetry = 500 * time.Millisecond

// Start listens on addr ("127.0.0.1:1883"; port 0 picks a free one) and
// serves MQTT on it to anonymous clients, allowing anything; addr must be
// a loopback address. maxPacket bounds a packet's size (0: no bound). It is
// StartOptions with only those set.
func Start(addr string, maxPacket uint32, log *slog.Logger) (*Broker, error) {
	return StartOptions(Options{Addr: addr, MaxPacket: maxPacket, Log: log})
}

// StartOptions starts a broker as opt says. It refuses, before listening,
// a non-loopback address without both Passwords and TLS, and Passwords
// without Policy or the other way round.
func StartOptions(opt Options) (*Broker, error) {
	if err := checkOptions(opt); err != nil {
		return nil, err
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = opt.MaxPacket
	caps.MaximumClients = int64(orDefault(opt.MaxClients, DefaultMaxClients))
	caps.MaximumClientWritesPending = int32(orDefault(opt.MaxPendingWrites, DefaultMaxPendingWrites))
	caps.MaximumInflight = uint16(min(orDefault(opt.MaxInflight, DefaultMaxInflight), 65535))
	caps.ReceiveMaximum = uint16(min(orDefault(opt.ReceiveMaximum, DefaultReceiveMaximum), 65535))
	expiry := opt.SessionExpiry
	if expiry <= 0 {
		expiry = DefaultSessionExpiry
	}
	caps.MaximumSessionExpiryInterval = uint32(min(expiry/time.Second, 1<<32-1))
	// No forced expiry of messages: mochi would otherwise delete every
	// retained message a day after it was published (its default), and a
	// robot's retained status or state must stay until replaced. Retained
	// messages are bounded by MaxRetained, in-flight ones by MaxInflight.
	caps.MaximumMessageExpiryInterval = 0
	// Topic aliases map per client: bound them (mochi allows 65535).
	caps.TopicAliasMaximum = 64

	ln, lerr := net.Listen("tcp", opt.Addr)
	if lerr != nil && !(opt.WaitForPort && errors.Is(lerr, syscall.EADDRINUSE)) {
		return nil, fmt.Errorf("embedded broker: %w", lerr)
	}
	srv := mqtt.New(&mqtt.Options{Capabilities: caps, Logger: slog.New(newQuietHandler(log.Handler(), time.Second)),
		SysTopicResendInterval: int64(sysTopicsEvery / time.Second)})
	g := &guard{srv: srv, log: log, pw: opt.Passwords, policy: opt.Policy, maxRetained: orDefault(opt.MaxRetained, DefaultMaxRetained),
		pacedTopics: opt.Paced, pacedFor: opt.PacedFor, urgent: opt.Urgent, reroute: opt.Reroute, paceAt: orDefault(opt.PaceAt, DefaultPaceAt), paceWait: opt.PaceWait}
	if g.paceWait <= 0 {
		g.paceWait = DefaultPaceWait
	}
	if opt.PaceRate > 0 {
		g.rate = &rateBuckets{rate: opt.PaceRate, burst: float64(max(1, opt.PaceBurst)), buckets: map[string]*rateBucket{}}
	}
	g.sessions = newSessions(srv, func(cl *mqtt.Client, filters int) {
		g.sessionsRepaired.Add(1)
		log.Warn("embedded broker: a connected client had been dropped from the broker's table (mochi's clean-up of an earlier connection of its id); put back with its subscriptions",
			"client", cl.ID, "filters", filters)
	})
	if err := srv.AddHook(g, nil); err != nil {
		g.sessions.close()
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	b := &Broker{srv: srv, addr: opt.Addr, hook: g, tls: opt.TLS != nil, up: make(chan struct{}), stopWait: make(chan struct{}), waitDone: make(chan struct{})}
	if lerr != nil {
		// Another process has the port: retried until it is ours.
		// Nothing is served meanwhile, so no client of ours can reach a
		// stranger's broker through this one's address by mistake: they
		// wait for Up.
		b.setWaitErr(lerr)
		log.Warn("embedded broker: its address is in use by another process; retrying (MQTT waits for it)", "addr", opt.Addr, "err", lerr)
		go b.retryListen(opt, log)
		return b, nil
	}
	close(b.waitDone)
	// Our own listener: the port is bound before Start returns, so a
	// caller (or a test using port 0) knows the address at once.
	if err := b.serve(ln, opt); err != nil {
		g.sessions.close()
		ln.Close()
		return nil, err
	}
	return b, nil
}

// serve attaches ln (ours, bound) and serves MQTT on it.
func (b *Broker) serve(ln net.Listener, opt Options) error {
	if opt.TLS != nil {
		ln = tls.NewListener(ln, opt.TLS)
	}
	if err := b.srv.AddListener(listeners.NewNet("saga", ln)); err != nil {
		return fmt.Errorf("embedded broker: %w", err)
	}
	b.ln.Store(&ln)
	go b.srv.Serve()
	close(b.up)
	return nil
}

func (b *Broker) setWaitErr(err error) { b.waitErr.Store(&err) }

// retryListen tries the address again every ListenRetry until it listens
// or Close stops it, logging with backoff (internal/retrylog).
func (b *Broker) retryListen(opt Options, log *slog.Logger) {
	defer close(b.waitDone)
	var gate retrylog.Gate
	gate.Failed(*b.waitErr.Load(), time.Now()) // the first failure, logged by StartOptions
	t := time.NewTicker(ListenRetry)
	defer t.Stop()
	for {
		select {
		case <-b.stopWait:
			return
		case <-t.C:
		}
		ln, err := net.Listen("tcp", opt.Addr)
		if err != nil {
			b.setWaitErr(err)
			if ok, n := gate.Failed(err, time.Now()); ok {
				log.Warn("embedded broker: its address is still in use by another process; retrying (MQTT waits for it)", "addr", opt.Addr, "err", err, "attempts", n)
			}
			continue
		}
		if err := b.serve(ln, opt); err != nil {
			ln.Close()
			b.setWaitErr(err)
			log.Error("embedded broker: cannot serve on its address", "addr", opt.Addr, "err", err)
			continue
		}
		_, downFor, _ := gate.Up(time.Now())
		log.Info("embedded broker: listening on its address after it was in use by another process", "addr", opt.Addr, "waited", downFor.Round(time.Millisecond))
		return
	}
}

// Up is closed once the broker listens: at once, unless WaitForPort found
// its address in use.
func (b *Broker) Up() <-chan struct{} { return b.up }

// Listening is nil once the broker listens, and until then says why not:
// its address in use by another process, with the last error.
func (b *Broker) Listening() error {
	select {
	case <-b.up:
		return nil
	default:
	}
	if p := b.waitErr.Load(); p != nil {
		return fmt.Errorf("%s in use by another process, retried every %v: MQTT starts once the port is ours (%w)", b.addr, ListenRetry, *p)
	}
	return fmt.Errorf("%s: not listening yet", b.addr)
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// checkOptions refuses options that would expose the broker.
func checkOptions(opt Options) error {
	if (opt.Passwords == nil) != (opt.Policy == nil) {
		return errors.New("embedded broker: a password file and an access policy go together (passwords alone would let every user do anything; a policy alone would trust any claimed username)")
	}
	if opt.Policy != nil {
		if err := opt.Policy.Validate(); err != nil {
			return fmt.Errorf("embedded broker: %w", err)
		}
	}
	loop, err := IsLoopback(opt.Addr)
	if err != nil {
		return fmt.Errorf("embedded broker: %w", err)
	}
	if !loop {
		switch {
		case opt.Passwords == nil:
			return fmt.Errorf("embedded broker: listening on %q, beyond loopback, needs a password file and an access policy (anonymous clients are allowed on loopback only)", opt.Addr)
		case opt.TLS == nil:
			return fmt.Errorf("embedded broker: listening on %q, beyond loopback, needs TLS (passwords must not cross a network in clear)", opt.Addr)
		}
	}
	return nil
}

// IsLoopback reports whether the listen address addr ("host:port") can be
// reached only from this machine. An empty host, 0.0.0.0 and :: listen on
// every interface, so they are not; a name is resolved and is loopback
// only if every address it resolves to is.
func IsLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "" {
		return false, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return false, fmt.Errorf("listen address %q: %w", addr, err)
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return false, nil
		}
	}
	return len(ips) > 0, nil
}

// Addr is the address the broker listens on.
// Before it listens (WaitForPort), the address asked for.
func (b *Broker) Addr() string {
	if ln := b.ln.Load(); ln != nil {
		return (*ln).Addr().String()
	}
	return b.addr
}

// URL is the broker's address as a client URL (ssl:// with TLS).
func (b *Broker) URL() string {
	if b.tls {
		return "ssl://" + b.Addr()
	}
	return "tcp://" + b.Addr()
}

// Stats counts what the broker refused since it started.
type Stats struct {
	RefusedConnects   int64 // bad or missing password, unknown user, client id ≠ username, forbidden will
	RefusedPublishes  int64 // publishes (or retains) the policy forbids
	RefusedSubscribes int64 // subscriptions (filters) the policy forbids
	RefusedRetained   int64 // retained publishes beyond MaxRetained
	Paced             int64 // publishes on a paced topic that waited: at the door, for a congested subscriber or for their publisher's rate
	DoorWaits         int64 // of those, the ones held at the door (SetDoor): their consumer had no room
	RateWaits         int64 // of those, the ones that waited for their publisher's rate (PaceRate)
	PaceTimeouts      int64 // of those, the ones whose wait ran out (PaceWait): the subscriber was stuck
	Rerouted          int64 // publishes moved to another topic (Reroute): halts sent on a command topic
	Dropped           int64 // messages not delivered: a subscriber's queue (MaxPendingWrites, MaxInflight) was full
	SessionsRepaired  int64 // connected clients put back in mochi's table (sessions.go)
}

// Stats returns the counts of refusals so far.
func (b *Broker) Stats() Stats {
	g := b.hook
	info := b.srv.Info
	return Stats{
		RefusedConnects:   g.connects.Load(),
		RefusedPublishes:  g.publishes.Load(),
		RefusedSubscribes: g.subscribes.Load(),
		RefusedRetained:   g.retained.Load(),
		Paced:             g.paced.Load(),
		RateWaits:         g.rateWaits.Load(),
		DoorWaits:         g.doorWaits.Load(),
		Rerouted:          g.rerouted.Load(),
		PaceTimeouts:      g.paceTimeouts.Load(),
		Dropped:           atomic.LoadInt64(&info.MessagesDropped) + atomic.LoadInt64(&info.InflightDropped),
		SessionsRepaired:  g.sessionsRepaired.Load(),
	}
}

// Close stops the broker. Calling it again does nothing (mochi's own
// Close panics the second time).
//
// The listeners are closed first with a client closer of our own: mochi's
// (Clients.GetByListener) takes the clients' read lock twice, nested, and
// a client's clean-up asking for the write lock in between deadlocks it
// (mochi-mqtt/server#488, unfixed in v2.7.9). Ours takes one copy of the
// clients under one read lock. A listener closes its clients only the
// first time it is closed, so mochi's Close after it does not again.
func (b *Broker) Close() error {
	b.once.Do(func() {
		close(b.stopWait)
		<-b.waitDone
		b.hook.sessions.close()
		b.srv.Listeners.CloseAll(b.closeClients)
		b.closeErr = b.srv.Close()
	})
	return b.closeErr
}

// closeClients disconnects the clients of one listener, from one copy of
// the broker's clients.
func (b *Broker) closeClients(listener string) {
	for _, cl := range b.srv.Clients.GetAll() {
		if cl.Net.Listener == listener && !cl.Closed() {
			_ = b.srv.DisconnectClient(cl, packets.ErrServerShuttingDown)
		}
	}
}

// guard is the mochi hook holding the broker to the password file and the
// policy (both nil: allow all), and the retained store to its bound.
type guard struct {
	mqtt.HookBase
	srv         *mqtt.Server
	log         *slog.Logger
	pw          *access.Passwords
	policy      *access.Policy
	maxRetained int

	pacedTopics []string // topic filters whose publishes wait for a congested subscriber
	pacedFor    []string // client ids whose congestion counts; empty: any subscriber's
	urgent      func(payload []byte) bool
	reroute     func(topic string, payload []byte) string
	paceAt      int
	paceWait    time.Duration

	retainGuard
	sessions *sessions

	connects, publishes, subscribes, retained atomic.Int64
	paced, paceTimeouts, rateWaits, doorWaits atomic.Int64
	door                                      atomic.Pointer[func(topic string) <-chan struct{}] // SetDoor; nil: none
	rerouted                                  atomic.Int64
	rate                                      *rateBuckets // PaceRate; nil: off
	sessionsRepaired                          atomic.Int64
	lastLog                                   atomic.Int64 // unix nanoseconds of the last refusal logged
}

func (g *guard) ID() string { return "saga-access" }

// OnSessionEstablished and OnDisconnect keep the set of connected clients
// the session sweep checks (sessions.go).
func (g *guard) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) { g.sessions.established(cl) }

func (g *guard) OnDisconnect(cl *mqtt.Client, _ error, _ bool) { g.sessions.ended(cl) }

func (g *guard) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnConnectAuthenticate, mqtt.OnACLCheck, mqtt.OnPublish,
		mqtt.OnWill, mqtt.OnRetainMessage, mqtt.OnPacketSent, mqtt.OnPacketProcessed,
		mqtt.OnSessionEstablished, mqtt.OnDisconnect}, []byte{b})
}

// refused logs a refusal at most once a second, so a client hammering the
// broker cannot flood the log; Stats counts them all.
func (g *guard) refused(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := g.lastLog.Load()
	if now-last < int64(time.Second) || !g.lastLog.CompareAndSwap(last, now) {
		return
	}
	g.log.Warn(msg, args...)
}

// OnConnectAuthenticate checks the password, the user's role, that the
// client id is the username, and that the user may publish its will.
func (g *guard) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	if g.pw == nil {
		g.awaitPredecessor(cl)
		return true
	}
	user := string(pk.Connect.Username)
	// Check even without the flags, so a refusal takes the same time.
	ok := g.pw.Check(user, string(pk.Connect.Password)) && pk.Connect.UsernameFlag && pk.Connect.PasswordFlag
	if !ok {
		g.connects.Add(1)
		g.refused("mqtt connect refused: bad or missing username or password", "user", user, "client", cl.ID, "remote", cl.Net.Remote)
		return false
	}
	if err := g.policy.Connect(user, cl.ID); err != nil {
		g.connects.Add(1)
		g.refused("mqtt connect refused", "error", err, "remote", cl.Net.Remote)
		return false
	}
	if pk.Connect.WillFlag && !g.policy.CanPublish(user, pk.Connect.WillTopic, pk.Connect.WillRetain) {
		g.connects.Add(1)
		g.refused("mqtt connect refused: the user may not publish its will", "user", user, "will_topic", pk.Connect.WillTopic, "will_retain", pk.Connect.WillRetain, "remote", cl.Net.Remote)
		return false
	}
	g.awaitPredecessor(cl)
	return true
}

// awaitPredecessor lets an earlier connection of cl's client id finish
// before cl's session begins. mochi (v2.7.9) races the two: the old
// connection's clean-up checks whether it was taken over, and only then —
// possibly after the new session has been registered — unsubscribes the
// id's filters and deletes the id from its clients. The new session was
// then connected but unreachable: what it subscribed to delivered nothing
// (a controller reconnecting at once lost its replies). So an old session
// that ends with its connection (clean) is taken over here, first, and its
// clean-up waited for (at most a second); mochi then finds no session to
// inherit. A persistent session is left to mochi's own takeover, whose
// clean-up deletes nothing. Called on the new connection's goroutine, after
// its login was checked.
func (g *guard) awaitPredecessor(cl *mqtt.Client) {
	old, ok := g.srv.Clients.Get(cl.ID)
	if !ok || old == cl {
		return
	}
	// Field by field: mochi writes other fields of old.Properties (its
	// will) on old's goroutine.
	v5, clean, expiry := old.Properties.ProtocolVersion == 5, old.Properties.Clean, old.Properties.Props.SessionExpiryInterval
	if !(v5 && expiry == 0 || !v5 && clean) {
		return
	}
	if !old.Closed() {
		_ = g.srv.DisconnectClient(old, packets.ErrSessionTakenOver)
	}
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cur, ok := g.srv.Clients.Get(cl.ID); !ok || cur != old {
			return
		}
	}
}

// OnACLCheck is the read check (subscribe and deliver): a filter or a
// topic the user may read. Writes are checked in OnPublish instead, where
// the topic alias is resolved and the retain flag known, and where a
// refusal can drop the message without disconnecting the client (mochi
// disconnects an MQTT 3 client whose QoS 1 publish fails OnACLCheck).
func (g *guard) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	if write || g.policy == nil {
		return true
	}
	if g.policy.CanSubscribe(string(cl.Properties.Username), topic) {
		return true
	}
	// Deliveries are checked too, but a subscription granted already
	// passed this check for every topic it matches.
	g.subscribes.Add(1)
	g.refused("mqtt subscribe refused", "user", string(cl.Properties.Username), "filter", topic)
	return false
}

// OnPublish drops a publish the policy forbids, or one that would add a
// retained topic beyond the bound. The client sees it acknowledged (as
// mosquitto does for MQTT 3) and stays connected: a refusal must not cut
// the supervisor off.
func (g *guard) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		return pk, nil
	}
	retain := pk.FixedHeader.Retain
	if g.policy != nil && !g.policy.CanPublish(string(cl.Properties.Username), pk.TopicName, retain) {
		g.publishes.Add(1)
		g.refused("mqtt publish refused", "user", string(cl.Properties.Username), "topic", pk.TopicName, "retain", retain)
		return pk, packets.CodeSuccessIgnore
	}
	if g.reroute != nil && !retain {
		if to := g.reroute(pk.TopicName, pk.Payload); to != "" && to != pk.TopicName &&
			(g.policy == nil || g.policy.CanPublish(string(cl.Properties.Username), to, false)) {
			pk.TopicName = to
			g.rerouted.Add(1)
		}
	}
	g.pace(cl, pk, retain)
	defer func() {
		if retain {
			g.lockRetain(cl) // released once mochi has stored it (OnRetainMessage)
		}
	}()
	// The check and mochi's store are not one atomic step: clients
	// publishing new retained topics at the same instant may overshoot the
	// bound by at most one message each (so by MaxClients at worst).
	if retain && len(pk.Payload) > 0 {
		if _, exists := g.srv.Topics.Retained.Get(pk.TopicName); !exists && g.clientRetained() >= g.maxRetained {
			g.retained.Add(1)
			g.refused("mqtt retained publish refused: the broker holds its maximum of retained messages", "user", string(cl.Properties.Username), "topic", pk.TopicName, "max", g.maxRetained)
			return pk, packets.CodeSuccessIgnore
		}
	}
	return pk, nil
}

// pace holds a publish on a paced topic, on its client's goroutine, while
// its consumer has no room for it (the door, SetDoor), then while its
// publisher is over its rate (PaceRate), then while a subscriber of the
// topic is congested, for at most paceWait in all; an urgent one (a halt)
// never waits, nor asks the door. Only the publishing client is held up.
func (g *guard) pace(cl *mqtt.Client, pk packets.Packet, retain bool) {
	if !g.isPaced(pk.TopicName) || g.urgent != nil && g.urgent(pk.Payload) {
		return
	}
	deadline := time.Now().Add(g.paceWait)
	if door := g.door.Load(); door != nil && !retain && !g.atDoor(*door, pk.TopicName, deadline) {
		return // the wait ran out: it goes ahead as it would unpaced
	}
	if g.rate != nil {
		key := string(cl.Properties.Username)
		if key == "" {
			key = cl.ID
		}
		if wait := g.rate.take(key, time.Now()); wait > 0 {
			g.paced.Add(1)
			g.rateWaits.Add(1)
			if left := time.Until(deadline); wait > left {
				g.paceTimeouts.Add(1)
				wait = max(0, left)
			}
			time.Sleep(wait)
			if !g.congested(pk.TopicName) {
				return
			}
		}
	}
	if !g.congested(pk.TopicName) {
		return
	}
	g.paced.Add(1)
	for g.congested(pk.TopicName) {
		if time.Now().After(deadline) {
			g.paceTimeouts.Add(1)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// atDoor waits at the door until it lets a publish on topic through, or
// until deadline; it reports whether it was let through. A publish that
// waited is counted (Paced, DoorWaits), one whose wait ran out too
// (PaceTimeouts).
func (g *guard) atDoor(door func(topic string) <-chan struct{}, topic string, deadline time.Time) bool {
	var timer *time.Timer
	for held := false; ; held = true {
		room := door(topic)
		if room == nil {
			if timer != nil {
				timer.Stop()
			}
			return true
		}
		if !held {
			g.paced.Add(1)
			g.doorWaits.Add(1)
			timer = time.NewTimer(time.Until(deadline))
		}
		select {
		case <-room:
		case <-timer.C:
			g.paceTimeouts.Add(1)
			return false
		}
	}
}

// SetDoor puts a door in front of the consumer of the paced topics (nil:
// none). door is asked, on the publishing client's goroutine, about every
// publish on a paced topic that is neither urgent (a halt) nor retained:
// nil lets it through (the door then counts it as on its way), a channel
// holds it until the channel is closed and the door is asked again — at
// most PaceWait, the wait it shares with the rate and the congestion, after
// which the publish goes ahead as it would unpaced. The client's later
// packets stay unread in its socket meanwhile, so TCP and its QoS 1 window
// hold the publisher to what the consumer takes: the daemon's door is the
// supervisor's agent lanes (mqtt.AgentDoor), so a flooding agent costs no
// more than its lane serves. It is set once the consumer exists, after
// Start (the broker is started first).
func (b *Broker) SetDoor(door func(topic string) <-chan struct{}) {
	if door == nil {
		b.hook.door.Store(nil)
		return
	}
	b.hook.door.Store(&door)
}

// rateBuckets are the publishers' token buckets (Options.PaceRate).
type rateBuckets struct {
	rate, burst float64
	mu          sync.Mutex
	buckets     map[string]*rateBucket
}

type rateBucket struct {
	tokens float64
	at     time.Time
}

// maxRateBuckets bounds the buckets kept: beyond it, full ones (their
// publishers quiet for burst/rate) are forgotten, as a new one starts
// full anyway.
const maxRateBuckets = 1024

// take spends a token of key's bucket and returns how long until it was
// due: 0 when one was there. A token not there yet is spent ahead (the
// bucket goes below zero), so publishers of one key waiting side by side
// each wait their turn.
func (r *rateBuckets) take(key string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buckets[key]
	if b == nil {
		if len(r.buckets) >= maxRateBuckets {
			for k, o := range r.buckets {
				if o.tokens+now.Sub(o.at).Seconds()*r.rate >= r.burst {
					delete(r.buckets, k)
				}
			}
		}
		b = &rateBucket{tokens: r.burst, at: now}
		r.buckets[key] = b
	}
	if dt := now.Sub(b.at); dt > 0 {
		b.tokens = min(r.burst, b.tokens+dt.Seconds()*r.rate)
		b.at = now
	}
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / r.rate * float64(time.Second))
}

func (g *guard) isPaced(topic string) bool {
	for _, f := range g.pacedTopics {
		if filterMatches(f, topic) {
			return true
		}
	}
	return false
}

// congested reports whether a connected subscriber of topic has paceAt or
// more messages queued to it and unacknowledged (QoS 1 and 2: the
// supervisor subscribes its commands at QoS 1). A disconnected one is not
// waited for: nothing would drain its queue.
func (g *guard) congested(topic string) bool {
	subs := g.srv.Topics.Subscribers(topic)
	for id := range subs.Subscriptions {
		if g.congestedClient(id) {
			return true
		}
	}
	for _, group := range subs.Shared {
		for id := range group {
			if g.congestedClient(id) {
				return true
			}
		}
	}
	return false
}

// congestedClient reports whether subscriber id counts (PacedFor), is
// connected, and has paceAt or more messages unacknowledged.
func (g *guard) congestedClient(id string) bool {
	if len(g.pacedFor) > 0 && !slices.Contains(g.pacedFor, id) {
		return false
	}
	cl, ok := g.srv.Clients.Get(id)
	return ok && !cl.Closed() && cl.State.Inflight.Len() >= g.paceAt
}

// clientRetained counts the retained messages clients stored: mochi's own
// $SYS topics (a bounded set it adds on its own schedule) do not take
// their room. Only a publish of a new retained topic asks, which is rare.
//
// The count is taken in one pass over one copy of the store: the total
// read first and the $SYS topics counted after it would let a $SYS topic
// mochi added in between be subtracted from a total that did not hold it,
// so a client could store one more than the cap.
func (g *guard) clientRetained() int {
	if n := g.srv.Topics.Retained.Len(); n < g.maxRetained {
		return n // fewer in all, $SYS included: no need to look
	}
	return countClientRetained(g.srv.Topics.Retained.GetAll())
}

// countClientRetained counts the topics of a retained store that are not
// mochi's own ($SYS...).
func countClientRetained(all map[string]packets.Packet) int {
	n := 0
	for topic := range all {
		if !strings.HasPrefix(topic, "$") {
			n++
		}
	}
	return n
}

// filterMatches reports whether the MQTT topic filter matches topic: '+'
// is one level, a trailing '#' this level and all below, and a wildcard in
// the first level does not match a topic starting with '$' (MQTT 4.7.2).
func filterMatches(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	for {
		f, fRest, fMore := strings.Cut(filter, "/")
		if f == "#" {
			return true
		}
		t, tRest, tMore := strings.Cut(topic, "/")
		if f != "+" && f != t {
			return false
		}
		switch {
		case !fMore && !tMore:
			return true
		case !tMore:
			return fRest == "#" // "a/#" matches "a"
		case !fMore:
			return false
		}
		filter, topic = fRest, tRest
	}
}

// retainGuard keeps mochi's storing of a retained message apart from its
// delivery of retained messages on subscribe. mochi v2.7.9 writes a topic
// node's retained path under its index lock when it stores a retained
// message, and reads it without any lock when a subscription's retained
// messages are delivered (mochi-mqtt/server#200): a data race, which the
// race detector reports between the supervisor's retained states and an
// agent's subscribe. The hooks bracket both: a subscribe holds the read
// side from the moment its SUBACK is written (OnPacketSent: the retained
// delivery comes next, and only queues messages) until its packet is
// processed; a retained store holds the write side from the end of
// OnPublish (or OnWill) to OnRetainMessage. Neither window holds any I/O,
// so the waits are short. Either side tries for at most retainWait and
// then goes ahead unguarded (counted): no client's packets may stall on
// this lock (a read side waiting for ever could leave a client, the
// supervisor after a client-id takeover say, connected but hearing
// nothing), and the race's worst case is a node's path rewritten with the
// same topic.
type retainGuard struct {
	retainMu sync.RWMutex
	writers  sync.Map // *mqtt.Client → struct{}: holds retainMu
	readers  sync.Map // *mqtt.Client → struct{}: holds retainMu's read side
	unsafe   atomic.Int64
}

const retainWait = 100 * time.Millisecond

// lockRetain and unlockRetain are a retained store's write side.
func (g *retainGuard) lockRetain(cl *mqtt.Client)   { g.acquire(cl, &g.writers, g.retainMu.TryLock) }
func (g *retainGuard) unlockRetain(cl *mqtt.Client) { release(cl, &g.writers, g.retainMu.Unlock) }

// acquire tries for one side of retainMu (try) for at most retainWait and
// notes in held that cl holds it; when the wait runs out, cl goes ahead
// unguarded and it is counted. Nothing in the broker may wait on this lock
// for ever: a client's packets are read on the goroutine that would wait.
func (g *retainGuard) acquire(cl *mqtt.Client, held *sync.Map, try func() bool) {
	for deadline := time.Now().Add(retainWait); ; time.Sleep(20 * time.Microsecond) {
		if try() {
			held.Store(cl, struct{}{})
			return
		}
		if time.Now().After(deadline) {
			g.unsafe.Add(1)
			return
		}
	}
}

// release gives back the side of retainMu that held says cl holds, if any.
func release(cl *mqtt.Client, held *sync.Map, unlock func()) {
	if _, ok := held.LoadAndDelete(cl); ok {
		unlock()
	}
}

// OnWill guards the store of a retained will published at once (a delayed
// one is published later, elsewhere, unguarded).
func (g *guard) OnWill(cl *mqtt.Client, will mqtt.Will) (mqtt.Will, error) {
	if will.Retain && len(will.Payload) > 0 && cl.Properties.Will.WillDelayInterval == 0 {
		g.lockRetain(cl)
	}
	return will, nil
}

// OnRetainMessage is called once mochi has stored a retained message.
func (g *guard) OnRetainMessage(cl *mqtt.Client, _ packets.Packet, _ int64) { g.unlockRetain(cl) }

// OnPacketSent takes the read side once a subscribe's SUBACK is written:
// mochi delivers the subscription's retained messages next.
func (g *guard) OnPacketSent(cl *mqtt.Client, pk packets.Packet, _ []byte) {
	if pk.FixedHeader.Type != packets.Suback {
		return
	}
	g.acquire(cl, &g.readers, g.retainMu.TryRLock) // bounded like a store's wait
}

// OnPacketProcessed ends a subscribe's read side, and a store's write side
// mochi did not reach (the message was ignored).
func (g *guard) OnPacketProcessed(cl *mqtt.Client, _ packets.Packet, _ error) {
	release(cl, &g.readers, g.retainMu.RUnlock)
	g.unlockRetain(cl)
}
