package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/nodelay"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// replyTimeout bounds the wait for any one reply in the front-door
// bench. A reply that does not come in this time is an error of the run,
// not a slow sample: the bench stops and says so.
const replyTimeout = 10 * time.Second

// arrival is a message as it reached a bench client's handler, with
// the time it got there.
type arrival struct {
	rep api.Reply
	at  time.Time
}

// agent is one paho connection of the front-door bench speaking MQTT
// API v1 raw, as a controller written against docs/API.md would: its own
// request topic, its reply topic subscribed before it publishes, QoS 1,
// TCP_NODELAY. A request is timed from just before its publish to the
// moment its reply reaches the client's message handler (in paho's
// goroutine, before any channel hand-off to the waiting goroutine).
type agent struct {
	name   string
	topics mqtt.Topics
	c      paho.Client
	inst   uint64 // this connection of the agent, among all the bench made
	seq    atomic.Uint64

	// lease and epoch are set by hello.
	lease string
	epoch uint64

	mu      sync.Mutex
	waiting map[string]chan arrival // by request id
	// other receives replies nobody waits for (the flood's); it runs on
	// paho's goroutine and must be quick.
	other func(api.Reply, time.Time)
	bad   atomic.Uint64 // replies that were not JSON
	// staleNotReady, when set, counts begins refused NOT_READY and retried.
	staleNotReady *atomic.Int64
}

// login is how a bench client connects: its client id, and the username
// and password it logs in with (none if user is "").
type login struct {
	clientID, user, password string
}

// connect opens a paho connection to url as l with TCP_NODELAY and a
// clean session, and no reconnecting: a lost connection ends the run with
// an error rather than skewing it.
func connect(url string, l login) (paho.Client, error) {
	opts := paho.NewClientOptions().
		SetDialer(nodelay.Dialer(10 * time.Second)).
		AddBroker(url).
		SetClientID(l.clientID).
		SetCleanSession(true).
		SetAutoReconnect(false).
		SetConnectTimeout(10 * time.Second).
		SetKeepAlive(30 * time.Second).
		SetOrderMatters(true)
	if l.user != "" {
		opts.SetUsername(l.user).SetPassword(l.password)
	}
	c := paho.NewClient(opts)
	tok := c.Connect()
	if !tok.WaitTimeout(15 * time.Second) {
		return nil, fmt.Errorf("connecting to %s as %s: timed out", url, l.clientID)
	}
	if err := tok.Error(); err != nil {
		return nil, fmt.Errorf("connecting to %s as %s: %w", url, l.clientID, err)
	}
	return c, nil
}

// disconnect disconnects c cleanly: it waits (briefly) for the
// DISCONNECT packet to be written, so the broker does not log the closed
// socket as an error of the run.
func disconnect(c paho.Client) { c.Disconnect(250) }

// subscribe subscribes c to topic at QoS 1 and waits for the SUBACK.
func subscribe(c paho.Client, topic string, h paho.MessageHandler) error {
	tok := c.Subscribe(topic, 1, h)
	if !tok.WaitTimeout(10 * time.Second) {
		return fmt.Errorf("subscribing to %s: timed out", topic)
	}
	if err := tok.Error(); err != nil {
		return fmt.Errorf("subscribing to %s: %w", topic, err)
	}
	return nil
}

// newAgent connects agent name as l and subscribes its reply topic.
func newAgent(url string, l login, topics mqtt.Topics, name string) (*agent, error) {
	return newClient(url, l, topics, name, topics.Reply(name))
}

// newClient connects as l a client that sends requests as agent name
// and takes the answers to them on replies: an agent (its reply topic), or
// the echo's requester (the echo's reply topic).
func newClient(url string, l login, topics mqtt.Topics, name, replies string) (*agent, error) {
	c, err := connect(url, l)
	if err != nil {
		return nil, err
	}
	a := &agent{name: name, topics: topics, c: c, inst: agentInstances.Add(1), waiting: map[string]chan arrival{}}
	if err := subscribe(c, replies, a.onMessage); err != nil {
		disconnect(c)
		return nil, fmt.Errorf("agent %s: %w", name, err)
	}
	return a, nil
}

// onMessage is the agent's paho handler: it timestamps the message first,
// then hands it to whoever waits for its id, or to other.
func (a *agent) onMessage(_ paho.Client, m paho.Message) {
	at := time.Now()
	var rep api.Reply
	if err := json.Unmarshal(m.Payload(), &rep); err != nil {
		a.bad.Add(1)
		return
	}
	a.mu.Lock()
	ch := a.waiting[rep.ID]
	delete(a.waiting, rep.ID) // a QoS 1 duplicate finds nobody waiting
	other := a.other
	a.mu.Unlock()
	switch {
	case ch != nil:
		ch <- arrival{rep: rep, at: at}
	case other != nil:
		other(rep, at)
	}
}

// agentInstances numbers the bench's agent connections.
var agentInstances atomic.Uint64

// nextID returns a new request id, unique for this agent across the whole
// run. An agent name comes back in later rounds (the busy agents of each
// expiry condition): a hello reusing its earlier id is, by the API, the
// same hello retried, and was answered with the earlier lease.
func (a *agent) nextID(kind string) string {
	return a.name + "-" + strconv.FormatUint(a.inst, 10) + "-" + kind + strconv.FormatUint(a.seq.Add(1), 10)
}

// request fills in the agent (and the lease where the op needs one) and
// encodes req exactly as the API decodes it.
func (a *agent) request(req api.Request) ([]byte, error) {
	req.Agent = a.name
	switch req.Op {
	case api.OpHello, api.OpHalt, api.OpReset, api.OpStatus:
	default:
		req.Lease, req.Epoch = a.lease, a.epoch
	}
	b, err := api.EncodeRequest(req)
	if err != nil {
		return nil, fmt.Errorf("agent %s: encoding %s: %w", a.name, req.Op, err)
	}
	return b, nil
}

