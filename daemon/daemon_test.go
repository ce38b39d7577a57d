package daemon

import (
	"encoding/json"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
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

	// The embedded broker's port in use by another process is no failed
	// start: the daemon is up, not ready naming the address, and the
	// broker listens (MQTT starts) once the port is free.
	cfg = testConfig(t)
	cfg.MQTT.Listen = busy.Addr().String()
	d, err = Start(Options{Config: cfg})
	if err != nil {
		t.Fatalf("the embedded broker on a busy port: %v", err)
	}
	defer d.Close()
	d.Sup.Refresh()
	if ready, reasons := d.Sup.Readiness(); ready || !strings.Contains(strings.Join(reasons, "\n"), "input mqtt broker: "+busy.Addr().String()+" in use by another process") {
		t.Fatalf("ready %v, reasons %q: want not ready, naming the address in use", ready, reasons)
	}
	busy.Close()
	select {
	case <-d.Broker.Broker.Up():
	case <-time.After(testtool.Slow(10 * time.Second)):
		t.Fatal("the broker does not listen 10 s after its port was freed")
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

// An agent sending past its rate is held at the embedded broker to the
// rate its lane admits (agents.rate and burst: brokerauth's PaceRate). Its
// bucket is then empty, and a halt it sends next takes no token: neither a
// halt request on its command topic nor anything at all on its e-stop topic
// (a panel's button may send "1": not a halt request, so only the topic
// keeps it unpaced) waits for the rate. The broker's count of publishes that
// waited for their rate (RateWaits) tells: a halt that took a token from the
// empty bucket would add one. (The halt request on cmd/<agent> is moved to
// estop/<agent> by the broker, TestHaltOnCmdIsNotQueuedBehindCommands; a
// halt that stays on a paced topic, the shared cmd, is exempt by decoding:
// embedded's TestPaceRateHoldsOnlyTheFlooder.)
func TestBrokerHoldsAnAgentToItsRateButNeverAHalt(t *testing.T) {
	for _, tc := range []struct {
		name, topic, payload, reason string
	}{
		{"halt request on cmd", "cmd", `{"id":"h","agent":"planner","op":"halt","reason":"after a held burst"}`, "after a held burst"},
		{"anything on estop", "estop", "1", "e-stop topic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			// A token a second: the bucket is still empty for a second
			// after the last held request went through.
			cfg.Agents.Rate, cfg.Agents.Burst = 1, 1
			d, err := Start(Options{Config: cfg, NoHTTP: true})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			pw, err := os.ReadFile(filepath.Join(cfg.MQTT.Auth.CredentialsDir, "planner"))
			if err != nil {
				t.Fatal(err)
			}
			c := paho.NewClient(paho.NewClientOptions().AddBroker(d.BrokerURL).SetClientID("planner").
				SetUsername("planner").SetPassword(strings.TrimSpace(string(pw))))
			if tok := c.Connect(); !tok.WaitTimeout(testtool.Slow(5*time.Second)) || tok.Error() != nil {
				t.Fatalf("connect: %v", tok.Error())
			}
			defer c.Disconnect(50)
			topics := mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device}
			var toks []paho.Token
			for i := range 3 {
				toks = append(toks, c.Publish(topics.AgentCmd("planner"), 1, false, `{"id":"s`+strconv.Itoa(i)+`","agent":"planner","op":"status"}`))
			}
			for _, tok := range toks { // each PUBACK comes once its token was due
				if !tok.WaitTimeout(testtool.Slow(10*time.Second)) || tok.Error() != nil {
					t.Fatalf("publish: %v", tok.Error())
				}
			}
			held := d.Broker.Broker.Stats()
			if held.RateWaits < 2 {
				t.Fatalf("3 requests at once past a burst of 1: %d held to the agent's rate, want 2 (%+v)", held.RateWaits, held)
			}
			where := topics.AgentCmd("planner")
			if tc.topic == "estop" {
				where = topics.EstopAgent("planner")
			}
			c.Publish(where, 1, false, tc.payload)
			deadline := time.Now().Add(testtool.Slow(10 * time.Second))
			for {
				if halted, why := d.Sup.Engine().Halted(); halted {
					if !strings.Contains(why, tc.reason) {
						t.Fatalf("halted for %q", why)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the halt never latched")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if st := d.Broker.Broker.Stats(); st.RateWaits != held.RateWaits || st.Paced != held.Paced {
				t.Errorf("the halt was held at the door: rate waits %d -> %d, paced %d -> %d",
					held.RateWaits, st.RateWaits, held.Paced, st.Paced)
			}
		})
	}
}

// stallHandler holds every request but a halt until release is closed:
// the supervisor's command connection stuck behind what it was given, as
// a flood keeps it on a quarter of a core.
type stallHandler struct {
	mqtt.Handler
	release chan struct{}
	stalled atomic.Bool
}

func (h *stallHandler) Submit(agent string, req api.Request, derr *api.Error, received time.Time, reply func(api.Reply)) {
	if req.Op != api.OpHalt {
		h.stalled.Store(true)
		<-h.release
	}
	h.Handler.Submit(agent, req, derr, received, reply)
}

// A halt request on an agent's command topic is moved by the embedded
// broker to the agent's e-stop topic (Reroute), which the supervisor reads
// on a connection of its own: it latches, and is answered under its id,
// even while the command connection is stuck behind an earlier request.
// Left on the command topic it waited behind that request.
func TestHaltOnCmdIsNotQueuedBehindCommands(t *testing.T) {
	cfg := testConfig(t)
	stall := &stallHandler{release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(stall.release) }) }
	d, err := Start(Options{Config: cfg, NoHTTP: true, WrapHandler: func(h mqtt.Handler) mqtt.Handler {
		stall.Handler = h
		return stall
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defer release()
	pw, err := os.ReadFile(filepath.Join(cfg.MQTT.Auth.CredentialsDir, "planner"))
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.NewClientOptions().AddBroker(d.BrokerURL).SetClientID("planner").
		SetUsername("planner").SetPassword(strings.TrimSpace(string(pw))))
	if tok := c.Connect(); !tok.WaitTimeout(testtool.Slow(5*time.Second)) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(50)
	topics := mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device}
	answered := make(chan string, 4)
	if tok := c.Subscribe(topics.Reply("planner"), 1, func(_ paho.Client, m paho.Message) {
		answered <- string(m.Payload())
	}); !tok.WaitTimeout(testtool.Slow(5*time.Second)) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	c.Publish(topics.AgentCmd("planner"), 1, false, `{"id":"s","agent":"planner","op":"status"}`)
	deadline := time.Now().Add(testtool.Slow(10 * time.Second))
	for !stall.stalled.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the status request never reached the supervisor")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Publish(topics.AgentCmd("planner"), 1, false, `{"id":"h","agent":"planner","op":"halt","reason":"behind a stuck queue"}`)
	for {
		if halted, why := d.Sup.Engine().Halted(); halted {
			if !strings.Contains(why, "behind a stuck queue") {
				t.Fatalf("halted for %q", why)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the halt on cmd/planner did not latch while the command connection was stuck (broker %+v)", d.Broker.Broker.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := d.Broker.Broker.Stats().Rerouted; n != 1 {
		t.Errorf("the broker moved %d publishes, want 1 (the halt)", n)
	}
	release()
	for got := map[string]bool{}; !got["h"]; {
		select {
		case p := <-answered:
			var rep api.Reply
			if err := json.Unmarshal([]byte(p), &rep); err != nil {
				t.Fatalf("reply %s: %v", p, err)
			}
			if rep.ID == "h" && !rep.OK {
				t.Fatalf("the halt was answered %s", p)
			}
			got[rep.ID] = true
		case <-time.After(testtool.Slow(10 * time.Second)):
			t.Fatal("the halt was not answered under its id")
		}
	}
}
