package main

import (
	"bufio"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/approval"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// TestSecurity is the table of docs/SECURITY.md, "Attacks the tests try":
// nobody moves an actuator they were not given. It runs the real binary
// twice, locked as shipped: on the embedded broker (config.DefaultYAML,
// which logs everyone in and derives its ACL from agents.allow) and on
// Debian's mosquitto configured by the binary's own `mosquitto-config`.
// Each row is an attack by a client that has no login, a wrong one, or a
// valid but hostile one (mallory), or by an agent beyond its agents.allow
// entry, or on the HTTP API.
//
// Every row, besides its own assertions, is checked to have moved nothing
// (the sim world file, the status endpoint and the retained state topics
// agree and are unchanged), to leave the supervisor up, not halted, ready,
// online on its status topic and never disconnected from its broker, and
// to leave planner — an honest agent holding a lease and an open saga
// throughout — served, its lease and saga alive.
//
// Token guessing comes last: it locks HTTP resets for a minute.
func TestSecurity(t *testing.T) {
	for _, kind := range []string{"embedded", "mosquitto"} {
		t.Run(kind, func(t *testing.T) {
			began := time.Now()
			s := newSecure(t, kind)
			cases := securityCases()
			ran := 0
			for _, c := range cases {
				if !t.Run(c.name, func(t *testing.T) { ran++; s.runCase(t, c) }) && !s.agrees(t) {
					// A forged retained state the broker kept cannot be
					// undone: every later row would time out on it.
					t.Fatalf("after %s the status and the retained states no longer agree: the rows after it would all fail", c.name)
				}
				s.settle(t)
			}
			t.Logf("SUMMARY %s: %d attacks, each refused with nothing moved, in %v; %s", kind, ran, time.Since(began).Round(time.Millisecond), strings.Join(s.rss, "; "))
		})
	}
}

const (
	secToken = hostileToken // what httpReset sends
	secSup   = "saga-supervisor-arm1"
	secDev   = "arm1"
	secTTL   = time.Minute
)

// secAgents are the test's agents.allow: planner as shipped, ctl as
// shipped, mallory (valid, hostile), wrist (the gripper only), watcher
// (status only), operator (reset over MQTT, which mqtt.allow_reset keeps
// off) and probe (status only: a fresh subscriber, for reading what the
// broker retains).
const secAllow = `  allow:
    planner: {}
    ctl:
      ops: [hello, heartbeat, bye, begin, step, commit, abort, status]
    mallory: {}
    wrist: {actuators: [gripper]}
    watcher: {ops: [status], actuators: []}
    operator: {ops: [status, reset], actuators: []}
    probe: {ops: [status], actuators: []}
`

type secure struct {
	*hostile
	creds    string    // the credentials directory: <user> holds its password
	mosq     *exec.Cmd // nil on the embedded broker
	priv     ed25519.PrivateKey
	planner  *hAgent
	mallory  *hAgent
	wrist    *hAgent
	watcherA *hAgent // the agent "watcher" (the hWatcher logs in as ctl)
	operator *hAgent
	planSaga uint64
	rss      []string
}

func (s *secure) pw(t *testing.T, user string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.creds, user))
	if err != nil {
		t.Fatalf("the password of %s: %v", user, err)
	}
	return strings.TrimSpace(string(b))
}

func (s *secure) login(t *testing.T, user string) hLogin {
	t.Helper()
	return hLogin{user, s.pw(t, user)}
}

// strangerPass is the password of "stranger": a valid line of the broker's
// password file, but not an agent of agents.allow (a login left over from
// an older configuration).
const strangerPass = "stranger-password-0123456789"

func mosquittoPasswd(t *testing.T, file string, create bool, user, pass string) {
	t.Helper()
	bin := needTool(t, "mosquitto_passwd", "mosquitto")
	args := []string{"-b", file, user, pass}
	if create {
		args = append([]string{"-c"}, args...)
	}
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd %v: %v\n%s", args, err, out)
	}
	if err := os.Chmod(file, 0o600); err != nil {
		t.Fatal(err)
	}
}