// send publishes payload (a request with the given id) on topic, QoS 1,
// and waits for the message carrying that id to reach the handler. It
// returns that message and the time from just before the publish to its
// arrival.
func (a *agent) send(topic, id string, payload []byte) (api.Reply, time.Duration, error) {
	rep, t0, at, err := a.sendAt(topic, id, payload, replyTimeout)
	return rep, at.Sub(t0), err
}

// errNoAnswer is sendAt's error when no answer came in time.
var errNoAnswer = errors.New("no answer")

// sendAt is send with its own timeout, returning when the publish began
// and when the answer arrived. Without an answer the error wraps
// errNoAnswer.
func (a *agent) sendAt(topic, id string, payload []byte, timeout time.Duration) (rep api.Reply, t0, at time.Time, err error) {
	ch := make(chan arrival, 1)
	a.mu.Lock()
	a.waiting[id] = ch
	a.mu.Unlock()
	t0 = time.Now()
	a.c.Publish(topic, 1, false, payload)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.rep, t0, r.at, nil
	case <-timer.C:
		a.mu.Lock()
		delete(a.waiting, id)
		a.mu.Unlock()
		return api.Reply{}, t0, t0, fmt.Errorf("agent %s: %w to %s within %v", a.name, errNoAnswer, id, timeout)
	}
}

// call sends req on the agent's own request topic and returns its reply and
// round trip.
func (a *agent) call(req api.Request) (api.Reply, time.Duration, error) {
	if req.ID == "" {
		req.ID = a.nextID(string(req.Op))
	}
	b, err := a.request(req)
	if err != nil {
		return api.Reply{}, 0, err
	}
	return a.send(a.topics.AgentCmd(a.name), req.ID, b)
}

// must is call, an error unless the reply is OK.
func (a *agent) must(req api.Request) (api.Reply, error) {
	rep, _, err := a.call(req)
	if err != nil {
		return rep, err
	}
	if !rep.OK {
		return rep, fmt.Errorf("agent %s: %s refused: %s %s", a.name, req.Op, rep.Code, rep.Message)
	}
	return rep, nil
}

// hello takes a lease of ttl.
func (a *agent) hello(ttl time.Duration) error {
	rep, err := a.must(api.Request{Op: api.OpHello, TTLMS: ttl.Milliseconds()})
	if err != nil {
		return err
	}
	a.lease, a.epoch = rep.Lease, rep.Epoch
	return nil
}

// begin opens a saga. A NOT_READY refusal is retried for up to a second
// (and counted): right after a reset the supervisor's cached readiness
// can still say halted for up to one poll interval, although the reset
// was answered and the status was seen ready.
func (a *agent) begin() (uint64, error) {
	for try := 0; ; try++ {
		rep, _, err := a.call(api.Request{Op: api.OpBegin})
		if err != nil {
			return 0, err
		}
		if rep.OK {
			return rep.Saga, nil
		}
		if rep.Code != api.CodeNotReady || try >= 50 {
			return 0, fmt.Errorf("agent %s: begin refused: %s %s", a.name, rep.Code, rep.Message)
		}
		if a.staleNotReady != nil {
			a.staleNotReady.Add(1)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// close disconnects.
func (a *agent) close() { disconnect(a.c) }

// echo is the bare-broker baseline: a paho client that republishes
// every message on one topic to another, QoS 1 both ways, from its
// message handler. A round trip through it is what the broker and two
// client hops cost with nothing behind them.
type echo struct {
	c        paho.Client
	req, rep string
}

func newEcho(url string, l login, reqTopic, repTopic string) (*echo, error) {
	c, err := connect(url, l)
	if err != nil {
		return nil, err
	}
	e := &echo{c: c, req: reqTopic, rep: repTopic}
	if err := subscribe(c, reqTopic, func(c paho.Client, m paho.Message) {
		c.Publish(e.rep, 1, false, m.Payload())
	}); err != nil {
		disconnect(c)
		return nil, fmt.Errorf("echo responder: %w", err)
	}
	return e, nil
}

func (e *echo) close() { disconnect(e.c) }

// statusSeen is one retained status message as it arrived.
type statusSeen struct {
	st api.Status
	at time.Time
}

// statusWatch follows the supervisor's retained status topic on an
// agent's connection: every message, timestamped on arrival, goes to seen
// (dropped and counted if nobody drains it).
type statusWatch struct {
	seen    chan statusSeen
	dropped atomic.Uint64
}

func watchStatus(a *agent) (*statusWatch, error) {
	w := &statusWatch{seen: make(chan statusSeen, 1024)}
	err := subscribe(a.c, a.topics.Status(), func(_ paho.Client, m paho.Message) {
		at := time.Now()
		var st api.Status
		if json.Unmarshal(m.Payload(), &st) != nil {
			return
		}
		select {
		case w.seen <- statusSeen{st: st, at: at}:
		default:
			w.dropped.Add(1)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("status watch: %w", err)
	}
	return w, nil
}

// drain forgets what has arrived so far, and returns how many of those
// statuses said halted.
func (w *statusWatch) drain() (halted int) {
	for {
		select {
		case s := <-w.seen:
			if s.st.Halted {
				halted++
			}
		default:
			return halted
		}
	}
}

// await returns the arrival time of the first status that satisfies ok,
// waiting up to d.
func (w *statusWatch) await(d time.Duration, ok func(api.Status) bool) (time.Time, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case s := <-w.seen:
			if ok(s.st) {
				return s.at, nil
			}
		case <-timer.C:
			return time.Time{}, errors.New("status: the awaited status did not arrive within " + d.String())
		}
	}
}
