package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/internal/nodelay"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// The harness of TestHostile: one real daemon per broker, a pool of agents
// that speak raw MQTT API v1 (so that a test can pipeline, replay and send
// bytes no client library would), a watcher of the retained state, status
// and events topics, and readers of the sim world file and the journal.

const (
	hostileToken = "operator-secret-0123456789abcdef-hostile"
	// hostileMaxSagaCommands is unwind.max_saga_commands in the test
	// config: small, so that SAGA_FULL is cheap to reach and a flooder's
	// saga (whose report a halt publishes) stays well under 64 KiB.
	hostileMaxSagaCommands = 400
	hostilePool            = 16 // agents a01..a16: the default agents.max
	hostileSupervisorID    = "saga-supervisor-arm1"
	// hostileLongName is a fifth servo the test config adds, its name the
	// longest a name may be: a report of a few hundred of its steps is
	// over the brokers' 64 KiB.
	hostileLongName = "wrist_rotation_servo_with_a_deliberately_long_name_for_reports_x"
)

// hostile is one daemon and the clients the cases share.
type hostile struct {
	kind      string // "mosquitto" or "embedded"
	broker    string // the URL agents dial
	dir       string
	journal   string
	worldPath string
	names     []string // actuators, sorted
	d         *daemonProc
	hc        *http.Client
	watch     *hWatcher
	agents    []*hAgent // a01..a16
	baseline  map[string]float64
	copies    int
	mu        sync.Mutex
}

// a is pool agent i (1-based): a01 … a16. a16 is the harness's own (it
// puts the arm back between cases); cases use a01 … a15.
func (h *hostile) a(i int) *hAgent { return h.agents[i-1] }

