// Package daemon assembles saga-supervisor from a configuration, in one
// place and one order: the embedded MQTT broker (locked by the config's
// logins and ACL), the HTTP listener, the drivers, the MQTT transport, the
// supervisor — crash recovery first, with HTTP's start-up handler (the
// status, /readyz and the halt) answering from the moment the journal is
// open — then the full HTTP endpoints, and only then the transport's
// connection, which never holds them up. `run`, the demo and the tests'
// harness all start it through Start, so they run one production path,
// and nothing is bound late: the transport is built before the supervisor
// (its Publisher) and connected after it (its Handler).
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/daemon/brokerauth"
	"github.com/saga-supervisor/saga-supervisor/daemon/fleet"
	"github.com/saga-supervisor/saga-supervisor/daemon/homeassistant"
	"github.com/saga-supervisor/saga-supervisor/internal/promtext"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/supervisor/wiring"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/embedded"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// Options configure Start.
type Options struct {
	// Config is the daemon's configuration; Start fills in what it learns
	// (the embedded broker's address and the supervisor's own login).
	Config *config.Config
	Logger *slog.Logger // nil: discard
	// NoHTTP leaves the HTTP endpoints off whatever http.listen says.
	NoHTTP bool
	// WrapHandler and WrapPublisher, if set, stand between the transport
	// and the supervisor: WrapHandler is given the supervisor as the
	// transport's Handler, WrapPublisher the transport as the supervisor's
	// Publisher, and what they return is used instead. `bench mqtt` taps
	// them to time halts and to note the largest event. A Handler wrapper
	// must also forward mqtt.Shedder (the supervisor implements it), or
	// the transport decodes every request of an agent over its rate.
	WrapHandler   func(mqtt.Handler) mqtt.Handler
	WrapPublisher func(supervisor.Publisher) supervisor.Publisher
	// JournalFS, if set, is the file system the journal is opened on
	// (wal.Options.FS) instead of the operating system's. `bench mqtt`
	// gives one whose fsync it can slow down, to measure lease expiries
	// on a slow disk; a robot leaves it nil.
	JournalFS wal.FS
	// Progress, if set, is called as crash recovery moves on
	// (supervisor.Options.Progress).
	Progress func()
	// AcceptJournalLoss starts on a journal that lost records its anchor
	// vouches for (wal.Options.AcceptLoss): the operator's explicit
	// decision (run --accept-journal-loss). The start is then halted, the
	// halt's reason journaling the loss, until an operator resets.
	AcceptJournalLoss bool
	// Version is the build's version, in the fleet summary and Home
	// Assistant's device block.
	Version string
}

// Daemon is a running supervisor with everything around it.
type Daemon struct {
	Config    *config.Config
	Broker    *brokerauth.Started // the embedded broker; nil with an external one
	Built     *supervisor.Built
	Sup       *supervisor.Supervisor
	Transport *mqtt.Transport
	// BrokerURL is what the supervisor dialled: the external broker, or
	// the embedded one on loopback.
	BrokerURL string
	// HTTPCert is the HTTP listener's certificate (http.tls); nil when it
	// serves plain HTTP or none.
	HTTPCert *HTTPCert

	httpLn  net.Listener
	httpSrv *http.Server
	httpErr chan error
	// fleet publishes the summary (mqtt.fleet, mqtt.home_assistant);
	// announce is the goroutine publishing Home Assistant's discovery.
	fleet        *fleet.Publisher
	stopAnnounce context.CancelFunc
	announceDone chan struct{}
	// stopWait ends the wait of the transport's start for the embedded
	// broker's port (in use by another process at start); waitDone is
	// closed when that goroutine has returned.
	stopWait chan struct{}
	waitDone chan struct{}
	stopOnce sync.Once
}