// securityConfig is config.DefaultYAML as shipped (locked), with temporary
// paths, instant servos, the test's agents, the gripper behind approvals
// and a reset token; on mosquitto the supervisor's login.
func securityConfig(t *testing.T, dir, kind, broker, mqttListen, httpAddr, pubKey string) string {
	t.Helper()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte(secToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const allow = "  allow:\n    planner: {}      # the demo's controller: everything but reset\n    ctl:             # saga-supervisor ctl\n      ops: [hello, heartbeat, bye, begin, step, commit, abort, status]\n"
	text := string(config.DefaultYAML)
	repl := [][2]string{
		{"  dir: ./saga-data/journal", "  dir: " + filepath.Join(dir, "journal")},
		{"  world: ./saga-data/world", "  world: " + filepath.Join(dir, "world")},
		{"  broker: embedded", "  broker: " + broker},
		{"  listen: 127.0.0.1:1883", "  listen: " + mqttListen},
		{"  listen: 127.0.0.1:8080", "  listen: " + httpAddr},
		{`  reset_token_file: ./saga-data/operator-token`, "  reset_token_file: " + token},
		{"sim: {slew: 720}", "sim: {slew: 0}"},
		{allow, secAllow},
		{"    anonymous: false\n", "    anonymous: false\n"}, // locked, as shipped: asserted present
		{"    password_file: ./saga-data/mqtt/passwd", "    password_file: " + filepath.Join(dir, "mqtt", "passwd")},
		{"    credentials_dir: ./saga-data/mqtt/credentials", "    credentials_dir: " + filepath.Join(dir, "mqtt", "credentials")},
		{"  gripper:\n    kind: servo\n", "  gripper:\n    kind: servo\n    requires_approval: true\n"},
	}
	if kind == "mosquitto" {
		repl = append(repl, [2]string{`  username: ""`, "  username: " + secSup},
			[2]string{`  password_file: ""`, "  password_file: " + filepath.Join(dir, "mqtt", "credentials", secSup)})
	}
	for _, r := range repl {
		if !strings.Contains(text, r[0]) {
			t.Fatalf("the default config no longer has %q; adapt the security test", r[0])
		}
		text = strings.ReplaceAll(text, r[0], r[1])
	}
	text += "\napprovals:\n  public_keys:\n    - " + pubKey + "\n  max_ttl: 5m\n"
	path := filepath.Join(dir, "arm.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newSecure(t *testing.T, kind string) *secure {
	t.Helper()
	dir := t.TempDir()
	ports := stablePorts(t, 2)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	brokerAddr := fmt.Sprintf("127.0.0.1:%d", ports[1])
	h := &hostile{kind: kind, broker: "tcp://" + brokerAddr, dir: dir, journal: filepath.Join(dir, "journal"), worldPath: filepath.Join(dir, "world"),
		hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	s := &secure{hostile: h}

	pub, priv, err := approval.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s.priv = priv
	keyPath := filepath.Join(dir, "operator.key")
	if err := approval.WriteKeyPair(keyPath, pub, priv, "security test"); err != nil {
		t.Fatal(err)
	}

	var cfgPath string
	switch kind {
	case "embedded":
		cfgPath = securityConfig(t, dir, kind, "embedded", brokerAddr, httpAddr, keyPath+".pub")
		// stranger has a valid password file line but is no agent.
		if err := os.MkdirAll(filepath.Join(dir, "mqtt"), 0o700); err != nil {
			t.Fatal(err)
		}
		mosquittoPasswd(t, filepath.Join(dir, "mqtt", "passwd"), true, "stranger", strangerPass)
		s.creds = filepath.Join(dir, "mqtt", "credentials")
	case "mosquitto":
		mq := filepath.Join(dir, "mosquitto")
		cfgPath = securityConfig(t, dir, kind, h.broker, `""`, httpAddr, keyPath+".pub")
		if out, code := run(t, "mosquitto-config", "--config", cfgPath, "--out", mq, "--listen", brokerAddr); code != 0 {
			t.Fatalf("mosquitto-config: exit %d\n%s", code, out)
		}
		s.creds = filepath.Join(dir, "mqtt", "credentials") // the config's credentials_dir
		// stranger: a valid login that is no agent; sysmon: the test's own
		// reader of $SYS (the retained count), in no agent's rules.
		mosquittoPasswd(t, filepath.Join(mq, "passwd"), false, "stranger", strangerPass)
		mosquittoPasswd(t, filepath.Join(mq, "passwd"), false, "sysmon", strangerPass+"-sys")
		acl, err := os.OpenFile(filepath.Join(mq, "saga.acl"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(acl, "\n# The security test's monitor.\nuser sysmon\ntopic read $SYS/#\n")
		acl.Close()
		conf := filepath.Join(mq, "mosquitto.conf")
		b, err := os.ReadFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("listener %d 127.0.0.1\n", ports[1]); !strings.Contains(string(b), want) {
			t.Fatalf("mosquitto.conf lacks %q:\n%s", want, b)
		}
		extra := "sys_interval 1\n"
		if os.Getuid() == 0 {
			extra += "user root\n" // as root mosquitto would drop to a user who cannot read the test's files
		}
		os.WriteFile(conf, append(b, extra...), 0o600)
		_, s.mosq = runMosquittoConf(t, conf, ports[1])
	default:
		t.Fatalf("unknown broker kind %q", kind)
	}
	if out, code := run(t, "check-config", cfgPath); code != 0 {
		t.Fatalf("security config invalid:\n%s", out)
	}
	h.startDaemon(t, cfgPath, httpAddr)

	h.watch = dialWatcherAs(t, h.broker, arm1, "ctl", s.login(t, "ctl"))
	s.planner = dialAgentAs(t, h.broker, arm1, "planner", s.pw(t, "planner"))
	s.mallory = dialAgentAs(t, h.broker, arm1, "mallory", s.pw(t, "mallory"))
	s.wrist = dialAgentAs(t, h.broker, arm1, "wrist", s.pw(t, "wrist"))
	s.watcherA = dialAgentAs(t, h.broker, arm1, "watcher", s.pw(t, "watcher"))
	s.operator = dialAgentAs(t, h.broker, arm1, "operator", s.pw(t, "operator"))

	// The baseline: one halt sends elbow and shoulder to their safe
	// values, so that a halt in a row moves nothing.
	h.httpHalt(t, "security test: baseline")
	daemontestWait(t, "the elbow at its safe value", 10*time.Second, func() bool { return h.status(t).commanded()["elbow"] == 45 })
	h.httpReset(t)
	h.waitReady(t)
	h.baseline = h.status(t).commanded()
	h.snap(t)
	s.planner.hello(t, secTTL)
	s.planSaga = s.planner.begin(t)
	return s
}

// agrees reports whether the status endpoint and the retained states
// agree on every actuator within 2 s.
func (s *secure) agrees(t *testing.T) bool {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c, r := s.status(t).commanded(), s.watch.states()
		ok := true
		for _, n := range s.names {
			if v, seen := r[n]; !seen || v != c[n] {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func (s *secure) agentsAll() []*hAgent {
	return []*hAgent{s.planner, s.mallory, s.wrist, s.watcherA, s.operator}
}

type secCase struct {
	name  string
	halts bool // halts and resets over HTTP itself: planner's lease and saga may end
	run   func(t *testing.T, s *secure)
}

func (s *secure) runCase(t *testing.T, c secCase) {
	s.assertNotHalted(t)
	before := s.snap(t)
	marks := map[*hAgent]int{}
	for _, a := range s.agentsAll() {
		marks[a] = len(a.problems())
	}
	watchMark := len(s.watch.problems())
	_, stMark := s.watch.marks()
	lost := strings.Count(s.d.out.String(), "mqtt connection lost")

	c.run(t, s)

	s.unchanged(t, before, s.snap(t))
	if st := s.status(t); st.Halted {
		t.Errorf("halted after the attack: %s", st.HaltWhy)
	}
	if code := s.readyz(t); code != http.StatusOK {
		t.Errorf("/readyz %d after the attack", code)
	}
	if s.d.cmd.ProcessState != nil {
		t.Fatalf("the daemon exited: %v", s.d.cmd.ProcessState)
	}
	if n := strings.Count(s.d.out.String(), "mqtt connection lost"); n != lost {
		t.Errorf("the supervisor lost its broker connection %d times during the attack", n-lost)
	}
	for _, m := range s.watch.statusesSince(stMark) {
		if m.State != api.StateOnline {
			t.Errorf("a status with state %q was published during the attack: %+v", m.State, m.Status)
		}
	}
	if !c.halts {
		s.plannerAlive(t)
	}
	for _, a := range s.agentsAll() {
		if p := a.problems(); len(p) > marks[a] {
			for _, x := range p[marks[a]:] {
				t.Errorf("uncoded reply: %s", x)
			}
		}
	}
	for _, p := range s.watch.problems()[watchMark:] {
		t.Errorf("watcher: %s", p)
	}
}

// plannerAlive: planner is still connected and served, its lease lives
// (a heartbeat under it is answered ok) and its saga is open.
func (s *secure) plannerAlive(t *testing.T) {
	t.Helper()
	if !s.planner.c.IsConnectionOpen() {
		t.Errorf("planner was disconnected from the broker")
		return
	}
	if r := s.planner.call(t, "heartbeat", nil); !r.OK {
		t.Errorf("planner's lease did not survive: heartbeat %s", r.Raw)
	}
	if !slices.Contains(s.status(t).OpenSagas, s.planSaga) {
		t.Errorf("planner's saga %d is no longer open", s.planSaga)
	}
}

// settle puts the daemon back where every row starts: not halted, every
// agent connected, planner holding a lease and an open saga.
func (s *secure) settle(t *testing.T) {
	t.Helper()
	if st := s.status(t); st.Halted {
		s.httpReset(t)
	}
	s.waitReady(t)
	for _, p := range []**hAgent{&s.planner, &s.mallory, &s.wrist, &s.watcherA, &s.operator} {
		if !(*p).c.IsConnectionOpen() {
			name := (*p).name
			(*p).c.Disconnect(0)
			*p = dialAgentAs(t, s.broker, arm1, name, s.pw(t, name))
		}
	}
	if !s.watch.c.IsConnectionOpen() {
		t.Fatal("the watcher (ctl) lost its connection")
	}
	if r := s.planner.call(t, "heartbeat", nil); !r.OK || !slices.Contains(s.status(t).OpenSagas, s.planSaga) {
		s.planner.hello(t, secTTL)
		s.planSaga = s.planner.begin(t)
	}
	for _, a := range []*hAgent{s.mallory, s.wrist} {
		if l, _ := a.current(); l != "" {
			a.bye(t)
		}
	}
}

// redial replaces mallory's connection: a row that logged in as mallory on
// a connection of its own took mallory's client id over.
func (s *secure) redial(t *testing.T) {
	t.Helper()
	s.mallory.c.Disconnect(0)
	s.mallory = dialAgentAs(t, s.broker, arm1, "mallory", s.pw(t, "mallory"))
}

// fence returns once the supervisor has served a request mallory sent
// after everything before (the broker forwards one client's messages in
// order), and a little more for other topics' deliveries.
func (s *secure) fence(t *testing.T) {
	t.Helper()
	s.mallory.drain(t)
	time.Sleep(100 * time.Millisecond)
}

// --- raw MQTT -------------------------------------------------------------

// rawConnect opens a TCP connection and sends an MQTT 3.1.1 CONNECT with a
// clean session, client id id and, if user is not "", the login; it returns
// the CONNACK's return code (-1: the broker closed without one).
func rawConnect(broker, id, user, pass string) (net.Conn, int, error) {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(broker, "tcp://"), 5*time.Second)
	if err != nil {
		return nil, 0, err
	}
	flags := byte(0x02)
	body := [][]byte{mqttString("MQTT"), {4, 0, 0, 30}, mqttString(id)}
	if user != "" {
		flags |= 0xC0
		body = append(body, mqttString(user), mqttString(pass))
	}
	body[1][1] = flags
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(mqttPacket(0x10, body...)); err != nil {
		conn.Close()
		return nil, 0, err
	}
	ack := make([]byte, 4)
	if _, err := io.ReadFull(conn, ack); err != nil {
		conn.Close()
		return nil, -1, nil
	}
	if ack[0] != 0x20 {
		conn.Close()
		return nil, 0, fmt.Errorf("not a CONNACK: % x", ack)
	}
	return conn, int(ack[3]), nil
}

// rawPublish is a QoS 0 PUBLISH.
func rawPublish(topic string, payload []byte, retain bool) []byte {
	first := byte(0x30)
	if retain {
		first |= 1
	}
	return mqttPacket(first, mqttString(topic), payload)
}

// rawSession logs in as l (client id l.user), writes the packets and a
// DISCONNECT in one go and waits for the broker to close.
func (s *secure) rawSession(t *testing.T, l hLogin, packets ...[]byte) {
	t.Helper()
	conn, rc, err := rawConnect(s.broker, l.user, l.user, l.pass)
	if err != nil || rc != 0 {
		t.Fatalf("raw login as %s: rc %d %v", l.user, rc, err)
	}
	defer conn.Close()
	var buf []byte
	for _, p := range packets {
		buf = append(buf, p...)
	}
	buf = append(buf, 0xE0, 0)
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Write(buf); err != nil {
		t.Logf("raw session as %s: write: %v (the broker closed it)", l.user, err)
	}
	io.Copy(io.Discard, conn)
}

// --- spies ------------------------------------------------------------------

type spyMsg struct {
	topic   string
	payload []byte
}

type spyLog struct {
	mu   sync.Mutex
	msgs []spyMsg
}

func (l *spyLog) all() []spyMsg {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

// spy subscribes mallory to filter, makes planner talk (a heartbeat and a
// status under its lease), and asserts mallory received nothing but what
// it may read (its replies, status, state, events) and nothing carrying
// planner's lease id.
func (s *secure) spy(t *testing.T, filter string) {
	t.Helper()
	log := &spyLog{}
	tok := s.mallory.c.Subscribe(filter, 1, func(_ paho.Client, m paho.Message) {
		log.mu.Lock()
		log.msgs = append(log.msgs, spyMsg{m.Topic(), slices.Clone(m.Payload())})
		log.mu.Unlock()
	})
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatalf("no SUBACK for %s", filter)
	}
	granted := "?"
	if st, ok := tok.(*paho.SubscribeToken); ok {
		granted = fmt.Sprintf("%#x", st.Result()[filter])
	}
	t.Logf("mallory subscribed %s: granted %s, err %v", filter, granted, tok.Error())
	defer func() { s.mallory.c.Unsubscribe(filter).WaitTimeout(5 * time.Second) }()
	lease, _ := s.planner.current()
	s.planner.ok(t, "heartbeat", nil)
	s.planner.ok(t, "status", nil)
	s.planner.ok(t, "heartbeat", nil)
	s.fence(t)
	may := func(topic string) bool {
		return topic == arm1.Reply("mallory") || topic == arm1.Status() || topic == arm1.Events() ||
			strings.HasPrefix(topic, strings.TrimSuffix(arm1.State("x"), "x"))
	}
	t.Logf("mallory received %d messages on %s", len(log.all()), filter)
	for _, m := range log.all() {
		if !may(m.topic) {
			t.Errorf("mallory, subscribed to %s, received %s: %.200s", filter, m.topic, m.payload)
		}
		if strings.Contains(string(m.payload), lease) {
			t.Errorf("mallory, subscribed to %s, received planner's lease id on %s: %.200s", filter, m.topic, m.payload)
		}
	}
}

// --- approvals ----------------------------------------------------------------

func (s *secure) approve(t *testing.T, priv ed25519.PrivateKey, device, actuator string, value float64, saga uint64, nb, na time.Time) string {
	t.Helper()
	tok, err := approval.Sign(priv, approval.Claims{Device: device, Actuator: actuator, Value: value, Saga: saga, NotBefore: nb, NotAfter: na})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (s *secure) grip() float64 { return s.baseline["gripper"] }

// --- HTTP -------------------------------------------------------------------

func (s *secure) post(t *testing.T, path string, hdr map[string]string, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.d.http+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// refusedWhileHalted halts over HTTP, sends a reset that must be refused
// with want, asserts the halt held, and resets properly.
func (s *secure) refusedWhileHalted(t *testing.T, path string, hdr map[string]string, body string, want int) {
	t.Helper()
	s.httpHalt(t, "security test")
	code, _, b := s.post(t, path, hdr, body)
	if code != want {
		t.Errorf("POST %s %v: %d %s, want %d", path, hdr, code, b, want)
	}
	s.assertHalted(t)
	s.httpReset(t)
	s.waitReady(t)
}

// --- process figures ----------------------------------------------------------

func vmRSS(pid int) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strings.Join(strings.Fields(rest), " ")
		}
	}
	return "?"
}

// brokerPID is the process holding the retained store: the daemon's own
// on the embedded broker, mosquitto's otherwise.
func (s *secure) brokerPID() int {
	if s.mosq != nil {
		return s.mosq.Process.Pid
	}
	return s.d.cmd.Process.Pid
}

// sysRetained reads mosquitto's count of retained messages from $SYS (as
// the test's monitor login; published every second).
func (s *secure) sysRetained(t *testing.T) int {
	t.Helper()
	const topic = "$SYS/broker/retained messages/count"
	c := pahoConnectAs(t, s.broker, "sysmon", hLogin{"sysmon", strangerPass + "-sys"}, "")
	defer c.Disconnect(50)
	var mu sync.Mutex
	var vals []int
	subscribe(t, c, topic, func(_ paho.Client, m paho.Message) {
		if n, err := strconv.Atoi(string(m.Payload())); err == nil {
			mu.Lock()
			vals = append(vals, n)
			mu.Unlock()
		}
	})
	// The value retained, then any newer one: mosquitto publishes it when
	// it changed, on its sys_interval (1 s here) ticks; two ticks are
	// waited for.
	time.Sleep(2500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(vals) == 0 {
		t.Fatal("no $SYS retained count from mosquitto within 2.5 s")
	}
	t.Logf("$SYS retained counts seen: %v", vals)
	return vals[len(vals)-1]
}

// freshRetained subscribes a fresh client (probe) to filter and returns
// the retained messages it receives within d.
func (s *secure) freshRetained(t *testing.T, filter string, d time.Duration) map[string][]byte {
	t.Helper()
	c := pahoConnectAs(t, s.broker, "probe", s.login(t, "probe"), "")
	defer c.Disconnect(50)
	var mu sync.Mutex
	got := map[string][]byte{}
	subscribe(t, c, filter, func(_ paho.Client, m paho.Message) {
		if m.Retained() {
			mu.Lock()
			got[m.Topic()] = slices.Clone(m.Payload())
			mu.Unlock()
		}
	})
	time.Sleep(d)
	mu.Lock()
	defer mu.Unlock()
	return got
}

// retainedStatus is the supervisor's status as a fresh subscriber gets it.
func (s *secure) retainedStatus(t *testing.T) (api.Status, []byte) {
	t.Helper()
	got := retainedOnAs(t, s.broker, "probe", s.login(t, "probe"), arm1.Status())
	raw := got[arm1.Status()]
	var st api.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("the retained status %q: %v", raw, err)
	}
	return st, raw
}

// --- the table ------------------------------------------------------------------

func securityCases() []secCase {
	return []secCase{
		// Logging in.
		{name: "01_connect_without_credentials", run: caseNoCredentials},
		{name: "02_wrong_password", run: caseWrongPassword},
		{name: "03_unknown_user", run: caseUnknownUser},
		{name: "04_takeover_supervisor_client_id", run: caseTakeoverSupervisor},
		{name: "05_takeover_planner_client_id", run: caseTakeoverPlanner},
		// Speaking for another.
		{name: "06_publish_on_cmd_planner", run: casePublishCmdPlanner},
		{name: "07_publish_on_shared_cmd", run: casePublishSharedCmd},
		{name: "08_own_topic_naming_planner_bad_request", run: caseOwnTopicNamingPlanner},
		// Listening in.
		{name: "09_subscribe_reply_planner", run: func(t *testing.T, s *secure) { s.spy(t, arm1.Reply("planner")) }},
		{name: "10_subscribe_everything", run: func(t *testing.T, s *secure) { s.spy(t, "#") }},
		{name: "11_subscribe_reply_wildcard", run: func(t *testing.T, s *secure) { s.spy(t, arm1.Reply("+")) }},
		{name: "12_subscribe_sys", run: func(t *testing.T, s *secure) { s.spy(t, "$SYS/#") }},
		{name: "12b_subscribe_cmd_wildcard", run: func(t *testing.T, s *secure) { s.spy(t, arm1.AgentCmd("+")) }},
		// Forging the supervisor's and planner's topics.
		{name: "13_forge_planner_will", run: caseForgeWill},
		{name: "14_forge_retained_status", run: caseForgeStatus},
		{name: "15_forge_retained_state", run: caseForgeState},
		{name: "16_forge_event", run: caseForgeEvent},
		{name: "17_forge_reply_to_planner", run: caseForgeReply},
		// Leases, sagas and status.
		{name: "18_step_with_planners_lease_lease_not_holder", run: caseStolenLease},
		{name: "19_step_in_planners_saga_saga_not_owner", run: caseStolenSaga},
		{name: "20_status_carries_no_lease", run: caseStatusNoLease},
		// agents.allow.
		{name: "21_wrist_steps_elbow_forbidden", run: caseWristElbow},
		{name: "22_watcher_hello_forbidden", run: caseWatcherHello},
		{name: "23_login_not_in_agents_allow", run: caseStranger},
		{name: "24_reset_over_mqtt_right_token_forbidden", halts: true, run: caseResetOverMQTT},
		// The broker itself.
		{name: "25_retained_flood", run: caseRetainedFlood},
		{name: "26_wildcards_in_publish_topic", run: caseWildcardPublish},
		{name: "27_agent_name_with_wildcards_bad_request", run: caseAgentWildcards},
		{name: "28_estop_as_planner_dropped", run: caseEstopAsPlanner},
		// Approvals.
		{name: "29_approval_forged_invalid", run: caseApprovalForged},
		{name: "30_approval_replayed", run: caseApprovalReplayed},
		{name: "31_approval_expired", run: caseApprovalExpired},
		{name: "32_approval_mismatch", run: caseApprovalMismatch},
		{name: "33_approval_required", run: caseApprovalRequired},
		// HTTP.
		{name: "34_cross_site_form_halt_415", run: caseFormHalt},
		{name: "35_text_plain_reset_415", halts: true, run: func(t *testing.T, s *secure) {
			s.refusedWhileHalted(t, "/api/v1/reset", map[string]string{"Content-Type": "text/plain", "Authorization": "Bearer " + secToken}, "", http.StatusUnsupportedMediaType)
		}},
		{name: "36_lowercase_bearer_401", halts: true, run: func(t *testing.T, s *secure) {
			s.refusedWhileHalted(t, "/api/v1/reset", map[string]string{"Content-Type": "application/json", "Authorization": "bearer " + secToken}, "", http.StatusUnauthorized)
		}},
		{name: "37_basic_auth_401", halts: true, run: func(t *testing.T, s *secure) {
			s.refusedWhileHalted(t, "/api/v1/reset", map[string]string{"Content-Type": "application/json", "Authorization": "Basic " + secToken}, "", http.StatusUnauthorized)
		}},
		{name: "38_token_in_query_refused", halts: true, run: func(t *testing.T, s *secure) {
			s.refusedWhileHalted(t, "/api/v1/reset?token="+secToken, map[string]string{"Content-Type": "application/json"}, "", http.StatusBadRequest)
		}},
		// HTTP: a web page in a browser that reaches the listener
		// (security_http_test.go).
		{name: "41_rebinding_host_reads_421", run: caseRebindingReads},
		{name: "42_rebinding_host_halt_421", run: caseRebindingHalt},
		{name: "43_rebinding_host_reset_421", halts: true, run: caseRebindingReset},
		{name: "44_foreign_origin_state_changes_403", run: caseForeignOrigin},
		{name: "45_foreign_origin_reset_403", halts: true, run: caseForeignOriginReset},
		{name: "46_cross_site_text_plain_and_form_403", run: caseCrossSiteForms},
		{name: "47_cors_preflight_foreign_origin_403", run: caseCORSPreflight},
		{name: "48_host_less_http10_421", run: caseHostless},
		{name: "40_connection_flood_wrong_passwords", run: caseConnectFlood},
		// Last: it locks HTTP resets for a minute.
		{name: "39_token_guessing_429", run: caseTokenGuessing},
	}
}

// --- logging in -------------------------------------------------------------------

func caseNoCredentials(t *testing.T, s *secure) {
	if c, err := pahoTry(s.broker, "anon-paho", hLogin{}, ""); err == nil {
		c.Disconnect(0)
		t.Error("an anonymous client was let in")
	}
	// Raw, with the client id of planner and of the supervisor: refused
	// before any takeover.
	for _, id := range []string{"anon-raw", "planner", secSup} {
		conn, rc, err := rawConnect(s.broker, id, "", "")
		if conn != nil {
			conn.Close()
		}
		if err != nil || rc == 0 {
			t.Errorf("anonymous CONNECT with client id %s: rc %d %v, want refused", id, rc, err)
		}
	}
}

func caseWrongPassword(t *testing.T, s *secure) {
	for _, user := range []string{"planner", secSup, "mallory"} {
		if c, err := pahoTry(s.broker, user, hLogin{user, "not-the-password"}, ""); err == nil {
			c.Disconnect(0)
			t.Errorf("%s with a wrong password was let in", user)
		}
	}
	// The supervisor's password for an agent's name.
	if c, err := pahoTry(s.broker, "planner", hLogin{"planner", s.pw(t, secSup)}, ""); err == nil {
		c.Disconnect(0)
		t.Error("planner with the supervisor's password was let in")
	}
}

func caseUnknownUser(t *testing.T, s *secure) {
	for _, user := range []string{"nobody", "root", "admin"} {
		if c, err := pahoTry(s.broker, user, hLogin{user, s.pw(t, "planner")}, ""); err == nil {
			c.Disconnect(0)
			t.Errorf("unknown user %s was let in", user)
		}
	}
}

// takeover connects as mallory with client id id and, if let in, tries to
// act as whoever holds that id: a retained offline status and a bye for
// planner.
func (s *secure) takeover(t *testing.T, id string) {
	t.Helper()
	c, err := pahoTry(s.broker, id, s.login(t, "mallory"), "")
	switch {
	case err != nil:
		t.Logf("mallory with client id %s: refused: %v", id, err)
	case s.kind == "embedded":
		t.Errorf("the embedded broker let mallory in with client id %s", id)
		fallthrough
	default:
		// mosquitto: use_username_as_clientid made the id "mallory".
		t.Logf("mallory with client id %s: let in (as client id mallory)", id)
		lease, epoch := s.planner.current()
		c.Publish(arm1.Status(), 1, true, api.EncodeStatus(api.Status{State: api.StateOffline})).WaitTimeout(5 * time.Second)
		c.Publish(arm1.AgentCmd("planner"), 1, false, encode(kv{"id": "takeover-bye", "agent": "planner", "op": "bye", "lease": lease, "epoch": epoch})).WaitTimeout(5 * time.Second)
		time.Sleep(200 * time.Millisecond)
		c.Disconnect(50)
	}
	s.redial(t)
	s.fence(t)
	s.planner.quiet(t, "takeover-bye", 100*time.Millisecond)
	if st, raw := s.retainedStatus(t); st.State != api.StateOnline || !st.Ready {
		t.Errorf("the retained status is not the supervisor's: %s", raw)
	}
}

func caseTakeoverSupervisor(t *testing.T, s *secure) { s.takeover(t, secSup) }

func caseTakeoverPlanner(t *testing.T, s *secure) {
	s.takeover(t, "planner")
	if !s.planner.c.IsConnectionOpen() {
		t.Error("planner was kicked off the broker")
	}
}

// --- speaking for another --------------------------------------------------------

func (s *secure) plannerBye(id string) kv {
	lease, epoch := s.planner.current()
	return kv{"id": id, "agent": "planner", "op": "bye", "lease": lease, "epoch": epoch}
}

func casePublishCmdPlanner(t *testing.T, s *secure) {
	s.mallory.publishRaw(arm1.AgentCmd("planner"), encode(s.plannerBye("m-bye-1")), false).WaitTimeout(5 * time.Second)
	s.fence(t)
	s.planner.quiet(t, "m-bye-1", 100*time.Millisecond)
}

func casePublishSharedCmd(t *testing.T, s *secure) {
	s.mallory.publishRaw(arm1.Cmd(), encode(s.plannerBye("m-bye-2")), false).WaitTimeout(5 * time.Second)
	s.mallory.publishRaw(arm1.Cmd(), encode(kv{"id": "m-halt-2", "agent": "mallory", "op": "halt", "reason": "shared"}), false).WaitTimeout(5 * time.Second)
	s.fence(t)
	s.planner.quiet(t, "m-bye-2", 100*time.Millisecond)
	s.mallory.quiet(t, "m-halt-2", 10*time.Millisecond)
}

func caseOwnTopicNamingPlanner(t *testing.T, s *secure) {
	id := s.mallory.publish(s.plannerBye("m-bye-3"))
	if r := s.mallory.wait(t, id, 1)[0]; r.OK || r.Code != api.CodeBadRequest {
		t.Errorf("mallory speaking for planner on cmd/mallory: %s, want BAD_REQUEST", r.Raw)
	}
	s.planner.quiet(t, id, 100*time.Millisecond)
}

// --- forging -------------------------------------------------------------------

func caseForgeWill(t *testing.T, s *secure) {
	for _, retain := range []bool{false, true} {
		s.mallory.publishRaw(arm1.Will("planner"), []byte("gone"), retain).WaitTimeout(5 * time.Second)
	}
	s.fence(t)
	time.Sleep(100 * time.Millisecond) // a will ends a lease off the lane
}

func caseForgeStatus(t *testing.T, s *secure) {
	forged := api.EncodeStatus(api.Status{State: api.StateOffline, Ready: false, Halted: true, HaltReason: "forged"})
	s.mallory.publishRaw(arm1.Status(), forged, true).WaitTimeout(5 * time.Second)
	s.mallory.publishRaw(arm1.Status(), forged, false).WaitTimeout(5 * time.Second)
	s.fence(t)
	if st, raw := s.retainedStatus(t); st.State != api.StateOnline || !st.Ready || st.Halted {
		t.Errorf("a fresh subscriber's retained status is not the supervisor's: %s", raw)
	}
}

func caseForgeState(t *testing.T, s *secure) {
	forged := api.EncodeState(api.State{Actuator: "base", Commanded: 77})
	s.mallory.publishRaw(arm1.State("base"), forged, true).WaitTimeout(5 * time.Second)
	s.mallory.publishRaw(arm1.State("base"), forged, false).WaitTimeout(5 * time.Second)
	s.fence(t)
	got := retainedOnAs(t, s.broker, "probe", s.login(t, "probe"), arm1.State("base"))
	if raw := got[arm1.State("base")]; !strings.Contains(string(raw), fmt.Sprintf(`"commanded":%v`, s.baseline["base"])) {
		t.Errorf("a fresh subscriber's retained state/base: %s, the supervisor commanded %v", raw, s.baseline["base"])
	}
}

func caseForgeEvent(t *testing.T, s *secure) {
	evMark, _ := s.watch.marks()
	forged := []byte(`{"kind":"reply","reply":{"id":"forged-event-1","ok":false,"code":"BAD_REQUEST","message":"forged"}}`)
	s.mallory.publishRaw(arm1.Events(), forged, false).WaitTimeout(5 * time.Second)
	s.mallory.publishRaw(arm1.Events(), forged, true).WaitTimeout(5 * time.Second)
	s.fence(t)
	for _, ev := range s.watch.eventsSince(evMark) {
		if strings.Contains(string(ev.raw), "forged-event-1") {
			t.Errorf("the forged event reached a subscriber: %s", ev.raw)
		}
	}
}

func caseForgeReply(t *testing.T, s *secure) {
	forged := []byte(`{"id":"forged-reply-1","ok":true,"lease":"l-forged","epoch":1}`)
	s.mallory.publishRaw(arm1.Reply("planner"), forged, false).WaitTimeout(5 * time.Second)
	s.mallory.publishRaw(arm1.Reply("planner"), forged, true).WaitTimeout(5 * time.Second)
	s.fence(t)
	s.planner.quiet(t, "forged-reply-1", 100*time.Millisecond)
}

// --- leases and sagas -------------------------------------------------------------

func caseStolenLease(t *testing.T, s *secure) {
	lease, epoch := s.planner.current()
	for _, op := range []struct {
		op string
		f  kv
	}{
		{"step", kv{"saga": s.planSaga, "actuator": "base", "value": 30}},
		{"begin", nil},
		{"heartbeat", nil},
		{"commit", kv{"saga": s.planSaga}},
		{"abort", kv{"saga": s.planSaga}},
		{"bye", nil},
	} {
		f := kv{"lease": lease, "epoch": epoch}
		for k, v := range op.f {
			f[k] = v
		}
		s.mallory.refused(t, op.op, f, "LEASE_NOT_HOLDER")
	}
}

func caseStolenSaga(t *testing.T, s *secure) {
	s.mallory.hello(t, secTTL)
	s.mallory.refused(t, "step", kv{"saga": s.planSaga, "actuator": "base", "value": 30}, "SAGA_NOT_OWNER")
	s.mallory.refused(t, "commit", kv{"saga": s.planSaga}, "SAGA_NOT_OWNER")
	s.mallory.refused(t, "abort", kv{"saga": s.planSaga}, "SAGA_NOT_OWNER")
	s.mallory.bye(t)
}

func caseStatusNoLease(t *testing.T, s *secure) {
	lease, _ := s.planner.current()
	check := func(where string, raw []byte) {
		if strings.Contains(string(raw), lease) || strings.Contains(string(raw), `"epoch"`) || strings.Contains(string(raw), `"lease"`) {
			t.Errorf("%s carries a lease id or epoch: %.400s", where, raw)
		}
	}
	check("mallory's status reply", s.mallory.ok(t, "status", nil).Raw)
	_, raw := s.retainedStatus(t)
	check("the retained status", raw)
	_, body, err := s.do(http.MethodGet, "/api/v1/status", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	check("GET /api/v1/status", body)
}

// --- agents.allow ---------------------------------------------------------------

func caseWristElbow(t *testing.T, s *secure) {
	s.wrist.hello(t, secTTL)
	saga := s.wrist.begin(t)
	s.wrist.refused(t, "step", kv{"saga": saga, "actuator": "elbow", "value": 30}, api.CodeForbidden)
	s.wrist.refused(t, "step", kv{"saga": saga, "actuator": "base", "value": 30}, api.CodeForbidden)
	s.wrist.ok(t, "abort", kv{"saga": saga})
	s.wrist.bye(t)
}

func caseWatcherHello(t *testing.T, s *secure) {
	s.watcherA.refused(t, "hello", kv{"ttl_ms": 60000}, api.CodeForbidden)
	s.watcherA.refused(t, "begin", kv{"lease": "l-x", "epoch": 1}, api.CodeForbidden)
	s.watcherA.ok(t, "status", nil)
}

func caseStranger(t *testing.T, s *secure) {
	l := hLogin{"stranger", strangerPass}
	c, err := pahoTry(s.broker, "stranger", l, "")
	if s.kind == "embedded" {
		if err == nil {
			c.Disconnect(0)
			t.Error("the embedded broker let in a user of its password file who is no agent")
		}
		return
	}
	if err != nil {
		t.Fatalf("mosquitto refused stranger's valid login: %v (then this row tests nothing)", err)
	}
	defer c.Disconnect(50)
	m := s.mark(t)
	var mu sync.Mutex
	var got []string
	c.Subscribe("#", 1, func(_ paho.Client, msg paho.Message) {
		mu.Lock()
		got = append(got, msg.Topic())
		mu.Unlock()
	}).WaitTimeout(5 * time.Second)
	c.Subscribe(arm1.Reply("stranger"), 1, func(_ paho.Client, msg paho.Message) {
		mu.Lock()
		got = append(got, msg.Topic())
		mu.Unlock()
	}).WaitTimeout(5 * time.Second)
	for _, p := range []struct{ topic, payload string }{
		{arm1.AgentCmd("stranger"), `{"id":"s1","agent":"stranger","op":"hello","ttl_ms":60000}`},
		{arm1.AgentCmd("stranger"), `{"id":"s2","agent":"stranger","op":"halt","reason":"stranger"}`},
		{arm1.Cmd(), `{"id":"s3","agent":"stranger","op":"halt","reason":"stranger"}`},
		{arm1.EstopAgent("stranger"), "stop"},
		{arm1.Estop(), "stop"},
	} {
		c.Publish(p.topic, 1, false, []byte(p.payload)).WaitTimeout(5 * time.Second)
	}
	s.planner.ok(t, "heartbeat", nil)
	s.fence(t)
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	if len(got) > 0 {
		t.Errorf("stranger received %d messages: %v", len(got), got[:min(len(got), 5)])
	}
	mu.Unlock()
	for _, r := range s.records(t, m) {
		if r.Agent == "stranger" || strings.Contains(r.Message, "stranger") {
			t.Errorf("the journal holds a record of stranger: %+v", r)
		}
	}
}

func caseResetOverMQTT(t *testing.T, s *secure) {
	s.httpHalt(t, "security test: reset over MQTT")
	s.operator.refused(t, "reset", kv{"token": secToken}, api.CodeForbidden)
	s.planner.refused(t, "reset", kv{"token": secToken}, api.CodeForbidden)
	s.mallory.refused(t, "reset", kv{"token": secToken}, api.CodeForbidden)
	s.assertHalted(t)
	s.httpReset(t)
	s.waitReady(t)
}

// --- the broker itself --------------------------------------------------------------

func caseRetainedFlood(t *testing.T, s *secure) {
	sysBefore := -1
	if s.mosq != nil {
		sysBefore = s.sysRetained(t)
	}
	rssBefore := vmRSS(s.brokerPID())
	var pk [][]byte
	own := 0
	add := func(topic string, payload []byte, mine bool) {
		pk = append(pk, rawPublish(topic, payload, true))
		if mine {
			own++
		}
	}
	for i := range 200 {
		add(arm1.AgentCmd("mallory"), encode(kv{"id": fmt.Sprintf("rf-%d", i), "agent": "mallory", "op": "status"}), true)
	}
	for range 300 {
		add(arm1.Will("mallory"), []byte("gone"), true)
	}
	if s.mosq == nil {
		// Refused by the embedded broker (no agent retains). On mosquitto,
		// which cannot refuse a retained publish per topic, it would be
		// forwarded live, without the retain flag: mallory's own halt.
		for range 300 {
			add(arm1.EstopAgent("mallory"), []byte("stop"), true)
		}
	}
	forgedState := api.EncodeState(api.State{Actuator: "base", Commanded: 77})
	for i := range 700 {
		add(arm1.State(fmt.Sprintf("f%04d", i)), forgedState, false)
	}
	for i := range 100 {
		add(arm1.AgentCmd("planner"), encode(s.plannerBye(fmt.Sprintf("rf-bye-%d", i))), false)
		add(arm1.Reply("planner"), []byte(fmt.Sprintf(`{"id":"rf-reply-%d","ok":true}`, i)), false)
		add(arm1.Status(), api.EncodeStatus(api.Status{State: api.StateOffline}), false)
		add(arm1.Events(), []byte(`{"kind":"reply","reply":{"id":"rf-ev","ok":true}}`), false)
	}
	for i := range 500 {
		add(fmt.Sprintf("flood/%d/x", i), []byte("x"), false)
	}
	s.rawSession(t, s.login(t, "mallory"), pk...)
	s.redial(t)
	s.fence(t)
	s.planner.quiet(t, "rf-bye-0", 10*time.Millisecond)
	s.planner.quiet(t, "rf-reply-0", 10*time.Millisecond)

	// What a fresh subscriber gets retained on state/+: the supervisor's
	// states, one per actuator, and nothing else.
	got := s.freshRetained(t, arm1.State("+"), 500*time.Millisecond)
	if len(got) != len(s.names) {
		var topics []string
		for k := range got {
			topics = append(topics, k)
		}
		slices.Sort(topics)
		t.Errorf("a fresh subscriber to state/+ gets %d retained messages, want %d: %v", len(got), len(s.names), topics[:min(len(topics), 8)])
	}
	if st, raw := s.retainedStatus(t); st.State != api.StateOnline || !st.Ready {
		t.Errorf("the retained status after the flood: %s", raw)
	}
	rssAfter := vmRSS(s.brokerPID())
	what := "the daemon (embedded broker)"
	if s.mosq != nil {
		what = "mosquitto"
		sysAfter := s.sysRetained(t)
		t.Logf("mosquitto's retained messages: %d before, %d after", sysBefore, sysAfter)
		// At most mallory's own cmd and will topics.
		if sysAfter-sysBefore > 2 {
			t.Errorf("mosquitto's retained store grew by %d, more than mallory's own two topics", sysAfter-sysBefore)
		}
		s.rss = append(s.rss, fmt.Sprintf("retained %d→%d", sysBefore, sysAfter))
		// Clear mallory's own retained messages (each a live command or
		// will for mallory, which holds no lease).
		s.mallory.publishRaw(arm1.AgentCmd("mallory"), nil, true).WaitTimeout(5 * time.Second)
		s.mallory.publishRaw(arm1.Will("mallory"), nil, true).WaitTimeout(5 * time.Second)
		s.fence(t)
	}
	t.Logf("retained flood: %d publishes (%d on mallory's own topics); RSS of %s %s before, %s after", len(pk), own, what, rssBefore, rssAfter)
	s.rss = append(s.rss, fmt.Sprintf("%s %s → %s over %d retained publishes", what, rssBefore, rssAfter, len(pk)))
}

func caseWildcardPublish(t *testing.T, s *secure) {
	m := s.mark(t)
	halt := encode(kv{"id": "wc-halt", "agent": "planner", "op": "halt", "reason": "wildcard"})
	var pk [][]byte
	for _, topic := range []string{arm1.AgentCmd("+"), arm1.Cmd() + "/#", arm1.EstopFilter(), arm1.Estop() + "/#", arm1.WillFilter(), "#", "+/+/+/cmd/planner"} {
		pk = append(pk, rawPublish(topic, halt, false))
	}
	s.rawSession(t, s.login(t, "mallory"), pk...)
	s.redial(t)
	s.fence(t)
	s.planner.quiet(t, "wc-halt", 10*time.Millisecond)
	if n := count(s.records(t, m), rollback.RecHalt, nil); n != 0 {
		t.Errorf("%d HALT records after publishes on wildcard topics", n)
	}
}

func caseAgentWildcards(t *testing.T, s *secure) {
	for _, name := range []string{"planner/x", "#", "+", "mallory/#", "../planner", ""} {
		id := s.mallory.publish(kv{"id": s.mallory.nextID(), "agent": name, "op": "status"})
		r := s.mallory.wait(t, id, 1)[0]
		if r.OK || r.Code != api.CodeBadRequest {
			t.Errorf("agent %q on cmd/mallory: %s, want BAD_REQUEST", name, r.Raw)
		}
	}
}

func caseEstopAsPlanner(t *testing.T, s *secure) {
	for _, who := range []string{"planner", secSup} {
		s.mallory.publishRaw(arm1.EstopAgent(who), []byte("stop"), false).WaitTimeout(5 * time.Second)
	}
	s.mallory.publishRaw(arm1.Estop(), []byte("stop"), false).WaitTimeout(5 * time.Second)
	s.fence(t)
	time.Sleep(100 * time.Millisecond) // an e-stop comes on its own connection
}

// --- approvals ----------------------------------------------------------------

func caseApprovalForged(t *testing.T, s *secure) {
	_, other, err := approval.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok := s.approve(t, other, secDev, "gripper", s.grip(), s.planSaga, now.Add(-time.Second), now.Add(time.Minute))
	s.planner.refused(t, "step", kv{"saga": s.planSaga, "actuator": "gripper", "value": s.grip(), "approval": tok}, string(approval.CodeInvalid))
	// A valid token with one byte of its signature changed.
	good := []byte(s.approve(t, s.priv, secDev, "gripper", s.grip(), s.planSaga, now.Add(-time.Second), now.Add(time.Minute)))
	if good[len(good)-2] == 'A' {
		good[len(good)-2] = 'B'
	} else {
		good[len(good)-2] = 'A'
	}
	s.planner.refused(t, "step", kv{"saga": s.planSaga, "actuator": "gripper", "value": s.grip(), "approval": string(good)}, string(approval.CodeInvalid))
}

func caseApprovalReplayed(t *testing.T, s *secure) {
	now := time.Now()
	tok := s.approve(t, s.priv, secDev, "gripper", s.grip(), s.planSaga, now.Add(-time.Second), now.Add(time.Minute))
	s.planner.ok(t, "step", kv{"saga": s.planSaga, "actuator": "gripper", "value": s.grip(), "approval": tok})
	s.planner.refused(t, "step", kv{"saga": s.planSaga, "actuator": "gripper", "value": s.grip(), "approval": tok}, string(approval.CodeReplayed))
	// Replayed by another agent in its own saga: the nonce is spent.
	s.wrist.hello(t, secTTL)
	saga := s.wrist.begin(t)
	if r := s.wrist.call(t, "step", kv{"saga": saga, "actuator": "gripper", "value": s.grip(), "approval": tok}); r.OK ||
		(r.Code != string(approval.CodeMismatch) && r.Code != string(approval.CodeReplayed)) {
		t.Errorf("planner's spent approval in wrist's saga: %s, want APPROVAL_MISMATCH or APPROVAL_REPLAYED", r.Raw)
	}
	s.wrist.ok(t, "abort", kv{"saga": saga})
	s.wrist.bye(t)
}

func caseApprovalExpired(t *testing.T, s *secure) {
	now := time.Now()
	tok := s.approve(t, s.priv, secDev, "gripper", s.grip(), s.planSaga, now.Add(-10*time.Minute), now.Add(-9*time.Minute))
	s.planner.refused(t, "step", kv{"saga": s.planSaga, "actuator": "gripper", "value": s.grip(), "approval": tok}, string(approval.CodeExpired))
	tok = s.approve(t, s.priv, secDev, "gripper", s.grip(), s.planSaga, now.Add(time.Minute), now.Add(2*time.Minute)) // not yet valid
	s.planner.refused(t, "step", kv{"saga": s.planSaga, "actuator": "gripper", "value": s.grip(), "approval": tok}, string(approval.CodeExpired))
}

func caseApprovalMismatch(t *testing.T, s *secure) {
	now := time.Now()
	nb, na := now.Add(-time.Second), now.Add(time.Minute)
	for what, tok := range map[string]string{
		"another value":    s.approve(t, s.priv, secDev, "gripper", s.grip()+20, s.planSaga, nb, na),
		"another saga":     s.approve(t, s.priv, secDev, "gripper", s.grip(), s.planSaga+1000, nb, na),
		"another device":   s.approve(t, s.priv, "arm2", "gripper", s.grip(), s.planSaga, nb, na),
		"another actuator": s.approve(t, s.priv, secDev, "base", s.grip(), s.planSaga, nb, na),
	} {
		t.Logf("approval for %s", what)
		s.planner.refused(t, "step", kv{"saga": s.planSaga, "actuator": "gripper", "value": s.grip(), "approval": tok}, string(approval.CodeMismatch))
	}
}

func caseApprovalRequired(t *testing.T, s *secure) {
	s.planner.refused(t, "step", kv{"saga": s.planSaga, "actuator": "gripper", "value": s.grip() + 10}, string(approval.CodeRequired))
	s.wrist.hello(t, secTTL)
	saga := s.wrist.begin(t)
	s.wrist.refused(t, "step", kv{"saga": saga, "actuator": "gripper", "value": s.grip() + 10}, string(approval.CodeRequired))
	s.wrist.ok(t, "abort", kv{"saga": saga})
	s.wrist.bye(t)
}

// --- HTTP ---------------------------------------------------------------------

func caseFormHalt(t *testing.T, s *secure) {
	for _, ct := range []string{"application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain", ""} {
		hdr := map[string]string{}
		if ct != "" {
			hdr["Content-Type"] = ct
		}
		if code, _, body := s.post(t, "/api/v1/halt", hdr, "reason=csrf"); code != http.StatusUnsupportedMediaType {
			t.Errorf("POST /api/v1/halt with Content-Type %q: %d %s, want 415", ct, code, body)
		}
		s.assertNotHalted(t)
	}
}

func caseConnectFlood(t *testing.T, s *secure) {
	const n, workers = 200, 20
	var mu sync.Mutex
	accepted, refused := 0, 0
	var errs []error
	var wg sync.WaitGroup
	began := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				user := []string{"planner", secSup, "mallory", "nobody"}[i%4]
				conn, rc, err := rawConnect(s.broker, user, user, fmt.Sprintf("guess-%d", i))
				if conn != nil {
					conn.Close()
				}
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case rc == 0:
					accepted++
				default:
					refused++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d connects with wrong passwords in %v: %d refused, %d accepted, %d errors (%v)", n, time.Since(began).Round(time.Millisecond), refused, accepted, len(errs), errors.Join(errs[:min(len(errs), 3)]...))
	if accepted != 0 {
		t.Errorf("%d of %d connects with wrong passwords were accepted", accepted, n)
	}
	if refused+len(errs) != n {
		t.Errorf("%d refused + %d errors of %d", refused, len(errs), n)
	}
}

func caseTokenGuessing(t *testing.T, s *secure) {
	hdr := func(tok string) map[string]string {
		return map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + tok}
	}
	limited := 0
	for i := range 6 {
		code, h, body := s.post(t, "/api/v1/reset", hdr(fmt.Sprintf("wrong-token-%02d-0123456789abcdef0123456789", i)), "")
		switch {
		case code == http.StatusUnauthorized && limited == 0:
		case code == http.StatusTooManyRequests:
			if limited == 0 {
				limited = i + 1
			}
			if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
				t.Errorf("429 with Retry-After %q", h.Get("Retry-After"))
			}
			if !strings.Contains(body, api.CodeTooManyAttempts) {
				t.Errorf("429 without %s: %s", api.CodeTooManyAttempts, body)
			}
		default:
			t.Errorf("wrong token %d: %d %s", i+1, code, body)
		}
	}
	if limited == 0 {
		t.Fatal("6 wrong tokens (after the two of rows 36 and 37) were never refused 429")
	}
	t.Logf("the first 429 came at wrong token %d (rows 36 and 37 failed two a little earlier)", limited)
	if code, _, body := s.post(t, "/api/v1/reset", hdr(secToken), ""); code != http.StatusTooManyRequests {
		t.Errorf("the right token while limited: %d %s, want 429", code, body)
	}
	// Halt is never limited; the test does not halt here: it could not
	// reset for a minute.
}
