package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
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
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/embedded"
)

// benchDoor is the supervisor the front-door bench measures: composed in
// this process as `run` composes it — supervisor.FromConfig, supervisor.New
// (recovery on a fresh journal), transport/mqtt.StartTransport — on a
// configuration of the bench's own (sim servos that reach any angle at
// once, an in-memory world, no HTTP), through the embedded broker or an
// external one.
type benchDoor struct {
	url       string
	broker    *embedded.Broker // nil: an external broker
	maxPacket uint32           // the embedded broker's packet limit
	cfg       *config.Config
	built     *supervisor.Built
	sup       *supervisor.Supervisor
	tr        *mqtt.Transport
	topics    mqtt.Topics
	token     string // the operator reset token
	haltTopic string // where halts are published: "estop" or "cmd"
	clientID  string // the supervisor's MQTT client id; agents' ids start with it too
	tap       *benchHaltTap
	pub       *benchPublisher
	// What the transport and the embedded broker logged at warning or
	// above: a lost connection, a packet refused.
	trLog, brokerLog *benchLogTally
	// staleNotReady counts begins refused NOT_READY (and retried).
	staleNotReady atomic.Int64
	// syncDelay delays every journal fsync (nanoseconds; 0: none), for the
	// expiries measured on a slow disk.
	syncDelay atomic.Int64
}

// sagaAgent connects agent name, takes a lease of benchLeaseTTL and
// begins a saga.
func (d *benchDoor) sagaAgent(name string, extra ...string) (*benchAgent, uint64, error) {
	a, err := d.agent(name, extra...)
	if err != nil {
		return nil, 0, err
	}
	saga := uint64(0)
	if err = a.hello(benchLeaseTTL); err == nil {
		saga, err = a.begin()
	}
	if err != nil {
		a.close()
		return nil, 0, err
	}
	return a, saga, nil
}

// agent connects a bench agent to the supervisor (benchAgent).
func (d *benchDoor) agent(name string, extra ...string) (*benchAgent, error) {
	a, err := newBenchAgent(d.url, d.clientID, d.topics, name, extra...)
	if err != nil {
		return nil, err
	}
	a.staleNotReady = &d.staleNotReady
	return a, nil
}

// benchLogTally is a slog.Handler that counts warnings and errors by
// message, keeping the last error text of each, and discards the rest:
// the bench reports what went wrong on the way without printing logs.
type benchLogTally struct {
	mu     *sync.Mutex
	counts map[string]int
	last   map[string]string
}

func newBenchLogTally() *benchLogTally {
	return &benchLogTally{mu: &sync.Mutex{}, counts: map[string]int{}, last: map[string]string{}}
}

func (h *benchLogTally) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *benchLogTally) Handle(_ context.Context, r slog.Record) error {
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
	h.mu.Lock()
	h.counts[msg]++
	if errText != "" {
		h.last[msg] = errText
	}
	h.mu.Unlock()
	return nil
}

func (h *benchLogTally) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *benchLogTally) WithGroup(string) slog.Handler      { return h }