// Start builds and starts a daemon. Any failure — a broker or HTTP address
// that cannot be bound, a driver that cannot be opened, a journal that
// cannot be recovered — returns an error with everything already started
// closed again, before anything could report ready.
func Start(opt Options) (_ *Daemon, err error) {
	cfg, lg := opt.Config, opt.Logger
	if cfg == nil {
		return nil, errors.New("daemon: no configuration")
	}
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{Config: cfg, BrokerURL: cfg.MQTT.Broker, httpErr: make(chan error, 1)}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()

	// The embedded broker comes first: MQTT-attached actuators connect to
	// it, and recovery (inside supervisor.New) may have to drive them back.
	if cfg.MQTT.Embedded() {
		if d.Broker, err = brokerauth.StartEmbedded(cfg, lg.With("component", "broker")); err != nil {
			return nil, err
		}
		cfg.MQTT.Listen = d.Broker.Broker.Addr() // the port it got, if it asked for 0
		d.BrokerURL = brokerauth.LocalURL(d.Broker.Broker)
	}
	// HTTP is bound before anything moves: a port in use is an error now,
	// not a daemon that reports ready without its endpoints.
	if cfg.HTTP.Listen != "" && !opt.NoHTTP {
		if h := cfg.HTTP; h.ViewerToken != "" && h.ViewerToken == h.ResetToken {
			return nil, fmt.Errorf("%s: http.viewer_token_file: the viewer token is the operator token: a viewer could reset", cfg.Where("http.viewer_token_file"))
		}
		// The certificate first (generated at the first start, with
		// http.tls.self_signed), so that no listener serves without it.
		if d.HTTPCert, err = EnsureHTTPCert(cfg); err != nil {
			return nil, err
		}
		if c := d.HTTPCert; c != nil {
			verb := "loaded"
			if c.Created {
				verb = "created (self-signed)"
			}
			lg.Info("http tls certificate "+verb, "cert", c.CertFile, "key", c.KeyFile, "sha256", c.Fingerprint,
				"names", strings.Join(c.Names, ","), "not_after", c.NotAfter.UTC().Format(time.RFC3339))
			if len(c.Unnamed) > 0 {
				lg.Warn("the self-signed http certificate does not name every host the listener answers to: a browser there warns of a name mismatch; delete both files and restart for one that does (a new fingerprint)",
					"unnamed", strings.Join(c.Unnamed, ","), "cert", c.CertFile)
			}
		}
		if d.httpLn, err = net.Listen("tcp", cfg.HTTP.Listen); err != nil {
			return nil, fmt.Errorf("http: %w", err)
		}
	}
	var tlsCfg *tls.Config
	switch {
	case cfg.MQTT.UsesTLS():
		tlsCfg, err = wiring.TLSConfig(cfg.MQTT.TLS)
	case cfg.MQTT.Embedded() && cfg.MQTT.TLS.CertFile != "":
		tlsCfg, err = wiring.PinnedTLS(cfg.MQTT.TLS)
	}
	if err != nil {
		return nil, err
	}
	topics := mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device}
	if d.Transport, err = mqtt.NewTransport(mqtt.TransportOptions{
		Broker: d.BrokerURL, ClientID: cfg.MQTT.ClientID, Username: cfg.MQTT.Username, Password: cfg.MQTT.Password.Reveal(),
		TLS: tlsCfg, Topics: topics, MaxPayload: int(cfg.MQTT.MaxPayload), Logger: lg.With("component", "mqtt"),
	}); err != nil {
		return nil, err
	}
	// The boards are waited for once HTTP serves (below), not here: a
	// board missing at boot must not keep the HTTP port silent.
	bo := supervisor.BuildOptions{DeferBoardWait: true}
	if d.Broker != nil {
		bo.BrokerUp = d.Broker.Broker.Up() // mqtt devices dial our broker, never a stranger's on its port
	}
	if d.Built, err = supervisor.FromConfigWith(cfg, lg, bo); err != nil {
		return nil, err
	}
	var pub supervisor.Publisher = d.Transport
	if opt.WrapPublisher != nil {
		pub = opt.WrapPublisher(pub)
	}
	d.Built.Options.Publisher = pub
	d.Built.Options.Progress = opt.Progress
	d.Built.Options.WAL.AcceptLoss = opt.AcceptJournalLoss
	if opt.JournalFS != nil {
		d.Built.Options.WAL.FS = opt.JournalFS
	}
	// The broker link is a safety input: while either connection is down
	// no command or e-stop can arrive over MQTT, and the daemon says so —
	// /readyz, /api/v1/status and, once it is back, the retained status.
	if d.Broker != nil {
		// Its address in use by another process: not ready, naming it,
		// until the listen (retried) is ours.
		d.Built.Options.Inputs = append(d.Built.Options.Inputs, brokerInput{d.Broker.Broker})
	}
	d.Built.Options.Inputs = append(d.Built.Options.Inputs, d.Transport)
	if cfg.MQTT.Fleet.Enabled || cfg.MQTT.HomeAssistant.Enabled {
		// The summary is published from the fleet's own goroutine; the
		// poller only hands it each status (never the halt path).
		tr, topic := d.Transport, topics.Summary()
		d.fleet = fleet.NewPublisher(fleet.PublisherOptions{Device: cfg.Device, Version: opt.Version, Period: cfg.MQTT.Fleet.Period,
			Publish: func(b []byte) { tr.Publish(topic, true, b) }})
		d.Built.Options.OnRefresh = d.fleet.Update
	}
	// The supervisor is made first, its journal not yet opened, so that
	// HTTP can serve behind its guard while Open recovers: from the moment
	// the journal is open, /readyz, the status and POST /api/v1/halt
	// answer (the start-up handler), however long recovery reads back
	// the actuators; a halt there latches before recovery moves anything.
	var startServing func()
	var sup *supervisor.Supervisor
	d.Built.Options.JournalOpened = func() error {
		if startServing != nil {
			startServing()
		}
		// Recovery reads the boards back: give them the time they need
		// to answer while HTTP answers (and says so). A board whose
		// channel table the configuration contradicts ends the start here.
		if names := d.Built.PendingBoards(); len(names) > 0 {
			sup.SetStarting(fmt.Sprintf("starting: waiting up to %v for serial board %s to answer, then recovering the journal",
				wiring.BoardWait, strings.Join(names, ", ")))
			defer sup.SetStarting(supervisor.StartingReason)
		}
		return d.Built.WaitBoards()
	}
	sup, err = supervisor.Prepare(d.Built.Options)
	if err != nil {
		return nil, err
	}
	var handoff *supervisor.HandOff
	if d.httpLn != nil {
		handoff = supervisor.NewHandOff(sup.StartupHTTPHandler())
		// Every request passes the Host and Origin checks first.
		// Then the login (http.login: on by default beyond loopback).
		guarded, err := sup.GuardHTTP(handoff, supervisor.HTTPGuard{
			Listen: cfg.HTTP.Listen, Bound: d.httpLn.Addr().String(), AllowedHosts: cfg.HTTP.AllowedHosts,
			Login: &supervisor.HTTPLogin{Required: cfg.HTTP.Login, ViewerToken: cfg.HTTP.ViewerToken.Reveal(),
				SessionTTL: cfg.HTTP.SessionTTL, Secure: d.HTTPCert != nil, HSTS: cfg.HTTP.TLS.HSTS}})
		if err != nil {
			return nil, err
		}
		d.httpSrv = supervisor.NewHTTPServer(cfg.HTTP.Listen, guarded)
		serve := func() error { return d.httpSrv.Serve(d.httpLn) }
		if c := d.HTTPCert; c != nil {
			// crypto/tls's defaults, TLS 1.2 at least; HTTP/1.1 only, the
			// same server as on plain HTTP (timeouts, streams). Plain HTTP
			// sent to this port gets net/http's 400 and nothing else.
			d.httpSrv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{c.Pair}}
			var protos http.Protocols
			protos.SetHTTP1(true)
			d.httpSrv.Protocols = &protos
			// Failed handshakes (scanners, plain HTTP) at debug level: a
			// flood of them must not flood the journal.
			d.httpSrv.ErrorLog = slog.NewLogLogger(lg.With("component", "http").Handler(), slog.LevelDebug)
			serve = func() error { return d.httpSrv.ServeTLS(d.httpLn, "", "") }
		}
		startServing = func() {
			go func() {
				if err := serve(); !errors.Is(err, http.ErrServerClosed) {
					d.httpErr <- err
				}
			}()
			lg.Info("journal opened: http serving /readyz, the status and POST /api/v1/halt while recovery runs",
				"dir", cfg.Journal.Dir, "addr", d.httpLn.Addr().String())
		}
	}
	// Recovery runs inside Open: every saga a previous process left open
	// is finished before anything else can move or the daemon reports
	// ready.
	if err = sup.Open(); err != nil {
		return nil, err
	}
	d.Sup = sup
	if handoff != nil {
		handoff.Switch(d.Sup.HTTPHandler()) // the full API, behind the same guard (its sessions carry over)
	}
	// The account of the recovery is in the log before anything can see
	// the daemon ready (MQTT status or /readyz).
	rec := d.Sup.Recovered()
	lg.Info("journal taken over", "dir", cfg.Journal.Dir, "records", rec.RebuiltRecords, "recovered_sagas", len(rec.Reports), "took", rec.Took)
	for _, rep := range rec.Reports {
		lg.Warn("recovered: "+rep.Verdict(), "report", rep.String())
	}
	if d.Broker != nil {
		registerBrokerMetrics(d.Sup.Registry(), d.Broker.Broker)
		// The broker's door in front of each agent's lane: an agent whose
		// lane is full is held at the broker, unread, until the lane can
		// take its next request (a halt never waits).
		d.Broker.Broker.SetDoor(mqtt.AgentDoor(topics, d.Sup.Enter))
	}
	// The full API serves from here on, before the transport starts:
	// /readyz, the status, the dashboard and its halt answer whatever the
	// broker does (it may be down for as long as it likes; the transport
	// keeps retrying in the background and /readyz says why it is not
	// ready).
	if handoff != nil {
		lg.Info("http serving", "addr", d.httpLn.Addr().String())
	}
	var h mqtt.Handler = d.Sup
	if opt.WrapHandler != nil {
		h = opt.WrapHandler(h)
	}
	startMQTT := func() error {
		if err := d.Transport.Start(h); err != nil {
			return err
		}
		d.Sup.Refresh() // ready now if the broker is there, not a poll later
		if cfg.MQTT.HomeAssistant.Enabled {
			ctx, cancel := context.WithCancel(context.Background())
			d.stopAnnounce, d.announceDone = cancel, make(chan struct{})
			go func() {
				defer close(d.announceDone)
				announce(ctx, d.Transport, cfg, opt.Version, lg.With("component", "homeassistant"))
			}()
		}
		return nil
	}
	if d.Broker != nil {
		select {
		case <-d.Broker.Broker.Up():
		default:
			// Another process holds the embedded broker's port: the
			// transport dials it once it is ours, never before (it would
			// send our login to a stranger's broker).
			d.stopWait, d.waitDone = make(chan struct{}), make(chan struct{})
			go func() {
				defer close(d.waitDone)
				select {
				case <-d.Broker.Broker.Up():
				case <-d.stopWait:
					return
				}
				if err := startMQTT(); err != nil {
					lg.Error("mqtt: the transport did not start", "err", err)
				}
			}()
			return d, nil
		}
	}
	if err = startMQTT(); err != nil {
		return nil, err
	}
	return d, nil
}