func hostileConfig(t *testing.T, dir, broker, mqttListen, httpAddr string) string {
	t.Helper()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte(hostileToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := defaultYAMLForTests(t)
	for old, new := range map[string]string{
		"  dir: ./saga-data/journal": "  dir: " + filepath.Join(dir, "journal"),
		"  world: ./saga-data/world": "  world: " + filepath.Join(dir, "world"),
		"  broker: embedded":         "  broker: " + broker,
		"  listen: 127.0.0.1:1883":   "  listen: " + mqttListen,
		"  listen: 127.0.0.1:8080":   "  listen: " + httpAddr,
		`  reset_token_file: ""`:     "  reset_token_file: " + token,
		"sim: {slew: 720}":           "sim: {slew: 0}", // instant servos: positions are exact
		"  max_saga_commands: 10000": fmt.Sprintf("  max_saga_commands: %d", hostileMaxSagaCommands),
		"\n# An emergency-stop input": "\n  " + hostileLongName + ":\n    kind: servo\n    driver: sim\n    sim: {slew: 0}\n" +
			"    min: -90\n    max: 90\n    supply: battery\n    timeout: 200ms\n\n# An emergency-stop input",
	} {
		if !strings.Contains(text, old) {
			t.Fatalf("the default config no longer has %q; adapt the hostile test", old)
		}
		text = strings.ReplaceAll(text, old, new)
	}
	path := filepath.Join(dir, "arm.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "check-config", path); code != 0 {
		t.Fatalf("hostile config invalid:\n%s", out)
	}
	return path
}

// newHostile starts a broker of the given kind (mosquitto: Debian's, with
// message_size_limit 65536; embedded: the daemon's own), the daemon on it,
// the watcher and the agent pool, and brings the arm to the baseline every
// case starts from and must leave it at: the pose after one halt (elbow and
// shoulder at their safe values), so that a halt in a case moves nothing.
func newHostile(t *testing.T, kind string) *hostile {
	t.Helper()
	dir := t.TempDir()
	ports := stablePorts(t, 2)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	h := &hostile{kind: kind, dir: dir, journal: filepath.Join(dir, "journal"), worldPath: filepath.Join(dir, "world"),
		hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	var cfgBroker, listen string
	switch kind {
	case "mosquitto":
		// message_size_limit: a PUBLISH over it is acknowledged and
		// dropped (mosquitto logs that only with log_type debug, which
		// slows it too much to keep on here).
		conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\nset_tcp_nodelay true\nmessage_size_limit 65536\n", ports[1])
		h.broker = runMosquitto(t, t.TempDir(), ports[1], conf)
		cfgBroker, listen = h.broker, `""`
	case "embedded":
		cfgBroker, listen = "embedded", fmt.Sprintf("127.0.0.1:%d", ports[1])
		h.broker = "tcp://" + listen
	default:
		t.Fatalf("unknown broker kind %q", kind)
	}
	cfgPath := hostileConfig(t, dir, cfgBroker, listen, httpAddr)
	h.startDaemon(t, cfgPath, httpAddr)
	h.watch = dialWatcher(t, h.broker, arm1)
	for i := 1; i <= hostilePool; i++ {
		h.agents = append(h.agents, dialAgent(t, h.broker, arm1, fmt.Sprintf("a%02d", i)))
	}
	// The baseline: one halt sends elbow and shoulder to their safe values.
	h.httpHalt(t, "hostile test: baseline")
	daemontestWait(t, "the elbow at its safe value", 10*time.Second, func() bool { return h.status(t).commanded()["elbow"] == 45 })
	h.httpReset(t)
	h.waitReady(t)
	h.baseline = h.status(t).commanded()
	h.snap(t) // world, status and retained states agree
	return h
}

// startDaemon runs the real binary on cfgPath (HTTP on httpAddr), notes
// the config's actuators, and waits until it is ready; it is killed when
// the test ends, its log printed if the test failed.
func (h *hostile) startDaemon(t *testing.T, cfgPath, httpAddr string) {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	for name := range cfg.Actuators {
		h.names = append(h.names, name)
	}
	slices.Sort(h.names)
	h.d = &daemonProc{t: t, http: httpAddr, cfgPath: cfgPath}
	h.d.start()
	t.Cleanup(func() {
		logged := len(h.d.out.String())
		if h.d.cmd.ProcessState == nil {
			if t.Failed() {
				// Where every goroutine of a daemon that stopped
				// answering was: the Go runtime prints them on SIGQUIT.
				h.d.cmd.Process.Signal(syscall.SIGQUIT)
				exited := make(chan struct{})
				go func() { h.d.cmd.Wait(); close(exited) }()
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
					h.d.cmd.Process.Kill()
					<-exited
				}
			} else {
				h.d.cmd.Process.Kill()
				h.d.cmd.Wait()
			}
		}
		if t.Failed() {
			out := h.d.out.String()
			t.Logf("daemon log (last 8 KiB before the end):\n%s", lastBytes(out[:logged], 8<<10))
			if dump := out[logged:]; dump != "" {
				t.Logf("daemon's goroutines at the end (SIGQUIT):\n%s", dump)
			}
		}
	})
	h.d.waitReady()
}

func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// daemontestWait polls cond every 5 ms until it holds, failing t after d.
func daemontestWait(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// --- HTTP ---------------------------------------------------------------

type hostileStatus struct {
	Ready   bool     `json:"ready"`
	Reasons []string `json:"reasons"`
	Halted  bool     `json:"halted"`
	HaltWhy string   `json:"halt_reason"`
	Journal struct {
		LastSeq uint64 `json:"last_seq"`
	} `json:"journal"`
	Actuators []struct {
		Name      string  `json:"name"`
		Commanded float64 `json:"commanded"`
	} `json:"actuators"`
	Leases []struct {
		Agent string `json:"agent"`
		Lease string `json:"lease"`
		Epoch uint64 `json:"epoch"`
	} `json:"leases"`
	OpenSagas   []uint64                 `json:"open_sagas"`
	Drain       *struct{ Reason string } `json:"drain"`
	Quarantined []struct{ Agent string } `json:"quarantined"`
}

func (s hostileStatus) commanded() map[string]float64 {
	m := map[string]float64{}
	for _, a := range s.Actuators {
		m[a.Name] = a.Commanded
	}
	return m
}

func (h *hostile) do(method, path, token string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, "http://"+h.d.http+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if method == http.MethodPost {
		// The supervisor refuses a POST without it (a cross-site form post).
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (h *hostile) status(t *testing.T) hostileStatus {
	t.Helper()
	code, body, err := h.do(http.MethodGet, "/api/v1/status", "", nil)
	var st hostileStatus
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &st) != nil {
		t.Fatalf("GET /api/v1/status: %d %v %s", code, err, body)
	}
	return st
}

func (h *hostile) readyz(t *testing.T) int {
	t.Helper()
	code, body, err := h.do(http.MethodGet, "/readyz", "", nil)
	if err != nil {
		t.Fatalf("GET /readyz: %v %s", err, body)
	}
	return code
}

// httpHalt halts over HTTP: one HALT record, or two with a reason (the
// latch comes before the body is read; the reason follows).
func (h *hostile) httpHalt(t *testing.T, reason string) {
	t.Helper()
	var b []byte
	if reason != "" {
		b, _ = json.Marshal(map[string]string{"reason": reason})
	}
	code, body, err := h.do(http.MethodPost, "/api/v1/halt", "", b)
	if err != nil || code != http.StatusOK || !strings.Contains(string(body), `"halted":true`) {
		t.Fatalf("POST /api/v1/halt: %d %v %s", code, err, body)
	}
}

func (h *hostile) httpReset(t *testing.T) {
	t.Helper()
	code, body, err := h.do(http.MethodPost, "/api/v1/reset", hostileToken, nil)
	if err != nil || code != http.StatusOK || !strings.Contains(string(body), `"halted":false`) {
		t.Fatalf("POST /api/v1/reset: %d %v %s", code, err, body)
	}
}

func (h *hostile) waitReady(t *testing.T) {
	t.Helper()
	daemontestWait(t, "/readyz 200", 10*time.Second, func() bool { return h.readyz(t) == http.StatusOK })
}

// assertHalted: the halt latched — status says halted and /readyz is 503.
func (h *hostile) assertHalted(t *testing.T) {
	t.Helper()
	if st := h.status(t); !st.Halted {
		t.Errorf("not halted: status %+v", st)
	}
	if code := h.readyz(t); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d while halted, want 503", code)
	}
}

func (h *hostile) assertNotHalted(t *testing.T) {
	t.Helper()
	if st := h.status(t); st.Halted {
		t.Errorf("halted: %s", st.HaltWhy)
	}
}

// --- the world, and where the three views of it agree ---------------------

type hostileSnap struct {
	world     map[string]sim.DeviceState
	commanded map[string]float64 // the status endpoint
	retained  map[string]float64 // state/<actuator>, as the watcher has it
}

// world reads a copy of the sim world file (the daemon holds its lock).
func (h *hostile) world() (map[string]sim.DeviceState, error) {
	b, err := os.ReadFile(h.worldPath)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.copies++
	cp := filepath.Join(h.dir, fmt.Sprintf("world.copy.%d", h.copies))
	h.mu.Unlock()
	defer os.Remove(cp)
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		return nil, err
	}
	w, err := sim.OpenWorld(cp)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	return w.Snapshot(), nil
}

// snap waits until the world file, the status endpoint and the retained
// state topics agree on every actuator (the retained states trail the
// replies a little), and returns that view.
func (h *hostile) snap(t *testing.T) hostileSnap {
	t.Helper()
	var s hostileSnap
	var why string
	deadline := time.Now().Add(10 * time.Second)
	for {
		why = ""
		w, err := h.world()
		st := h.status(t)
		s = hostileSnap{world: w, commanded: st.commanded(), retained: h.watch.states()}
		if err != nil {
			why = "world file: " + err.Error()
		}
		for _, n := range h.names {
			if why != "" {
				break
			}
			ds, c := w[n], s.commanded[n]
			r, ok := s.retained[n]
			switch {
			case !ds.Known:
				why = "the world has no " + n
			case ds.Commanded != c || ds.Position != c:
				why = fmt.Sprintf("%s: status says commanded %v, the world file commanded %v position %v", n, c, ds.Commanded, ds.Position)
			case !ok || r != c:
				why = fmt.Sprintf("%s: status says commanded %v, the retained state %v (seen %v)", n, c, r, ok)
			}
		}
		if why == "" {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the world, the status and the retained states never agreed: %s", why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// unchanged asserts nothing but the actuators in except moved between two
// snapshots.
func (h *hostile) unchanged(t *testing.T, before, after hostileSnap, except ...string) {
	t.Helper()
	for _, n := range h.names {
		if slices.Contains(except, n) {
			continue
		}
		if b, a := before.world[n], after.world[n]; b.Commanded != a.Commanded || b.Position != a.Position {
			t.Errorf("%s moved in the world: commanded %v→%v, position %v→%v", n, b.Commanded, a.Commanded, b.Position, a.Position)
		}
		if b, a := before.commanded[n], after.commanded[n]; b != a {
			t.Errorf("%s moved in the status: commanded %v→%v", n, b, a)
		}
		if b, a := before.retained[n], after.retained[n]; b != a {
			t.Errorf("%s moved on its retained state topic: %v→%v", n, b, a)
		}
	}
}

// atBaseline asserts the arm is where every case starts.
func (h *hostile) atBaseline(t *testing.T) {
	t.Helper()
	s := h.snap(t)
	for _, n := range h.names {
		if s.commanded[n] != h.baseline[n] {
			t.Errorf("%s at %v, the baseline is %v", n, s.commanded[n], h.baseline[n])
		}
	}
}

// restore drives every actuator back to the baseline with a16's saga,
// committed: the legitimate way to undo what a case was allowed to leave.
func (h *hostile) restore(t *testing.T) {
	t.Helper()
	now := h.status(t).commanded()
	var off []string
	for _, n := range h.names {
		if now[n] != h.baseline[n] {
			off = append(off, n)
		}
	}
	if len(off) == 0 {
		return
	}
	f := h.a(hostilePool)
	f.hello(t, time.Minute)
	saga := f.ok(t, "begin", nil).Saga
	for _, n := range off {
		f.ok(t, "step", kv{"saga": saga, "actuator": n, "value": h.baseline[n]})
	}
	f.ok(t, "commit", kv{"saga": saga})
	f.ok(t, "bye", nil)
	f.setLease("", 0)
}

// settle puts the daemon back where every case starts: not halted, no
// lease or saga left (a lease left to expire would unwind in the middle of
// a later case), the arm at the baseline.
func (h *hostile) settle(t *testing.T) {
	t.Helper()
	if st := h.status(t); st.Halted {
		h.httpReset(t)
	}
	h.waitReady(t)
	for _, a := range h.agents {
		if l, _ := a.current(); l != "" {
			a.bye(t)
		}
	}
	daemontestWait(t, "no lease and no open saga", 10*time.Second, func() bool {
		st := h.status(t)
		return len(st.Leases) == 0 && len(st.OpenSagas) == 0
	})
	h.restore(t)
	h.atBaseline(t)
	h.assertNotHalted(t)
}

// --- the journal ---------------------------------------------------------

type jrec struct {
	Seq uint64
	rollback.Record
}

// mark is the journal's last sequence number now; records(from mark+1)
// are the ones written since.
func (h *hostile) mark(t *testing.T) uint64 {
	t.Helper()
	return h.status(t).Journal.LastSeq
}

// records reads the journal after seq after. The daemon is writing it
// meanwhile: a batch is one pwrite, and a read that overtakes the copy
// can see a hole (zeros) followed by a frame of the same batch. Such a
// read is retried; a hole that is still there after a few seconds is
// reported.
func (h *hostile) records(t *testing.T, after uint64) []jrec {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		var out []jrec
		err := wal.Scan(h.journal, wal.Options{}, after+1, func(r wal.Record) error {
			rec, err := rollback.DecodeRecord(r.Type, r.Payload)
			if err != nil {
				return fmt.Errorf("record %d: %w", r.Seq, err)
			}
			out = append(out, jrec{Seq: r.Seq, Record: rec})
			return nil
		})
		if err == nil {
			return out
		}
		if !strings.Contains(err.Error(), "zero-filled or torn") || time.Now().After(deadline) {
			t.Fatalf("reading the journal: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func count(recs []jrec, typ rollback.RecordType, pred func(jrec) bool) int {
	n := 0
	for _, r := range recs {
		if r.Type == typ && (pred == nil || pred(r)) {
			n++
		}
	}
	return n
}

func byCmd(id string) func(jrec) bool { return func(r jrec) bool { return r.CmdID == id } }

// waitRecords waits until the journal since after holds want records of
// typ matching pred (records the halt goroutine writes come a little after
// the halt's reply), then checks it does not hold more.
func (h *hostile) waitRecords(t *testing.T, after uint64, typ rollback.RecordType, pred func(jrec) bool, want int) []jrec {
	t.Helper()
	var recs []jrec
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs = h.records(t, after)
		n := count(recs, typ, pred)
		if n == want {
			return recs
		}
		if n > want || time.Now().After(deadline) {
			t.Fatalf("the journal holds %d %s records since seq %d, want %d:\n%s", n, typ, after, want, formatRecs(recs, 40))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func formatRecs(recs []jrec, n int) string {
	var b strings.Builder
	for _, r := range recs[max(0, len(recs)-n):] {
		fmt.Fprintf(&b, "  %6d %-11s saga %d step %d %s target %v prior %v cmd %q code %q agent %q %s\n",
			r.Seq, r.Type, r.Saga, r.Step, r.Actuator, r.Target, r.Prior, r.CmdID, r.Code, r.Agent, r.Message)
	}
	return b.String()
}

// --- agents --------------------------------------------------------------

type kv = map[string]any

// hReply is one reply as received.
type hReply struct {
	api.Reply
	Raw []byte
	At  time.Time
}

// hAgent is a controller speaking raw MQTT API v1 over its own paho
// connection, with its will on its will topic. Every reply it receives is
// checked to be coded (ok, or a code from api.Codes with a message); the
// problems are collected, not fatal, and checked after each case.
type hAgent struct {
	name   string
	topics mqtt.Topics
	c      paho.Client

	mu      sync.Mutex
	log     []hReply
	byID    map[string][]int // indices in log
	bad     []string
	changed chan struct{}
	n       int
	lease   string
	epoch   uint64
}

func pahoConnect(t *testing.T, broker, id string, will string) paho.Client {
	t.Helper()
	return pahoConnectAs(t, broker, id, hLogin{}, will)
}

// hLogin is a broker login; the zero value connects anonymously.
type hLogin struct{ user, pass string }

// pahoConnectAs is pahoConnect logging in as l.
func pahoConnectAs(t *testing.T, broker, id string, l hLogin, will string) paho.Client {
	t.Helper()
	c, err := pahoTry(broker, id, l, will)
	if err != nil {
		t.Fatalf("%s: connect %s as %q: %v", id, broker, l.user, err)
	}
	return c
}

// pahoTry connects as l with client id id, returning the broker's refusal
// instead of failing a test.
func pahoTry(broker, id string, l hLogin, will string) (paho.Client, error) {
	opts := paho.NewClientOptions().SetDialer(nodelay.Dialer(30 * time.Second)).AddBroker(broker).SetClientID(id).
		SetCleanSession(true).SetAutoReconnect(false).SetWriteTimeout(10 * time.Second).SetConnectRetry(false)
	if l.user != "" {
		opts.SetUsername(l.user).SetPassword(l.pass)
	}
	if will != "" {
		opts.SetWill(will, "gone", 1, false)
	}
	c := paho.NewClient(opts)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, fmt.Errorf("no CONNACK within 10 s")
	}
	if tok.Error() != nil {
		return nil, tok.Error()
	}
	return c, nil
}

func subscribe(t *testing.T, c paho.Client, topic string, h paho.MessageHandler) {
	t.Helper()
	if tok := c.Subscribe(topic, 1, h); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", topic, tok.Error())
	}
}

func dialAgent(t *testing.T, broker string, topics mqtt.Topics, name string) *hAgent {
	t.Helper()
	return dialAgentAs(t, broker, topics, name, "")
}

// dialAgentAs is dialAgent logging in as name with password (none: anonymous).
func dialAgentAs(t *testing.T, broker string, topics mqtt.Topics, name, password string) *hAgent {
	t.Helper()
	a := &hAgent{name: name, topics: topics, byID: map[string][]int{}, changed: make(chan struct{})}
	var l hLogin
	if password != "" {
		l = hLogin{name, password}
	}
	a.c = pahoConnectAs(t, broker, name, l, topics.Will(name))
	t.Cleanup(func() { a.c.Disconnect(50) })
	subscribe(t, a.c, topics.Reply(name), a.onReply)
	return a
}

// resubscribe subscribes to the reply topic again (after a case took the
// agent's replies elsewhere).
func (a *hAgent) resubscribe() {
	a.c.Subscribe(a.topics.Reply(a.name), 1, a.onReply).WaitTimeout(10 * time.Second)
}

func (a *hAgent) onReply(_ paho.Client, m paho.Message) {
	raw := slices.Clone(m.Payload())
	r, problem := checkReply(raw)
	a.mu.Lock()
	defer a.mu.Unlock()
	if problem != "" {
		a.bad = append(a.bad, fmt.Sprintf("reply to %s: %s: %s", a.name, problem, raw))
	}
	a.log = append(a.log, hReply{Reply: r, Raw: raw, At: time.Now()})
	a.byID[r.ID] = append(a.byID[r.ID], len(a.log)-1)
	close(a.changed)
	a.changed = make(chan struct{})
}

// checkReply decodes a reply and says what breaks the contract that every
// reply is coded: an object with an id and ok; a refusal with a code of
// api.Codes and a message; a success without a code.
func checkReply(raw []byte) (api.Reply, string) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return api.Reply{}, "not a JSON object: " + err.Error()
	}
	var r api.Reply
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, "does not decode as a reply: " + err.Error()
	}
	if _, ok := m["id"]; !ok {
		return r, "no id"
	}
	if v, ok := m["ok"]; !ok || (string(v) != "true" && string(v) != "false") {
		return r, "no boolean ok"
	}
	if r.OK {
		if r.Code != "" {
			return r, "ok with a code"
		}
		return r, ""
	}
	if _, known := api.Lookup(r.Code); !known {
		return r, fmt.Sprintf("refusal with code %q, not one of api.Codes", r.Code)
	}
	if r.Message == "" {
		return r, "refusal without a message"
	}
	return r, ""
}

func (a *hAgent) setLease(lease string, epoch uint64) {
	a.mu.Lock()
	a.lease, a.epoch = lease, epoch
	a.mu.Unlock()
}

func (a *hAgent) current() (string, uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lease, a.epoch
}

func (a *hAgent) problems() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.bad)
}

// mark is where the agent's reply log is now.
func (a *hAgent) mark() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.log)
}

