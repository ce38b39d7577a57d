package ctl

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/client"
	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/supervisor"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

const ctlTestToken = "operator-token-0123456789abcdef-test"

// ctlDaemon is a supervisor on the embedded default config (the sim arm)
// with an in-process broker and its MQTT transport, in temporary
// directories: what `saga-supervisor run` serves, without a process.
type ctlDaemon struct {
	sup  *supervisor.Supervisor
	url  string
	http string // the supervisor's HTTP API
}

func startCtlDaemon(t *testing.T, mods ...func(*config.Config)) *ctlDaemon {
	t.Helper()
	d := daemontest.Start(t, "", func(c *config.Config) {
		c.HTTP.ResetToken = ctlTestToken
		for _, mod := range mods {
			mod(c)
		}
	})
	srv := httptest.NewServer(d.Sup.HTTPHandler())
	t.Cleanup(srv.Close)
	return &ctlDaemon{sup: d.Sup, url: d.URL(), http: srv.URL}
}

func (d *ctlDaemon) commanded(name string) float64 {
	v, _ := d.sup.Engine().Commanded(name)
	return v
}

// ctlBuffer is a writer safe to read while ctl writes to it.
type ctlBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (c *ctlBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.Write(p)
}

func (c *ctlBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// ctl runs the ctl command in-process against d and returns what it
// printed, its error (what main prints on stderr) and its exit status.
func (d *ctlDaemon) ctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out ctlBuffer
	err := Run(append([]string{"--broker", d.url, "--timeout", "10s"}, args...), &out)
	return out.String(), errText(err), cli.Status(err)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestCtlStatus(t *testing.T) {
	d := startCtlDaemon(t)
	out, msg, code := d.ctl(t, "status")
	if code != 0 {
		t.Fatalf("status exited %d: %s\n%s", code, msg, out)
	}
	for _, want := range []string{"ready:      yes", "halted:     no", "supply:     battery", "actuator:   elbow", "commanded 20", "leases:     none", "open sagas: none"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	// Global flags go after the op too.
	out, msg, code = d.ctl(t, "status", "--json")
	var st supervisor.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || !st.Ready || st.Halted || len(st.Actuators) != 4 {
		t.Fatalf("status --json exited %d (%s): %s", code, msg, out)
	}
}

func TestCtlRunSaga(t *testing.T) {
	d := startCtlDaemon(t)
	out, msg, code := d.ctl(t, "run-saga", "base=30", "elbow=100", "--deadline", "1s")
	if code != 0 {
		t.Fatalf("run-saga exited %d: %s\n%s", code, msg, out)
	}
	for _, want := range []string{"saga 1 begun", "step 1  base       0 -> 30", "step 2  elbow      20 -> 100", "saga 1 committed"} {
		if !strings.Contains(out, want) {
			t.Errorf("run-saga output lacks %q:\n%s", want, out)
		}
	}
	if d.commanded("base") != 30 || d.commanded("elbow") != 100 {
		t.Fatalf("after commit: base %v elbow %v", d.commanded("base"), d.commanded("elbow"))
	}

	// The second step is over the limit: refused, the saga aborted, the
	// first step put back, the third never sent.
	out, msg, code = d.ctl(t, "run-saga", "base=-45", "elbow=170", "shoulder=50")
	if code != 1 {
		t.Fatalf("refused run-saga exited %d: %s\n%s", code, msg, out)
	}
	for _, want := range []string{"step 1  base       30 -> -45", "elbow=170 (2 of 3) REFUSED, nothing moved: LIMIT_MAX", "aborted", "unwind clean",
		"step 1 base", "back to 30", "compensated"} {
		if !strings.Contains(out, want) {
			t.Errorf("refused run-saga output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(msg, "LIMIT_MAX: elbow: 170 is above max 135") {
		t.Errorf("the error does not give the code and message: %s", msg)
	}
	if d.commanded("base") != 30 || d.commanded("elbow") != 100 || d.commanded("shoulder") != 10 {
		t.Fatalf("after abort: base %v elbow %v shoulder %v", d.commanded("base"), d.commanded("elbow"), d.commanded("shoulder"))
	}
	if open := d.sup.Engine().OpenSagas(); len(open) != 0 {
		t.Fatalf("sagas left open: %v", open)
	}

	// The same as JSON: one object, the report whole.
	out, _, code = d.ctl(t, "--json", "run-saga", "gripper=10", "gripper=99")
	var res struct {
		OK        bool             `json:"ok"`
		Code      string           `json:"code"`
		Committed bool             `json:"committed"`
		Aborted   bool             `json:"aborted"`
		Steps     []map[string]any `json:"steps"`
		Report    *api.ReportJSON  `json:"report"`
	}
	if code != 1 || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("run-saga --json exited %d: %s", code, out)
	}
	if res.OK || res.Code != "LIMIT_MAX" || res.Committed || !res.Aborted || len(res.Steps) != 2 || res.Report == nil ||
		res.Report.Verdict != "clean" || len(res.Report.Steps) != 1 || res.Report.Steps[0].Actuator != "gripper" {
		t.Fatalf("run-saga --json: %s", out)
	}
	if d.commanded("gripper") != 0 {
		t.Fatalf("gripper after abort: %v", d.commanded("gripper"))
	}
}

func TestCtlHaltReset(t *testing.T) {
	d := startCtlDaemon(t)
	out, msg, code := d.ctl(t, "halt", "--reason", "person in the cell")
	if code != 0 || !strings.Contains(out, "halted") {
		t.Fatalf("halt exited %d (%s): %s", code, msg, out)
	}
	out, _, _ = d.ctl(t, "status")
	if !strings.Contains(out, "halted:     YES") || !strings.Contains(out, "person in the cell") {
		t.Fatalf("status after halt:\n%s", out)
	}
	if out, msg, code = d.ctl(t, "run-saga", "base=5"); code != 1 || !strings.Contains(msg, "HALTED") {
		t.Fatalf("run-saga while halted exited %d (%s): %s", code, msg, out)
	}
	if _, msg, code = d.ctl(t, "reset", "--http", d.http, "--token", "wrong"); code != 1 || !strings.Contains(msg, "UNAUTHORIZED") {
		t.Fatalf("reset with a wrong token exited %d: %s", code, msg)
	}
	// Over MQTT the token would cross the broker: off unless the
	// supervisor allows it (mqtt.allow_reset).
	if _, msg, code = d.ctl(t, "reset", "--mqtt", "--token", ctlTestToken); code != 1 || !strings.Contains(msg, "FORBIDDEN") {
		t.Fatalf("reset over MQTT exited %d: %s", code, msg)
	}
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose")
	os.WriteFile(loose, []byte(ctlTestToken+"\n"), 0o644)
	if _, msg, code = d.ctl(t, "reset", "--token-file", loose); code != 2 || !strings.Contains(msg, "mode 0644") {
		t.Fatalf("reset with a world-readable token file exited %d: %s", code, msg)
	}
	tight := filepath.Join(dir, "token")
	os.WriteFile(tight, []byte(ctlTestToken+"\n"), 0o600)
	if out, msg, code = d.ctl(t, "reset", "--http", d.http, "--token-file", tight); code != 0 {
		t.Fatalf("reset exited %d (%s): %s", code, msg, out)
	}
	if out, msg, code = d.ctl(t, "--json", "status"); code != 0 || !strings.Contains(out, `"ready":true`) {
		t.Fatalf("status after reset exited %d (%s): %s", code, msg, out)
	}
}

func TestCtlHello(t *testing.T) {
	d := startCtlDaemon(t)
	out, msg, code := d.ctl(t, "--agent", "probe", "--ttl", "300ms", "hello")
	if code != 0 || !strings.Contains(out, "agent probe got lease") || !strings.Contains(out, "ttl 300ms") || !strings.Contains(out, "bye") {
		t.Fatalf("hello exited %d (%s): %s", code, msg, out)
	}
	if l := d.sup.Status().Leases; len(l) != 0 {
		t.Fatalf("leases after hello and bye: %+v", l)
	}
	out, _, code = d.ctl(t, "hello", "--json", "--agent", "probe")
	var h struct {
		OK    bool   `json:"ok"`
		Lease string `json:"lease"`
		Epoch uint64 `json:"epoch"`
		TTLMS int64  `json:"ttl_ms"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &h) != nil || !h.OK || h.Lease == "" || h.Epoch < 2 || h.TTLMS != 1000 {
		t.Fatalf("hello --json exited %d: %s", code, out)
	}
	// A TTL outside the supervisor's bounds is refused.
	if _, msg, code = d.ctl(t, "hello", "--ttl", "2m"); code != 1 || !strings.Contains(msg, "BAD_REQUEST") {
		t.Fatalf("hello with a 2m TTL exited %d: %s", code, msg)
	}
}

// watch prints the retained status and states, then what changes.
func TestCtlWatch(t *testing.T) {
	d := startCtlDaemon(t)
	var out ctlBuffer
	done := make(chan error, 1)
	go func() {
		// Status and four retained states, then the step's state.
		done <- Run([]string{"--broker", d.url, "--agent", "watcher", "watch", "--count", "50", "--for", "20s"}, &out)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), "\n") < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("watch printed no retained state:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if o, msg, code := d.ctl(t, "--agent", "mover", "run-saga", "base=33"); code != 0 {
		t.Fatalf("run-saga exited %d (%s): %s", code, msg, o)
	}
	// Wait for the step's state rather than a message count: the retained
	// status may be republished in between (readiness, a reconnect).
	for !strings.Contains(out.String(), "state    base = 33") {
		select {
		case err := <-done:
			t.Fatalf("watch ended before the step's state (%v):\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline.Add(15 * time.Second)) {
			t.Fatalf("watch never showed the step's state:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	got := out.String()
	for _, want := range []string{"status   online, ready", "state    elbow = 20", "state    shoulder = 10", "state    base = 0", "state    base = 33"} {
		if !strings.Contains(got, want) {
			t.Errorf("watch output lacks %q:\n%s", want, got)
		}
	}

	// JSON lines, and a rollback event for an aborted saga.
	out2, _, code := d.ctl(t, "--json", "watch", "--count", "1")
	var line struct {
		Topic    string          `json:"topic"`
		Retained bool            `json:"retained"`
		Payload  json.RawMessage `json:"payload"`
	}
	if code != 0 || json.Unmarshal([]byte(out2), &line) != nil || !line.Retained || !strings.HasPrefix(line.Topic, "saga/v1/arm1/") {
		t.Fatalf("watch --json exited %d: %s", code, out2)
	}
}

func TestCtlUsage(t *testing.T) {
	d := startCtlDaemon(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no OP"},
		{[]string{"launch"}, "unknown OP"},
		{[]string{"begin"}, "run-saga"},
		{[]string{"step", "base=1"}, "run-saga"},
		{[]string{"run-saga"}, "ACTUATOR=VALUE"},
		{[]string{"run-saga", "base"}, "not ACTUATOR=VALUE"},
		{[]string{"run-saga", "base=abc"}, "finite number"},
		{[]string{"run-saga", "base=NaN"}, "finite number"},
		{[]string{"run-saga", "a/b=1"}, "actuator"},
		{[]string{"run-saga", "--deadline", "2m", "base=1"}, "--deadline"},
		{[]string{"reset"}, "--token"},
		{[]string{"reset", "--token", "a", "--token-file", "b"}, "not both"},
		{[]string{"status", "extra"}, "unexpected argument"},
		{[]string{"status", "--nope"}, "not defined"},
		{[]string{"--agent", "a/b", "status"}, "--agent"},
		{[]string{"--device", "", "status"}, "--prefix/--device"},
		{[]string{"watch", "--count", "-1"}, "negative"},
	} {
		out, msg, code := d.ctl(t, tc.args...)
		if code != 2 || !strings.Contains(msg, tc.want) {
			t.Errorf("ctl %q: exit %d, %q (out %q); want 2 and %q", tc.args, code, msg, out, tc.want)
		}
	}
	out, _, code := d.ctl(t, "-h")
	if code != 0 || !strings.Contains(out, "run-saga is the way to run") || !strings.Contains(out, "-broker") {
		t.Fatalf("ctl -h: exit %d\n%s", code, out)
	}
	// Nothing listening: a failure, not a usage error.
	var buf bytes.Buffer
	err := Run([]string{"--broker", "tcp://127.0.0.1:1", "--timeout", "2s", "status"}, &buf)
	if cli.Status(err) != 1 {
		t.Fatalf("status against no broker: %v (exit %d)", err, cli.Status(err))
	}
}

// The defaults are the embedded default configuration's.
func TestCtlDefaults(t *testing.T) {
	g := defaultGlobals()
	def := config.Default()
	if _, ok := def.Agents.Allow[g.agent]; !ok {
		t.Errorf("ctl's default agent %q is not let in by the default configuration", g.agent)
	}
	if g.broker != "tcp://127.0.0.1:1883" || g.device != "arm1" || g.prefix != "saga/v1" || g.credentials != def.MQTT.Auth.CredentialsDir {
		t.Fatalf("defaults %+v", g)
	}
}

// runCtl runs ctl with exactly args (no --broker added).
func runCtl(args ...string) (string, string, int) {
	var out ctlBuffer
	err := Run(args, &out)
	return out.String(), errText(err), cli.Status(err)
}

// configFor writes the supervisor's config file as d runs it: the default
// with d's broker and HTTP addresses.
func (d *ctlDaemon) configFor(t *testing.T) string {
	t.Helper()
	broker := strings.TrimPrefix(d.url, "tcp://")
	text := strings.NewReplacer(
		"  listen: 127.0.0.1:1883", "  listen: "+broker,
		"  listen: 127.0.0.1:8080", "  listen: "+strings.TrimPrefix(d.http, "http://"),
	).Replace(string(config.DefaultYAML))
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// --config FILE finds the supervisor the file configures: its broker for
// status, its HTTP address for reset; flags given still win.
func TestCtlConfig(t *testing.T) {
	d := startCtlDaemon(t)
	cfg := d.configFor(t)
	if out, msg, code := runCtl("--config", cfg, "--timeout", "10s", "status"); code != 0 || !strings.Contains(out, "ready:      yes") {
		t.Fatalf("status with --config exited %d (%s): %s", code, msg, out)
	}
	// After the op too; and reset goes to the file's HTTP address.
	if _, msg, code := runCtl("halt", "--config", cfg, "--reason", "config test"); code != 0 {
		t.Fatalf("halt with --config exited %d: %s", code, msg)
	}
	if out, msg, code := runCtl("--config", cfg, "reset", "--token", ctlTestToken); code != 0 || !strings.Contains(out, "reset: the halt is cleared") {
		t.Fatalf("reset with --config exited %d (%s): %s", code, msg, out)
	}
	// An explicit flag wins over the file: a device nobody serves.
	if _, msg, code := runCtl("--config", cfg, "--timeout", "1s", "--device", "nobody", "status"); code != 1 || !strings.Contains(msg, "no reply") {
		t.Fatalf("status with --config and --device exited %d: %s", code, msg)
	}
	if _, msg, code := runCtl("--config", filepath.Join(t.TempDir(), "missing.yaml"), "status"); code != 2 || !strings.Contains(msg, "--config") {
		t.Fatalf("a missing config exited %d: %s", code, msg)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("device: arm1\nnonsense: 1\n"), 0o600)
	if _, msg, code := runCtl("--config", bad, "status"); code != 2 || !strings.Contains(msg, "bad.yaml") {
		t.Fatalf("an invalid config exited %d: %s", code, msg)
	}
}

// What fromConfig takes from a file, and that it leaves the flags given.
func TestCtlFromConfig(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "unreadable-token")
	os.WriteFile(tokenFile, []byte("x"), 0o000) // the daemon's: never read
	ext := filepath.Join(dir, "ext.yaml")
	os.WriteFile(ext, []byte(`device: cell7
mqtt:
  broker: ssl://broker.lan:8883
  prefix: plant/v1
  tls:
    ca_file: /etc/ssl/lan-ca.pem
http:
  listen: 0.0.0.0:9090
  tls: {self_signed: true}
  reset_token_file: `+tokenFile+`
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`), 0o600)
	emb := filepath.Join(dir, "emb.yaml")
	os.WriteFile(emb, []byte(`device: arm2
state_dir: /var/lib/saga-supervisor
mqtt:
  listen: 127.0.0.1:1884
  auth:
    credentials_dir: creds
http:
  listen: ""
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`), 0o600)
	// An external broker's logins are where mosquitto-config wrote them.
	mosq := filepath.Join(dir, "mosq.yaml")
	os.WriteFile(mosq, []byte(`device: arm3
state_dir: /srv/robot
mqtt:
  broker: tcp://127.0.0.1:1883
  auth: {credentials_dir: mqtt/credentials}
actuators:
  base: {kind: servo, driver: sim, min: 0, max: 1}
`), 0o600)
	for _, tc := range []struct {
		file              string
		set               map[string]bool
		broker, device    string
		prefix, ca, creds string
		http, token       string
		cert              string // the certificate reset trusts (http.tls)
	}{
		// TLS: https:// on loopback, trusting the config's certificate.
		{ext, nil, "ssl://broker.lan:8883", "cell7", "plant/v1", "/etc/ssl/lan-ca.pem", defaultGlobals().credentials, "https://127.0.0.1:9090", tokenFile, config.DefaultHTTPCertFile},
		{ext, map[string]bool{"broker": true, "device": true, "http": true}, "tcp://flag:1", "flagdev", "plant/v1", "/etc/ssl/lan-ca.pem", defaultGlobals().credentials, "http://flag", tokenFile, config.DefaultHTTPCertFile},
		{ext, map[string]bool{"http-cert": true}, "ssl://broker.lan:8883", "cell7", "plant/v1", "/etc/ssl/lan-ca.pem", defaultGlobals().credentials, "https://127.0.0.1:9090", tokenFile, ""},
		{emb, nil, "tcp://127.0.0.1:1884", "arm2", "saga/v1", "", "/var/lib/saga-supervisor/creds", "http://flag", "/var/lib/saga-supervisor/saga-data/operator-token", ""},
		{mosq, nil, "tcp://127.0.0.1:1883", "arm3", "saga/v1", "", "/srv/robot/mqtt/credentials", "http://127.0.0.1:8080", "/srv/robot/saga-data/operator-token", ""},
	} {
		g := defaultGlobals()
		g.configFile = tc.file
		httpURL := "http://flag"
		if tc.set["broker"] {
			g.broker, g.device = "tcp://flag:1", "flagdev"
		}
		if err := g.fromConfig(tc.set, &httpURL); err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if g.broker != tc.broker || g.device != tc.device || g.prefix != tc.prefix || g.caFile != tc.ca || g.credentials != tc.creds || httpURL != tc.http ||
			g.tokenFile != tc.token || g.httpCert != tc.cert {
			t.Errorf("%s %v: broker %s device %s prefix %s ca %s creds %s http %s token %s cert %s", filepath.Base(tc.file), tc.set, g.broker, g.device, g.prefix, g.caFile, g.credentials, httpURL, g.tokenFile, g.httpCert)
		}
	}
}

func TestCtlLoopback(t *testing.T) {
	for in, want := range map[string]string{"0.0.0.0:1883": "127.0.0.1:1883", "[::]:8080": "[::1]:8080", ":8080": "127.0.0.1:8080",
		"127.0.0.1:1": "127.0.0.1:1", "robot.lan:1883": "robot.lan:1883", "nonsense": "nonsense"} {
		if got := loopback(in); got != want {
			t.Errorf("loopback(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every op that connects says first that the supervisor is halted, and
// why, and how to reset; --json carries it as "halt".
func TestCtlHaltBanner(t *testing.T) {
	d := startCtlDaemon(t)
	if _, msg, code := d.ctl(t, "halt", "--reason", "person in the cell"); code != 0 {
		t.Fatalf("halt exited %d: %s", code, msg)
	}
	const banner = "WARNING: the supervisor is HALTED: "
	first := func(op, out string) {
		t.Helper()
		line, _, _ := strings.Cut(out, "\n")
		if !strings.HasPrefix(line, banner) || !strings.Contains(line, "person in the cell") || !strings.HasSuffix(line, ": saga-supervisor ctl reset") {
			t.Errorf("%s: the first line is not the halt warning:\n%s", op, out)
		}
	}
	out, _, _ := d.ctl(t, "status")
	first("status", out)
	out, _, _ = d.ctl(t, "hello")
	first("hello", out)
	out, msg, code := d.ctl(t, "run-saga", "base=5")
	first("run-saga", out)
	if code != 1 || !strings.Contains(msg, "HALTED") {
		t.Errorf("run-saga while halted exited %d: %s", code, msg)
	}
	out, _, _ = d.ctl(t, "watch", "--count", "1")
	first("watch", out)
	if !strings.Contains(out, "status   online") {
		t.Errorf("watch printed no status after the warning:\n%s", out)
	}
	// The path with --config names it in the reset it suggests.
	out, _, _ = runCtl("--config", d.configFor(t), "status")
	if !strings.Contains(out, "ctl --config ") {
		t.Errorf("status with --config: the warning does not suggest --config:\n%s", out)
	}

	type halt struct {
		Halted bool   `json:"halted"`
		Reason string `json:"reason"`
	}
	for _, args := range [][]string{{"hello"}, {"run-saga", "base=5"}} {
		out, _, _ := d.ctl(t, append([]string{"--json"}, args...)...)
		var j struct {
			Halt *halt `json:"halt"`
		}
		if err := json.Unmarshal([]byte(out), &j); err != nil || j.Halt == nil || !j.Halt.Halted || !strings.HasSuffix(j.Halt.Reason, ": person in the cell") {
			t.Errorf("%s --json: no halt in %s (%v)", args[0], out, err)
		}
	}
	// Reset over HTTP shows the halt it clears; then there is none.
	out, msg, code = d.ctl(t, "reset", "--http", d.http, "--token", ctlTestToken)
	first("reset", out)
	if code != 0 || !strings.Contains(out, "reset: the halt is cleared") {
		t.Fatalf("reset exited %d (%s): %s", code, msg, out)
	}
	for _, op := range []string{"status", "hello"} {
		if out, _, _ := d.ctl(t, op); strings.Contains(out, banner) {
			t.Errorf("%s after the reset still warns:\n%s", op, out)
		}
	}
	if out, _, _ := d.ctl(t, "--json", "hello"); strings.Contains(out, `"halt"`) {
		t.Errorf("hello --json after the reset: %s", out)
	}
}

// A watch warns when a halt latches while it runs.
func TestCtlWatchHalt(t *testing.T) {
	d := startCtlDaemon(t)
	var out ctlBuffer
	done := make(chan error, 1)
	go func() {
		done <- Run([]string{"--broker", d.url, "--agent", "watcher", "watch", "--for", "20s"}, &out)
	}()
	daemontest.WaitFor(t, "the retained status", 10*time.Second, func() bool { return strings.Contains(out.String(), "status   online") })
	if strings.Contains(out.String(), "HALTED") {
		t.Fatalf("a warning before any halt:\n%s", out.String())
	}
	d.sup.Halt("test", "watch me")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "WARNING: the supervisor is HALTED: test: watch me") {
		if time.Now().After(deadline) {
			t.Fatalf("no halt warning:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// With no operator token configured, ctl reset says so, and how to
// configure one, not that the token is wrong.
func TestCtlResetNoOperatorToken(t *testing.T) {
	d := startCtlDaemon(t, func(c *config.Config) { c.HTTP.ResetToken = "" })
	d.sup.Halt("test", "no token")
	_, msg, code := d.ctl(t, "reset", "--http", d.http, "--token", ctlTestToken)
	if code != 1 || !strings.Contains(msg, "NO_OPERATOR_TOKEN") || !strings.Contains(msg, "no operator token is configured") ||
		!strings.Contains(msg, "http.reset_token_file") || strings.Contains(msg, "wrong") {
		t.Fatalf("reset with no token configured exited %d: %s", code, msg)
	}
	if !d.sup.Status().Halted {
		t.Fatal("the halt was cleared")
	}
}

// watch shows an unknown position as unknown, not 0, and drift events.
func TestCtlWatchLines(t *testing.T) {
	var b bytes.Buffer
	out := &output{w: &b}
	v := 12.5
	writeUpdate(out, client.Update{Topic: "saga/v1/arm1/state/elbow", Payload: []byte(`{"actuator":"elbow","commanded":null}`), State: &client.State{Actuator: "elbow"}})
	writeUpdate(out, client.Update{Topic: "saga/v1/arm1/events", Event: &api.Event{Kind: api.EventDrift, Actuator: "valve", Value: &v}})
	got := b.String()
	if !strings.Contains(got, "state    elbow = unknown") || !strings.Contains(got, "drift    valve = 12.5") {
		t.Fatalf("watch lines:\n%s", got)
	}
}

// reset given no token reads the supervisor's own token file: the
// embedded default's (./saga-data/operator-token, in the working
// directory, as the credentials are), or the one --config names; a token
// file that is missing or private to another user is an error saying
// where it looked and what to do. The halt warning's command is that one.
func TestCtlResetReadsTheSupervisorsToken(t *testing.T) {
	d := startCtlDaemon(t)
	dir := t.TempDir()
	t.Chdir(dir)
	halt := func() {
		t.Helper()
		d.sup.Halt("test", "to be reset")
		daemontest.WaitFor(t, "halted", 5*time.Second, func() bool { return d.sup.Status().Halted })
	}

	halt()
	_, msg, code := d.ctl(t, "reset", "--http", d.http)
	if code != 2 || !strings.Contains(msg, "no operator token in ./saga-data/operator-token (http.reset_token_file of the embedded default config)") ||
		!strings.Contains(msg, "--config FILE or --token-file FILE") {
		t.Errorf("reset with no token file here exited %d: %s", code, msg)
	}
	if err := os.MkdirAll("saga-data", 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(config.DefaultResetTokenFile, []byte(ctlTestToken+"\n"), 0o600)
	out, msg, code := d.ctl(t, "reset", "--http", d.http)
	if code != 0 || d.sup.Status().Halted {
		t.Fatalf("reset with the default's token file exited %d: %s\n%s", code, msg, out)
	}
	if !strings.Contains(out, "WARNING: the supervisor is HALTED: test: to be reset — every command is refused until an operator resets it: saga-supervisor ctl reset\n") {
		t.Errorf("the warning does not name the reset that works:\n%s", out)
	}

	halt()
	tokenFile := filepath.Join(dir, "robot token")
	os.WriteFile(tokenFile, []byte(ctlTestToken+"\n"), 0o600)
	cfg := filepath.Join(dir, "arm.yaml")
	os.WriteFile(cfg, []byte("device: arm1\nhttp:\n  reset_token_file: "+tokenFile+"\nactuators:\n  base: {kind: servo, driver: sim, min: 0, max: 1}\n"), 0o600)
	out, msg, code = d.ctl(t, "--config", cfg, "reset", "--http", d.http)
	if code != 0 || d.sup.Status().Halted {
		t.Fatalf("reset with the config's token file exited %d: %s\n%s", code, msg, out)
	}
	if want := ": saga-supervisor ctl --config " + cfg + " reset\n"; !strings.Contains(out, want) {
		t.Errorf("the warning does not name the reset that works (%q):\n%s", want, out)
	}

	halt()
	os.WriteFile(cfg, []byte("device: arm1\nhttp:\n  reset_token_file: \"\"\nactuators:\n  base: {kind: servo, driver: sim, min: 0, max: 1}\n"), 0o600)
	if _, msg, code = d.ctl(t, "--config", cfg, "reset", "--http", d.http); code != 2 || !strings.Contains(msg, cfg+" names no operator token file (http.reset_token_file): give --token-file FILE") {
		t.Errorf("reset with a config that names no token file exited %d: %s", code, msg)
	}
	if !d.sup.Status().Halted {
		t.Fatal("the halt was cleared without the token")
	}
}