// brokerInput is the embedded broker as a safety input: not ready while
// its address is in use by another process.
type brokerInput struct{ b *embedded.Broker }

func (brokerInput) Name() string   { return "mqtt broker" }
func (i brokerInput) Ready() error { return i.b.Listening() }

// HTTPAddr is the address HTTP listens on ("" when off).
func (d *Daemon) HTTPAddr() string {
	if d.httpLn == nil {
		return ""
	}
	return d.httpLn.Addr().String()
}

// HTTPURL is the listener's base URL, https:// with TLS ("" when off).
func (d *Daemon) HTTPURL() string {
	if d.httpLn == nil {
		return ""
	}
	if d.HTTPCert != nil {
		return "https://" + d.httpLn.Addr().String()
	}
	return "http://" + d.httpLn.Addr().String()
}

// Err delivers the HTTP server's failure, if it fails while running.
func (d *Daemon) Err() <-chan error { return d.httpErr }

// Close is the orderly stop: the supervisor unwinds open sagas and parks
// the actuators while the transport is still up to publish the reports;
// then the transport says offline, HTTP stops, the drivers close and the
// embedded broker stops. It is safe on a partly started daemon.
func (d *Daemon) Close() error {
	var errs []error
	if d.stopWait != nil {
		// The transport's start waiting for the broker's port: ended
		// (or finished) before anything it starts is read below.
		d.stopOnce.Do(func() { close(d.stopWait) })
		<-d.waitDone
	}
	if d.stopAnnounce != nil {
		d.stopAnnounce()
		<-d.announceDone
	}
	if d.Broker != nil {
		d.Broker.Broker.SetDoor(nil) // nothing is held for a supervisor that is closing
	}
	if d.Sup != nil {
		errs = append(errs, d.Sup.Close())
	}
	if d.fleet != nil {
		d.fleet.Close()
	}
	if d.Transport != nil {
		errs = append(errs, d.Transport.Close())
	}
	if d.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		d.httpSrv.Shutdown(ctx)
		cancel()
	}
	if d.httpLn != nil {
		d.httpLn.Close() // never served, if recovery failed before the journal opened
	}
	if d.Built != nil {
		d.Built.Close()
	}
	if d.Broker != nil {
		d.Broker.Broker.Close()
	}
	return errors.Join(errs...)
}

