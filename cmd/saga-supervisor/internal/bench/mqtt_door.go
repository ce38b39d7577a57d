package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/daemon"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/access"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/embedded"
)

// door is the supervisor the front-door bench measures: started in
// this process by daemon.Start, as `run` starts it, on a configuration of
// the bench's own (sim servos that reach any angle at once, an in-memory
// world, no HTTP), with the embedded broker — locked by logins and the
// ACL, the agents logging in with the passwords the daemon wrote for them
// — or an external one.
type door struct {
	url       string
	daemon    *daemon.Daemon
	broker    *embedded.Broker // the daemon's embedded broker; nil: an external one
	maxPacket uint32           // the embedded broker's packet limit
	cfg       *config.Config
	topics    mqtt.Topics
	token     string // the operator reset token
	haltTopic string // where halts are published: "estop" or "cmd"
	// clientPrefix starts the client ids of the bench's clients on an
	// external broker (anonymous there): the device, unique per run.
	clientPrefix string
	// passwords are the agents' logins on the embedded broker, by name
	// (an agent's username and client id are its name); nil on an
	// external broker.
	passwords map[string]string
	tap       *haltTap
	pub       *publisher
	// What the transport and the embedded broker logged at warning or
	// above: a lost connection, a packet refused.
	logs *logTally
	// staleNotReady counts begins refused NOT_READY (and retried).
	staleNotReady atomic.Int64
	// syncDelay delays every journal fsync (nanoseconds; 0: none), for the
	// expiries measured on a slow disk.
	syncDelay atomic.Int64
}

// sagaAgent connects agent name, takes a lease of leaseTTL and
// begins a saga.
func (d *door) sagaAgent(name string) (*agent, uint64, error) {
	a, err := d.agent(name)
	if err != nil {
		return nil, 0, err
	}
	saga := uint64(0)
	if err = a.hello(leaseTTL); err == nil {
		saga, err = a.begin()
	}
	if err != nil {
		a.close()
		return nil, 0, err
	}
	return a, saga, nil
}

// agent connects an agent of the bench to the supervisor: on the
// embedded broker logged in as a controller is, username and client id
// its name; on an external broker anonymous, its client id prefixed.
func (d *door) agent(name string) (*agent, error) {
	a, err := newAgent(d.url, d.login(name), d.topics, name)
	if err != nil {
		return nil, err
	}
	a.staleNotReady = &d.staleNotReady
	return a, nil
}

// login is how agent name connects (see agent).
func (d *door) login(name string) login {
	if d.passwords == nil {
		return login{clientID: d.clientPrefix + "-" + name}
	}
	return login{clientID: name, user: name, password: d.passwords[name]}
}

// logTally is a slog.Handler that counts warnings and errors by the
// logger's "component" attribute (the daemon gives its transport "mqtt",
// its embedded broker "broker") and message, keeping the last error text
// of each, and discards the rest — other components, lower levels: the
// bench reports what went wrong on the way without printing logs.
type logTally struct {
	mu     sync.Mutex
	counts map[string]map[string]int    // by component, then message
	last   map[string]map[string]string // the last error text, likewise
	muted  map[string]bool              // components no longer counted
}

// tallied are the components logTally counts, with how incidents name them.
var tallied = []struct{ component, name string }{
	{"mqtt", "supervisor transport"},
	{"broker", "embedded broker"},
	{"echo-broker", "echo broker"},
}

func newLogTally() *logTally {
	return &logTally{counts: map[string]map[string]int{}, last: map[string]map[string]string{}, muted: map[string]bool{}}
}

// mute stops counting component's warnings: those of a broker being
// closed, which drops the clients still connected.
func (t *logTally) mute(component string) {
	t.mu.Lock()
	t.muted[component] = true
	t.mu.Unlock()
}

// logger is a logger whose warnings are tallied as component's (nothing,
// unless a "component" attribute is added later).
func (t *logTally) logger(component string) *slog.Logger {
	return slog.New(tallyHandler{t: t, component: component})
}

// tallyHandler is logTally's handler for one component.
type tallyHandler struct {
	t         *logTally
	component string
}

func (h tallyHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && slices.ContainsFunc(tallied, func(c struct{ component, name string }) bool { return c.component == h.component })
}