// since returns the replies received after mark.
func (a *hAgent) since(mark int) []hReply {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.log[mark:])
}

func (a *hAgent) nextID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	return fmt.Sprintf("%s-%d", a.name, a.n)
}

// build makes a request: id, agent, op, the agent's lease and epoch when
// the op carries them and f does not say otherwise, and f's fields.
func (a *hAgent) build(op string, f kv) kv {
	req := kv{"id": a.nextID(), "agent": a.name, "op": op}
	switch op {
	case "hello", "status", "halt", "reset":
	default:
		lease, epoch := a.current()
		if lease != "" {
			req["lease"], req["epoch"] = lease, epoch
		}
	}
	for k, v := range f {
		if v == nil {
			delete(req, k)
			continue
		}
		req[k] = v
	}
	return req
}

func encode(req kv) []byte {
	b, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	return b
}

// publishRaw publishes payload on topic, QoS 1, without waiting for any
// reply (the broker's acknowledgement is not waited for either: a flood
// pipelines).
func (a *hAgent) publishRaw(topic string, payload []byte, retained bool) paho.Token {
	return a.c.Publish(topic, 1, retained, payload)
}

// publish sends req on the agent's own command topic and returns its id.
func (a *hAgent) publish(req kv) string {
	a.publishRaw(a.topics.AgentCmd(a.name), encode(req), false)
	return req["id"].(string)
}