// summary lists what was counted, most frequent first: "message ×n (last
// error)".
func (h *benchLogTally) summary() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for msg, n := range h.counts {
		s := fmt.Sprintf("%s ×%d", msg, n)
		if e := h.last[msg]; e != "" {
			s += " (last: " + e + ")"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// benchPublisher is what the supervisor publishes through: the transport,
// noting the largest event it was handed. A rollback event carries the
// whole report of a saga, and one larger than the broker's packet limit
// costs the supervisor its connection.
type benchPublisher struct {
	*mqtt.Transport
	mu           sync.Mutex
	largest      int
	largestKind  string
	largestSteps int // steps in the largest event's report
}

// PublishEvent notes the event's encoded size and publishes it.
func (p *benchPublisher) PublishEvent(ev api.Event) {
	n := len(api.EncodeEvent(ev))
	p.mu.Lock()
	if n > p.largest {
		p.largest, p.largestKind, p.largestSteps = n, string(ev.Kind), 0
		if ev.Report != nil {
			p.largestSteps = len(ev.Report.Steps)
		}
	}
	p.mu.Unlock()
	p.Transport.PublishEvent(ev)
}

// incidents is what went wrong on the way, for the report and for an
// error: the transport's and the embedded broker's warnings.
func (d *benchDoor) incidents() []string {
	var out []string
	if d.trLog != nil {
		for _, s := range d.trLog.summary() {
			out = append(out, "supervisor transport: "+s)
		}
	}
	if d.brokerLog != nil {
		for _, s := range d.brokerLog.summary() {
			out = append(out, "embedded broker: "+s)
		}
	}
	return out
}

// benchHaltTap is the transport's Handler: the supervisor, with the moment
// each halt reaches it noted. The lanes latch a halt first thing in
// Submit, so that moment is when the halt latched, give or take the
// microsecond Latch takes. It is a diagnostic only an in-process bench can
// have — it splits a halt's round trip into the way in and the way back —
// and costs the transport's goroutine one comparison per request.
type benchHaltTap struct {
	*supervisor.Supervisor
	mu        sync.Mutex
	at        map[string]time.Time // by halt request id
	submitted atomic.Uint64        // every request handed on
}

// Submit notes a halt's arrival, then hands every request on.
func (t *benchHaltTap) Submit(agent string, req api.Request, derr *api.Error, received time.Time, reply func(api.Reply)) {
	t.submitted.Add(1)
	if derr == nil && req.Op == api.OpHalt {
		now := time.Now()
		t.mu.Lock()
		t.at[req.ID] = now
		t.mu.Unlock()
	}
	t.Supervisor.Submit(agent, req, derr, received, reply)
}

// latched returns (and forgets) when the halt with this id reached Submit.
func (t *benchHaltTap) latched(id string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.at[id]
	delete(t.at, id)
	return at, ok
}

// benchDoorConfig is the bench's configuration: the defaults (agents'
// lanes included: 1000 requests/s, burst 200, queue 32) except for what a
// bench needs — one sim servo per name with no slew, an in-memory world,
// long leases, room for every agent, sagas that can carry a long run, and
// no HTTP listener.
func benchDoorConfig(device, journal string, actuators []string) (*config.Config, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "device: %s\n", device)
	fmt.Fprintf(&b, "journal:\n  dir: %s\n  durability: every-step\n", strconv.Quote(journal))
	fmt.Fprintf(&b, "unwind:\n  max_saga_commands: 1000000\n")
	fmt.Fprintf(&b, "leases:\n  default_ttl: 60s\n  max_ttl: 60s\n")
	fmt.Fprintf(&b, "agents:\n  max: %d\n", len(actuators)+8)
	fmt.Fprintf(&b, "http:\n  listen: \"\"\n  reset_token_file: \"\"\n") // its token is set below
	fmt.Fprintf(&b, "sim:\n  world: \"\"\n")
	fmt.Fprintf(&b, "actuators:\n")
	for _, name := range actuators {
		// The driver timeout is wall time: see benchDriverTimeout.
		fmt.Fprintf(&b, "  %s: {kind: servo, driver: sim, sim: {slew: 0}, min: -90, max: 90, timeout: %s}\n", name, benchDriverTimeout)
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

// startBenchDoor starts the broker (unless url names an external one), the
// supervisor with its journal in dir, and its transport, and waits until
// the retained status says online and ready.
func startBenchDoor(dir, url string, actuators []string) (_ *benchDoor, err error) {
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
	cfg, err := benchDoorConfig(device, filepath.Join(dir, "journal"), actuators)
	if err != nil {
		return nil, err
	}
	d := &benchDoor{cfg: cfg, url: url, topics: mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: device},
		token: hex.EncodeToString(tok[:]), clientID: device, trLog: newBenchLogTally()}
	cfg.HTTP.ResetToken = config.Secret(d.token)
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if url == "" {
		// The packet limit `run` gives the embedded broker.
		d.maxPacket = uint32(cfg.MQTT.MaxPayload) + 1024
		d.brokerLog = newBenchLogTally()
		// Paced as `run` paces it (brokerauth.StartEmbedded).
		if d.broker, err = embedded.StartOptions(embedded.Options{Addr: "127.0.0.1:0", MaxPacket: d.maxPacket, Log: slog.New(d.brokerLog),
			Paced: d.topics.CommandFilters(), PacedFor: []string{d.clientID + "-supervisor"}, Urgent: mqtt.IsHalt}); err != nil {
			return nil, err
		}
		d.url = d.broker.URL()
	} else {
		// Fail fast on a broker that is not there: the transport would
		// keep retrying in the background.
		c, err := benchConnect(url, d.clientID+"-probe")
		if err != nil {
			return nil, fmt.Errorf("broker: %w", err)
		}
		benchDisconnect(c)
	}
	if d.built, err = supervisor.FromConfig(cfg, nil); err != nil {
		return nil, fmt.Errorf("building the supervisor: %w", err)
	}
	d.built.Options.WAL.FS = slowSyncFS{delay: &d.syncDelay}
	// As package daemon composes it — the transport built first, as the
	// supervisor's Publisher, and started with it as its Handler — with
	// the bench's taps in between.
	d.tr, err = mqtt.NewTransport(mqtt.TransportOptions{Broker: d.url, ClientID: d.clientID + "-supervisor",
		Topics: d.topics, MaxPayload: int(cfg.MQTT.MaxPayload), Logger: slog.New(d.trLog)})
	if err != nil {
		return nil, fmt.Errorf("the MQTT transport: %w", err)
	}
	d.pub = &benchPublisher{Transport: d.tr}
	d.built.Options.Publisher = d.pub
	if d.sup, err = supervisor.New(d.built.Options); err != nil {
		return nil, fmt.Errorf("starting the supervisor: %w", err)
	}
	d.tap = &benchHaltTap{Supervisor: d.sup, at: map[string]time.Time{}}
	if err = d.tr.Start(d.tap); err != nil {
		return nil, fmt.Errorf("starting the MQTT transport: %w", err)
	}

	// Ready as an agent sees it: the retained status.
	w, err := d.agent("ready-probe")
	if err != nil {
		return nil, err
	}
	defer w.close()
	sw, err := watchStatus(w)
	if err != nil {
		return nil, err
	}
	if _, err := sw.await(10*time.Second, func(st api.Status) bool { return st.State == api.StateOnline && st.Ready }); err != nil {
		return nil, fmt.Errorf("the supervisor did not become ready: %w (status %+v)", err, d.sup.Status().Reasons)
	}
	return d, nil
}

// close stops the supervisor (its leases end and their sagas are unwound),
// then the transport, the drivers and the broker. On an external broker it
// also clears the transport's persistent session, so that no queue of
// messages for it is left behind.
func (d *benchDoor) close() error {
	var errs []error
	if d.sup != nil {
		errs = append(errs, d.sup.Close())
	}
	if d.tr != nil {
		errs = append(errs, d.tr.Close())
		if d.broker == nil {
			if c, err := benchConnect(d.url, d.clientID+"-supervisor"); err == nil { // clean session
				benchDisconnect(c)
			}
		}
	}
	if d.built != nil {
		errs = append(errs, d.built.Close())
	}
	if d.broker != nil {
		errs = append(errs, d.broker.Close())
	}
	return errors.Join(errs...)
}

// metric sums the supervisor's metric name over the series whose labels
// include every pair in match: a counter's value, or a histogram's sample
// count (sum false) or sum of samples (sum true).
func (d *benchDoor) metric(name string, match map[string]string, sum bool) (float64, error) {
	var total float64
	for _, f := range d.sup.Registry().Gather() {
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
func (d *benchDoor) journalStats() (batches, records float64, err error) {
	if batches, err = d.metric("saga_journal_fsync_seconds", nil, false); err != nil {
		return 0, 0, err
	}
	records, err = d.metric("saga_journal_batch_records", nil, true)
	return batches, records, err
}