func (h tallyHandler) Handle(_ context.Context, r slog.Record) error {
	msg, errText := r.Message, ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" || a.Key == "error" {
			errText = a.Value.String()
		}
		return true
	})
	if msg == "" { // mochi logs its refusals with the error only
		msg, errText = errText, ""
	}
	t := h.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.muted[h.component] {
		return nil
	}
	if t.counts[h.component] == nil {
		t.counts[h.component], t.last[h.component] = map[string]int{}, map[string]string{}
	}
	t.counts[h.component][msg]++
	if errText != "" {
		t.last[h.component][msg] = errText
	}
	return nil
}

// WithAttrs picks the component; other attributes are not kept.
func (h tallyHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	for _, a := range attrs {
		if a.Key == "component" {
			h.component = a.Value.String()
		}
	}
	return h
}

func (h tallyHandler) WithGroup(string) slog.Handler { return h }

// summary lists what was counted of component, most frequent first:
// "message ×n (last error)".
func (t *logTally) summary(component string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for msg, n := range t.counts[component] {
		s := fmt.Sprintf("%s ×%d", msg, n)
		if e := t.last[component][msg]; e != "" {
			s += " (last: " + e + ")"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// publisher is what the supervisor publishes through
// (daemon.Options.WrapPublisher): the transport, noting the largest event
// it was handed. A rollback event carries the whole report of a saga, and
// one larger than the broker's packet limit costs the supervisor its
// connection.
type publisher struct {
	supervisor.Publisher
	mu           sync.Mutex
	largest      int
	largestKind  string
	largestSteps int // steps in the largest event's report
}

// PublishEvent notes the event's encoded size and publishes it.
func (p *publisher) PublishEvent(ev api.Event) {
	n := len(api.EncodeEvent(ev))
	p.mu.Lock()
	if n > p.largest {
		p.largest, p.largestKind, p.largestSteps = n, string(ev.Kind), 0
		if ev.Report != nil {
			p.largestSteps = len(ev.Report.Steps)
		}
	}
	p.mu.Unlock()
	p.Publisher.PublishEvent(ev)
}

// incidents is what went wrong on the way, for the report and for an
// error: the transport's and the brokers' warnings.
func (d *door) incidents() []string {
	var out []string
	for _, c := range tallied {
		for _, s := range d.logs.summary(c.component) {
			out = append(out, c.name+": "+s)
		}
	}
	return out
}

// haltTap is the transport's Handler (daemon.Options.WrapHandler):
// the supervisor, with the moment each halt reaches it noted. The lanes
// latch a halt first thing in Submit, so that moment is when the halt
// latched, give or take the microsecond Latch takes. It is a diagnostic
// only an in-process bench can have — it splits a halt's round trip into
// the way in and the way back — and costs the transport's goroutine one
// comparison per request.
type haltTap struct {
	mqtt.Handler
	shed      mqtt.Shedder // the supervisor's, handed on
	mu        sync.Mutex
	at        map[string]time.Time // by halt request id
	submitted atomic.Uint64        // every request handed on
}

func newHaltTap(h mqtt.Handler) *haltTap {
	t := &haltTap{Handler: h, at: map[string]time.Time{}}
	t.shed, _ = h.(mqtt.Shedder)
	return t
}

// Submit notes a halt's arrival, then hands every request on.
func (t *haltTap) Submit(name string, req api.Request, derr *api.Error, received time.Time, reply func(api.Reply)) {
	t.submitted.Add(1)
	if derr == nil && req.Op == api.OpHalt {
		now := time.Now()
		t.mu.Lock()
		t.at[req.ID] = now
		t.mu.Unlock()
	}
	t.Handler.Submit(name, req, derr, received, reply)
}

// Shed hands the transport's question on to the supervisor, which refuses
// a flooding agent's requests before they are decoded.
func (t *haltTap) Shed(name string) bool { return t.shed != nil && t.shed.Shed(name) }

// latched returns (and forgets) when the halt with this id reached Submit.
func (t *haltTap) latched(id string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.at[id]
	delete(t.at, id)
	return at, ok
}

// Agents of the front-door bench beside those named after their actuators:
// the halting agent, which also resets (mqtt.allow_reset), and the one that
// watches the status for readiness at the start.
const (
	halterAgent = "halter"
	readyAgent  = "ready-probe"
)

// doorConfig is the bench's configuration: the defaults (agents'
// lanes included: 1000 requests/s, burst 200, queue 32) except for what a
// bench needs — one sim servo per name with no slew, an in-memory world,
// long leases, room for every agent, sagas that can carry a long run, no
// HTTP listener, and the broker: url, or (url "") the embedded one on a
// free loopback port, its logins under dir. Each actuator's name is also
// an agent of agents.allow, as are halterAgent and readyAgent.
func doorConfig(device, dir, url string, actuators []string) (*config.Config, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "device: %s\n", device)
	fmt.Fprintf(&b, "journal:\n  dir: %s\n  durability: every-step\n", strconv.Quote(filepath.Join(dir, "journal")))
	fmt.Fprintf(&b, "unwind:\n  max_saga_commands: 1000000\n")
	fmt.Fprintf(&b, "leases:\n  default_ttl: 60s\n  max_ttl: 60s\n")
	fmt.Fprintf(&b, "agents:\n  max: %d\n  allow:\n", len(actuators)+8)
	for _, name := range actuators {
		fmt.Fprintf(&b, "    %s: {}\n", name)
	}
	fmt.Fprintf(&b, "    %s: {actuators: [], ops: [reset]}\n", halterAgent)
	fmt.Fprintf(&b, "    %s: {actuators: [], ops: []}\n", readyAgent)
	if url == "" {
		mq := filepath.Join(dir, "mqtt")
		fmt.Fprintf(&b, "mqtt:\n  listen: 127.0.0.1:0\n  auth:\n    password_file: %s\n    credentials_dir: %s\n",
			strconv.Quote(filepath.Join(mq, "passwd")), strconv.Quote(filepath.Join(mq, "credentials")))
	} else {
		fmt.Fprintf(&b, "mqtt:\n  broker: %s\n", strconv.Quote(url))
	}
	fmt.Fprintf(&b, "http:\n  listen: \"\"\n  reset_token_file: \"\"\n") // its token is set below
	fmt.Fprintf(&b, "sim:\n  world: \"\"\n")
	fmt.Fprintf(&b, "actuators:\n")
	for _, name := range actuators {
		// The driver timeout is wall time: see driverTimeout.
		fmt.Fprintf(&b, "  %s: {kind: servo, driver: sim, sim: {slew: 0}, min: -90, max: 90, timeout: %s}\n", name, driverTimeout)
	}
	cfg, err := config.Parse([]byte(b.String()), "bench.yaml")
	if err != nil {
		return nil, fmt.Errorf("the bench's configuration: %w", err)
	}
	// The bench resets between halts over MQTT, on a broker of its own
	// (loopback, or the one --broker names), with a token it made up; a
	// config file could not ask for this without TLS.
	cfg.MQTT.AllowReset = true
	return cfg, nil
}

// startDoor starts the daemon — with the embedded broker unless url
// names an external one — its journal and logins in dir, and waits until
// the retained status says online and ready.
func startDoor(dir, url string, actuators []string) (_ *door, err error) {
	var rnd [6]byte
	var tok [32]byte // a token as long as config validation demands
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	// A device of its own per run: on a shared broker nothing else hears
	// the bench, and the bench hears nothing left by an earlier run.
	device := "bench-" + hex.EncodeToString(rnd[:])
	cfg, err := doorConfig(device, dir, url, actuators)
	if err != nil {
		return nil, err
	}
	d := &door{cfg: cfg, url: url, topics: mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: device},
		token: hex.EncodeToString(tok[:]), clientPrefix: device, logs: newLogTally()}
	cfg.HTTP.ResetToken = config.Secret(d.token)
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if url != "" {
		// Fail fast on a broker that is not there: the transport would
		// keep retrying in the background.
		c, err := connect(url, login{clientID: d.clientPrefix + "-probe"})
		if err != nil {
			return nil, fmt.Errorf("broker: %w", err)
		}
		disconnect(c)
	}
	d.daemon, err = daemon.Start(daemon.Options{Config: cfg, Logger: d.logs.logger(""), NoHTTP: true,
		JournalFS: slowSyncFS{delay: &d.syncDelay},
		WrapHandler: func(h mqtt.Handler) mqtt.Handler {
			d.tap = newHaltTap(h)
			return d.tap
		},
		WrapPublisher: func(p supervisor.Publisher) supervisor.Publisher {
			d.pub = &publisher{Publisher: p}
			return d.pub
		}})
	if err != nil {
		return nil, fmt.Errorf("starting the supervisor: %w", err)
	}
	d.url = d.daemon.BrokerURL
	if d.daemon.Broker != nil {
		d.broker = d.daemon.Broker.Broker
		// The bound brokerauth.StartEmbedded gives it: max_payload and
		// a header.
		d.maxPacket = uint32(cfg.MQTT.MaxPayload) + 1024
		// Each agent logs in with the password the daemon generated for
		// it, from where ctl and the client library read theirs.
		d.passwords = map[string]string{}
		for name := range cfg.Agents.Allow {
			if d.passwords[name], err = access.ReadSecret(filepath.Join(cfg.MQTT.Auth.CredentialsDir, name)); err != nil {
				return nil, fmt.Errorf("agent %s's password: %w", name, err)
			}
		}
	}

	// Ready as an agent sees it: the retained status.
	w, err := d.agent(readyAgent)
	if err != nil {
		return nil, err
	}
	defer w.close()
	sw, err := watchStatus(w)
	if err != nil {
		return nil, err
	}
	if _, err := sw.await(10*time.Second, func(st api.Status) bool { return st.State == api.StateOnline && st.Ready }); err != nil {
		return nil, fmt.Errorf("the supervisor did not become ready: %w (status %+v)", err, d.daemon.Sup.Status().Reasons)
	}
	return d, nil
}

// echoBroker is where the echo of the round trips runs: an external broker
// itself, but beside the embedded one a bare broker of its own (anonymous,
// no ACL, the same packet limit, in this process), since the embedded
// broker's ACL lets agents speak only to the supervisor. stop closes it.
func (d *door) echoBroker() (url string, stop func(), err error) {
	if d.broker == nil {
		return d.url, func() {}, nil
	}
	b, err := embedded.StartOptions(embedded.Options{Addr: "127.0.0.1:0", MaxPacket: d.maxPacket, Log: d.logs.logger("echo-broker")})
	if err != nil {
		return "", nil, fmt.Errorf("echo broker: %w", err)
	}
	return b.URL(), func() {
		d.logs.mute("echo-broker")
		b.Close()
	}, nil
}

// close stops the daemon: the supervisor (its leases end and their sagas
// are unwound), then the transport, the drivers and the broker. On an
// external broker it also clears the transport's persistent sessions, so
// that no queue of messages for them is left behind.
func (d *door) close() error {
	if d.daemon == nil {
		return nil
	}
	err := d.daemon.Close()
	if d.broker == nil {
		for _, id := range []string{d.cfg.MQTT.ClientID, d.cfg.MQTT.ClientID + mqtt.EstopSuffix} {
			if c, err := connect(d.url, login{clientID: id}); err == nil { // clean session
				disconnect(c)
			}
		}
	}
	return err
}

// metric sums the supervisor's metric name over the series whose labels
// include every pair in match: a counter's value, or a histogram's sample
// count (sum false) or sum of samples (sum true).
func (d *door) metric(name string, match map[string]string, sum bool) (float64, error) {
	var total float64
	for _, f := range d.daemon.Sup.Registry().Gather() {
		if f.Desc.Name != name {
			continue
		}
		for _, m := range f.Samples {
			matched := 0
			for _, lp := range m.Labels {
				if v, ok := match[lp.Name]; ok && v == lp.Value {
					matched++
				}
			}
			if matched != len(match) {
				continue
			}
			switch h := m.Dist; {
			case h == nil:
				total += m.Value
			case sum:
				total += h.Sum
			default:
				total += float64(h.Count)
			}
		}
	}
	return total, nil
}

// journalStats is how many journal batches (each one pwrite and one
// fdatasync) and records the supervisor's journal has written.
func (d *door) journalStats() (batches, records float64, err error) {
	if batches, err = d.metric("saga_journal_fsync_seconds", nil, false); err != nil {
		return 0, 0, err
	}
	records, err = d.metric("saga_journal_batch_records", nil, true)
	return batches, records, err
}