// registerBrokerMetrics exports what the embedded broker refused, so an
// attack on the front door shows on the robot's dashboard:
// saga_mqtt_refused_total{what="connect|publish|subscribe|retained"}.
func registerBrokerMetrics(reg *promtext.Registry, b *embedded.Broker) {
	for what, get := range map[string]func(embedded.Stats) int64{
		"connect":   func(s embedded.Stats) int64 { return s.RefusedConnects },
		"publish":   func(s embedded.Stats) int64 { return s.RefusedPublishes },
		"subscribe": func(s embedded.Stats) int64 { return s.RefusedSubscribes },
		"retained":  func(s embedded.Stats) int64 { return s.RefusedRetained },
	} {
		reg.MustRegister(promtext.NewCounterFunc(promtext.Opts{
			Name:        "saga_mqtt_refused_total",
			Help:        "What the embedded MQTT broker refused: connections (bad login, client id not the username), publishes, subscriptions and retained messages its ACL or bounds forbid.",
			ConstLabels: map[string]string{"what": what},
		}, func() float64 { return float64(get(b.Stats())) }))
	}
	reg.MustRegister(promtext.NewCounterFunc(promtext.Opts{
		Name: "saga_mqtt_paced_total",
		Help: "Commands the embedded MQTT broker held back: while their agent's lane was full, beyond their agent's rate (agents.rate and burst), or while the supervisor's queue was congested (an agent sending faster than the supervisor takes).",
	}, func() float64 { return float64(b.Stats().Paced) }))
	reg.MustRegister(promtext.NewCounterFunc(promtext.Opts{
		Name: "saga_mqtt_dropped_total",
		Help: "Messages the embedded MQTT broker dropped because a subscriber's queue was full.",
	}, func() float64 { return float64(b.Stats().Dropped) }))
}