// wait returns the first n replies carrying id, failing t if they do not
// all come within 15 s.
func (a *hAgent) wait(t *testing.T, id string, n int) []hReply {
	t.Helper()
	rs, ok := a.waitFor(id, n, 15*time.Second)
	if !ok {
		t.Fatalf("agent %s: %d replies to %q within 15 s, want %d", a.name, len(rs), id, n)
	}
	return rs
}

func (a *hAgent) waitFor(id string, n int, d time.Duration) ([]hReply, bool) {
	deadline := time.After(d)
	for {
		a.mu.Lock()
		var rs []hReply
		for _, i := range a.byID[id] {
			rs = append(rs, a.log[i])
		}
		ch := a.changed
		a.mu.Unlock()
		if len(rs) >= n {
			return rs[:n], true
		}
		select {
		case <-ch:
		case <-deadline:
			return rs, false
		}
	}
}

// next returns the first reply after mark that satisfies pred.
func (a *hAgent) next(t *testing.T, mark int, what string, pred func(hReply) bool) hReply {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		a.mu.Lock()
		for _, r := range a.log[mark:] {
			if pred(r) {
				a.mu.Unlock()
				return r
			}
		}
		ch := a.changed
		a.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("agent %s: no reply %s within 15 s; got %d replies since", a.name, what, len(a.since(mark)))
		}
	}
}

