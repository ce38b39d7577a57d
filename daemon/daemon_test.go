package daemon

import (
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

func testConfig(t *testing.T) *config.Config {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Journal.Dir = filepath.Join(dir, "journal")
	cfg.Sim.World = filepath.Join(dir, "world")
	cfg.MQTT.Listen = "127.0.0.1:0"
	cfg.MQTT.Auth.PasswordFile = filepath.Join(dir, "mqtt", "passwd")
	cfg.MQTT.Auth.CredentialsDir = filepath.Join(dir, "mqtt", "credentials")
	cfg.HTTP.Listen = "127.0.0.1:0"
	return cfg
}

// The embedded default starts whole — locked broker, supervisor, transport,
// HTTP — and becomes ready; Close stops it all (a second Start on the same
// journal then works, so nothing held the journal's lock).
func TestStartAndClose(t *testing.T) {
	cfg := testConfig(t)
	d, err := Start(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if d.Broker == nil || d.Broker.Anonymous || cfg.MQTT.Username == "" {
		t.Fatal("the embedded broker did not start locked with the supervisor's login")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := http.Get("http://" + d.HTTPAddr() + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %v %v", d.Sup.Status().Reasons, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	cfg2 := testConfig(t)
	cfg2.Journal, cfg2.Sim, cfg2.MQTT.Auth = cfg.Journal, cfg.Sim, cfg.MQTT.Auth
	d2, err := Start(Options{Config: cfg2})
	if err != nil {
		t.Fatalf("a second start on the same journal: %v", err)
	}
	d2.Close()
}

// A port in use is an error from Start — before recovery, before the
// transport connects, before anything could report ready — and what was
// started is stopped again: `run` must not print its banner and tell
// systemd READY, and only then find the HTTP port taken.
func TestBusyPortsFailStart(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	cfg := testConfig(t)
	cfg.HTTP.Listen = busy.Addr().String()
	if d, err := Start(Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "http") {
		if d != nil {
			d.Close()
		}
		t.Fatalf("HTTP on a busy port: %v", err)
	}
	// Nothing was left holding the journal or the broker.
	cfg.HTTP.Listen = "127.0.0.1:0"
	d, err := Start(Options{Config: cfg})
	if err != nil {
		t.Fatalf("after a failed start: %v", err)
	}
	d.Close()

	cfg = testConfig(t)
	cfg.MQTT.Listen = busy.Addr().String()
	if d, err := Start(Options{Config: cfg}); err == nil {
		d.Close()
		t.Fatal("the embedded broker on a busy port started")
	}
}

// countingFS is the operating system's file system, counting the files the
// journal opens.
type countingFS struct {
	wal.OSFS
	opened atomic.Int64
}

func (f *countingFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	f.opened.Add(1)
	return f.OSFS.OpenFile(name, flag, perm)
}

// countingHandler counts the requests the transport hands the supervisor.
type countingHandler struct {
	mqtt.Handler
	submitted atomic.Int64
}

func (h *countingHandler) Submit(agent string, req api.Request, derr *api.Error, received time.Time, reply func(api.Reply)) {
	h.submitted.Add(1)
	h.Handler.Submit(agent, req, derr, received, reply)
}

// countingPublisher counts the statuses the supervisor publishes.
type countingPublisher struct {
	supervisor.Publisher
	statuses atomic.Int64
}

func (p *countingPublisher) SetStatus(st api.Status) {
	p.statuses.Add(1)
	p.Publisher.SetStatus(st)
}

// The hooks stand where Options says: the journal is opened on JournalFS,
// WrapPublisher is given the transport and the supervisor publishes
// through what it returns, WrapHandler is given the supervisor and an
// agent's request reaches it through what it returns.
func TestHooks(t *testing.T) {
	cfg := testConfig(t)
	jfs := &countingFS{}
	var h *countingHandler
	var p *countingPublisher
	d, err := Start(Options{Config: cfg, NoHTTP: true, JournalFS: jfs,
		WrapHandler: func(in mqtt.Handler) mqtt.Handler {
			h = &countingHandler{Handler: in}
			return h
		},
		WrapPublisher: func(in supervisor.Publisher) supervisor.Publisher {
			p = &countingPublisher{Publisher: in}
			return p
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if jfs.opened.Load() == 0 {
		t.Error("the journal opened no file on JournalFS")
	}
	if h == nil || h.Handler != mqtt.Handler(d.Sup) {
		t.Fatalf("WrapHandler was not given the supervisor: %v", h)
	}
	if p == nil || p.Publisher != supervisor.Publisher(d.Transport) {
		t.Fatalf("WrapPublisher was not given the transport: %v", p)
	}
	if p.statuses.Load() == 0 {
		t.Error("the supervisor published no status through WrapPublisher's publisher")
	}

	// The demo's agent, logged in with the password the daemon wrote.
	pw, err := os.ReadFile(filepath.Join(cfg.MQTT.Auth.CredentialsDir, "planner"))
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.NewClientOptions().AddBroker(d.BrokerURL).SetClientID("planner").
		SetUsername("planner").SetPassword(strings.TrimSpace(string(pw))))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("agent connect: %v", tok.Error())
	}
	defer c.Disconnect(50)
	topics := mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device}
	replied := make(chan struct{}, 1)
	if tok := c.Subscribe(topics.Reply("planner"), 1, func(paho.Client, paho.Message) {
		select {
		case replied <- struct{}{}:
		default:
		}
	}); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	c.Publish(topics.AgentCmd("planner"), 1, false, `{"id":"1","agent":"planner","op":"status"}`)
	select {
	case <-replied:
	case <-time.After(10 * time.Second):
		t.Fatal("no reply to a status request")
	}
	if h.submitted.Load() == 0 {
		t.Error("the request did not pass through WrapHandler's handler")
	}
}

// An agent flooding its command topic past its rate is held at the
// embedded broker to the rate its lane admits (agents.rate and burst:
// brokerauth's PaceRate), its excess left unread in its socket; a halt on
// the same topic, from another connection of the same login (the same,
// empty bucket), is not held for a token: it latches while the flood is
// still being held.
func TestBrokerHoldsAFlooderToItsRateButNeverAHalt(t *testing.T) {
	cfg := testConfig(t)
	cfg.Agents.Rate, cfg.Agents.Burst = 20, 5 // 100 requests: about 5 s held
	d, err := Start(Options{Config: cfg, NoHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pw, err := os.ReadFile(filepath.Join(cfg.MQTT.Auth.CredentialsDir, "planner"))
	if err != nil {
		t.Fatal(err)
	}
	dial := func(id string) paho.Client {
		c := paho.NewClient(paho.NewClientOptions().AddBroker(d.BrokerURL).SetClientID(id).
			SetUsername("planner").SetPassword(strings.TrimSpace(string(pw))))
		if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("%s: connect: %v", id, tok.Error())
		}
		t.Cleanup(func() { c.Disconnect(50) })
		return c
	}
	flooder, stopper := dial("planner"), dial("planner/stop")
	topics := mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device}
	var last atomic.Bool // the reply to the flood's last request arrived
	if tok := flooder.Subscribe(topics.Reply("planner"), 1, func(_ paho.Client, m paho.Message) {
		if strings.Contains(string(m.Payload()), `"f99"`) {
			last.Store(true)
		}
	}); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	for i := range 100 {
		flooder.Publish(topics.AgentCmd("planner"), 1, false, `{"id":"f`+strconv.Itoa(i)+`","agent":"planner","op":"status"}`)
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.Broker.Broker.Stats().RateWaits == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("100 requests at once past a burst of 5: none held to the agent's rate (%+v)", d.Broker.Broker.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopper.Publish(topics.AgentCmd("planner"), 1, false, `{"id":"h","agent":"planner","op":"halt","reason":"amid a held flood"}`)
	for {
		if halted, why := d.Sup.Engine().Halted(); halted {
			if !strings.Contains(why, "amid a held flood") {
				t.Fatalf("halted for %q", why)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the halt never latched")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if last.Load() {
		t.Error("the halt latched only after the whole flood had been let through: it waited for the flooder's rate")
	}
}