// announce publishes Home Assistant's discovery configs, retained, and
// deletes those a previous start left for entities no longer configured
// (read back from the broker first; if that fails, only what is
// configured is published).
func announce(ctx context.Context, tr *mqtt.Transport, cfg *config.Config, version string, lg *slog.Logger) {
	h := cfg.MQTT.HomeAssistant
	o := homeassistant.Options{DiscoveryPrefix: h.DiscoveryPrefix, Topics: mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device},
		User: h.User, Version: version, Supplies: cfg.SupplyNames()}
	for _, name := range cfg.ActuatorNames() {
		switch cfg.Actuators[name].Kind {
		case actuators.Pulse: // no position to show
		case actuators.Servo:
			o.Actuators = append(o.Actuators, homeassistant.Actuator{Name: name, Unit: "°"})
		default:
			o.Actuators = append(o.Actuators, homeassistant.Actuator{Name: name})
		}
	}
	msgs := homeassistant.Configs(o)
	filter := h.DiscoveryPrefix + "/+/" + homeassistant.NodeID(cfg.Device) + "/+/config"
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	retained, err := tr.Retained(rctx, filter, 500*time.Millisecond)
	cancel()
	if err != nil {
		lg.Warn("home assistant: cannot read the retained discovery configs: entities removed from the config stay until the next start", "err", err)
	}
	msgs = append(homeassistant.Stale(retained, msgs), msgs...)
	for _, m := range msgs {
		payload := m.Payload
		if payload == nil {
			payload = []byte{} // retained and empty: Home Assistant deletes the entity
		}
		tr.Publish(m.Topic, true, payload)
	}
	lg.Info("home assistant discovery published", "configs", len(msgs), "prefix", h.DiscoveryPrefix)
}