// drain returns once the agent's lane has served everything sent before:
// a status request answered ok was queued behind all of it (a refusal of
// the status itself — BUSY, RATE_LIMITED — may be dropped, so each try
// waits briefly and the next uses a new id).
func (a *hAgent) drain(t *testing.T) {
	t.Helper()
	for try := 0; try < 100; try++ {
		if rs, ok := a.waitFor(a.publish(a.build("status", nil)), 1, 2*time.Second); ok && rs[0].OK {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("agent %s: its lane never drained", a.name)
}

// bye ends the agent's lease, whatever state a case left it in: any coded
// answer will do (the lease may have ended), and a refusal of the lane
// (BUSY, RATE_LIMITED: a case flooded) may be dropped, so it retries.
func (a *hAgent) bye(t *testing.T) {
	t.Helper()
	for try := 0; try < 50; try++ {
		if rs, ok := a.waitFor(a.publish(a.build("bye", nil)), 1, 2*time.Second); ok {
			if c := rs[0].Code; c != api.CodeBusy && c != api.CodeRateLimited {
				a.setLease("", 0)
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("agent %s: bye never answered", a.name)
}

// quiet asserts no reply with id arrives within d.
func (a *hAgent) quiet(t *testing.T, id string, d time.Duration) {
	t.Helper()
	if rs, _ := a.waitFor(id, 1, d); len(rs) > 0 {
		t.Errorf("agent %s: %q was answered: %s", a.name, id, rs[0].Raw)
	}
}

// call sends a request built from op and f and waits for its reply.
func (a *hAgent) call(t *testing.T, op string, f kv) hReply {
	t.Helper()
	return a.wait(t, a.publish(a.build(op, f)), 1)[0]
}

// ok is call, failing t on a refusal.
func (a *hAgent) ok(t *testing.T, op string, f kv) hReply {
	t.Helper()
	r := a.call(t, op, f)
	if !r.OK {
		t.Fatalf("agent %s: %s %v refused: %s", a.name, op, f, r.Raw)
	}
	return r
}

// refused is call, failing t unless it is refused with code.
func (a *hAgent) refused(t *testing.T, op string, f kv, code string) hReply {
	t.Helper()
	r := a.call(t, op, f)
	if r.OK || r.Code != code {
		t.Errorf("agent %s: %s %v: %s, want %s", a.name, op, f, r.Raw, code)
	}
	return r
}

// hello takes a fresh lease (ending the agent's previous one).
func (a *hAgent) hello(t *testing.T, ttl time.Duration) hReply {
	t.Helper()
	r := a.ok(t, "hello", kv{"ttl_ms": ttl.Milliseconds()})
	a.setLease(r.Lease, r.Epoch)
	return r
}

// begin opens a saga under the agent's lease.
func (a *hAgent) begin(t *testing.T) uint64 {
	t.Helper()
	return a.ok(t, "begin", nil).Saga
}

// stream sends reqs keeping at most window unanswered and at most perSec a
// second (under the lane's rate), and returns every reply in order.
func (a *hAgent) stream(t *testing.T, reqs []kv, window int, perSec float64) []hReply {
	t.Helper()
	out := make([]hReply, len(reqs))
	gap := time.Duration(float64(time.Second) / perSec)
	start := time.Now()
	next := 0
	for i := range reqs {
		for i-next >= window {
			out[next] = a.wait(t, reqs[next]["id"].(string), 1)[0]
			next++
		}
		if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
			time.Sleep(d)
		}
		a.publish(reqs[i])
	}
	for ; next < len(reqs); next++ {
		out[next] = a.wait(t, reqs[next]["id"].(string), 1)[0]
	}
	return out
}

// --- the watcher ---------------------------------------------------------

type hEvent struct {
	Kind   string          `json:"kind"`
	Reply  json.RawMessage `json:"reply"`
	Report *api.ReportJSON `json:"report"`
	raw    []byte
	reply  api.Reply
	at     time.Time
}

type hStatusMsg struct {
	api.Status
	at time.Time
}

// hWatcher follows the retained states, the status and the events.
type hWatcher struct {
	c        paho.Client
	mu       sync.Mutex
	state    map[string]float64
	statuses []hStatusMsg
	events   []hEvent
	bad      []string
}

func dialWatcher(t *testing.T, broker string, topics mqtt.Topics) *hWatcher {
	t.Helper()
	return dialWatcherAs(t, broker, topics, fmt.Sprintf("hostile-watcher-%d", time.Now().UnixNano()), hLogin{})
}

// dialWatcherAs is dialWatcher with client id id, logging in as l.
func dialWatcherAs(t *testing.T, broker string, topics mqtt.Topics, id string, l hLogin) *hWatcher {
	t.Helper()
	w := &hWatcher{state: map[string]float64{}}
	w.c = pahoConnectAs(t, broker, id, l, "")
	t.Cleanup(func() { w.c.Disconnect(50) })
	subscribe(t, w.c, topics.State("+"), func(_ paho.Client, m paho.Message) {
		var st struct {
			Actuator  string   `json:"actuator"`
			Commanded *float64 `json:"commanded"`
		}
		if err := json.Unmarshal(m.Payload(), &st); err != nil || st.Commanded == nil {
			w.problem("state %s: %s", m.Topic(), m.Payload())
			return
		}
		w.mu.Lock()
		w.state[st.Actuator] = *st.Commanded
		w.mu.Unlock()
	})
	subscribe(t, w.c, topics.Status(), func(_ paho.Client, m paho.Message) {
		var st api.Status
		if err := json.Unmarshal(m.Payload(), &st); err != nil {
			w.problem("status: %s", m.Payload())
			return
		}
		w.mu.Lock()
		w.statuses = append(w.statuses, hStatusMsg{Status: st, at: time.Now()})
		w.mu.Unlock()
	})
	subscribe(t, w.c, topics.Events(), func(_ paho.Client, m paho.Message) {
		ev := hEvent{raw: slices.Clone(m.Payload()), at: time.Now()}
		if err := json.Unmarshal(m.Payload(), &ev); err != nil || ev.Kind == "" {
			w.problem("event without a kind: %s", m.Payload())
			return
		}
		if ev.Kind == api.EventReply {
			r, problem := checkReply(ev.Reply)
			if problem != "" {
				w.problem("reply event: %s: %s", problem, m.Payload())
			}
			ev.reply = r
		}
		w.mu.Lock()
		w.events = append(w.events, ev)
		w.mu.Unlock()
	})
	return w
}

func (w *hWatcher) problem(format string, args ...any) {
	w.mu.Lock()
	w.bad = append(w.bad, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

func (w *hWatcher) problems() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.bad)
}

func (w *hWatcher) states() map[string]float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := make(map[string]float64, len(w.state))
	for k, v := range w.state {
		m[k] = v
	}
	return m
}

func (w *hWatcher) marks() (events, statuses int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events), len(w.statuses)
}

func (w *hWatcher) eventsSince(mark int) []hEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events[mark:])
}

func (w *hWatcher) statusesSince(mark int) []hStatusMsg {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.statuses[mark:])
}

// event waits for an event after mark that satisfies pred.
func (w *hWatcher) event(t *testing.T, mark int, what string, d time.Duration, pred func(hEvent) bool) (hEvent, bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, ev := range w.eventsSince(mark) {
			if pred(ev) {
				return ev, true
			}
		}
		if time.Now().After(deadline) {
			return hEvent{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// --- raw MQTT ------------------------------------------------------------

// mqttPacket frames an MQTT 3.1.1 control packet: its first byte, the
// remaining length as a variable-length integer, the body.
func mqttPacket(first byte, body ...[]byte) []byte {
	n := 0
	for _, b := range body {
		n += len(b)
	}
	out := []byte{first}
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		out = append(out, d)
		if n == 0 {
			break
		}
	}
	for _, b := range body {
		out = append(out, b...)
	}
	return out
}

func mqttString(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }

// impostor connects to the broker with clientID and a clean session — a
// session takeover that disconnects whoever holds that id and drops its
// session — and, in the same write, publishes the retained messages and
// disconnects. The broker reads the packets in order, so the messages are
// retained before the client it kicked can reconnect and subscribe again.
func impostor(broker, clientID string, retained map[string][]byte) error {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(broker, "tcp://"), 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	var buf []byte
	buf = append(buf, mqttPacket(0x10, mqttString("MQTT"), []byte{4, 0x02, 0, 30}, mqttString(clientID))...)
	topics := make([]string, 0, len(retained))
	for topic := range retained {
		topics = append(topics, topic)
	}
	slices.Sort(topics)
	for _, topic := range topics {
		buf = append(buf, mqttPacket(0x31, mqttString(topic), retained[topic])...) // PUBLISH, QoS 0, retain
	}
	buf = append(buf, 0xE0, 0) // DISCONNECT
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(buf); err != nil {
		return err
	}
	io.Copy(io.Discard, conn) // the CONNACK, then the broker closes
	return nil
}

// retainedOn reads what the broker holds retained on topics, with a fresh
// subscription.
func retainedOn(t *testing.T, broker string, topics ...string) map[string][]byte {
	t.Helper()
	return retainedOnAs(t, broker, fmt.Sprintf("hostile-retained-%d", time.Now().UnixNano()), hLogin{}, topics...)
}

// retainedOnAs is retainedOn with client id id, logging in as l. Each topic
// must be a topic, not a filter: it waits for one retained message on each.
func retainedOnAs(t *testing.T, broker, id string, l hLogin, topics ...string) map[string][]byte {
	t.Helper()
	c := pahoConnectAs(t, broker, id, l, "")
	defer c.Disconnect(50)
	var mu sync.Mutex
	got := map[string][]byte{}
	for _, topic := range topics {
		subscribe(t, c, topic, func(_ paho.Client, m paho.Message) {
			if m.Retained() {
				mu.Lock()
				got[m.Topic()] = slices.Clone(m.Payload())
				mu.Unlock()
			}
		})
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == len(topics) {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return got
}
