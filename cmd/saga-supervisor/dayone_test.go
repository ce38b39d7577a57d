package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// Day one (issue 23): from zero to a running robot with no dead end. The
// daemon runs as a user runs it, in a working directory of its own, and
// every command its banner prints is run as printed (through sh -c, the
// binary's path for saga-supervisor, in that directory): each must work.
// A halt latched with ctl halt is cleared by the printed ctl reset, which
// finds the operator token the first start generated; a start on a
// halted journal says so, and why, in its log and its banner.

// dayOne is the real binary running `run` in its own working directory.
type dayOne struct {
	t    *testing.T
	dir  string   // the daemon's working directory, where the commands run
	args []string // run's flags
	http string   // host:port of its HTTP
	cmd  *exec.Cmd
	out  *syncBuffer // the banner (stdout)
	log  *syncBuffer // the log (stderr)
}

// start starts the daemon and returns its banner once it is printed
// whole and HTTP answers.
func (d *dayOne) start() string {
	d.t.Helper()
	d.out, d.log = &syncBuffer{}, &syncBuffer{}
	d.cmd = exec.Command(binary, append([]string{"run"}, d.args...)...)
	d.cmd.Dir = d.dir
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.log
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	cmd := d.cmd
	d.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if d.t.Failed() {
			d.t.Logf("the daemon's banner:\n%s\nits log (last 6 KiB):\n%s", d.out.String(), lastBytes(d.log.String(), 6<<10))
		}
	})
	daemontest.WaitFor(d.t, "the daemon's HTTP and its banner", 30*time.Second, func() bool {
		code, _ := d.get("/api/v1/status")
		return code == http.StatusOK && strings.Contains(d.out.String(), " status\n")
	})
	time.Sleep(300 * time.Millisecond) // the banner's last lines follow at once
	return d.out.String()
}

// stop is the orderly stop (SIGTERM).
func (d *dayOne) stop() {
	d.t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		d.t.Fatalf("the daemon's stop: %v", err)
	}
}

func (d *dayOne) get(path string) (int, string) {
	res, err := http.Get("http://" + d.http + path)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// halted reports the status endpoint's halt and its reason.
func (d *dayOne) halted() (bool, string) {
	d.t.Helper()
	_, body := d.get("/api/v1/status")
	var st struct {
		Halted bool   `json:"halted"`
		Why    string `json:"halt_reason"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		d.t.Fatalf("status %q: %v", body, err)
	}
	return st.Halted, st.Why
}

// httpHalt halts as the dashboard's E-STOP does.
func (d *dayOne) httpHalt(reason string) {
	d.t.Helper()
	res, err := http.Post("http://"+d.http+"/api/v1/halt", "application/json", strings.NewReader(`{"reason":"`+reason+`"}`))
	if err != nil {
		d.t.Fatal(err)
	}
	res.Body.Close()
	daemontest.WaitFor(d.t, "halted", 5*time.Second, func() bool { h, _ := d.halted(); return h })
}

// sh runs a command line as the banner printed it, through sh -c in the
// daemon's directory, with the binary's path for saga-supervisor.
func (d *dayOne) sh(line string) (string, error) {
	run := line
	if rest, ok := strings.CutPrefix(line, "saga-supervisor "); ok {
		run = cli.ShellQuote(binary) + " " + rest
	}
	cmd := exec.Command("sh", "-c", run)
	cmd.Dir = d.dir
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// mustSh runs a printed command line and fails the test unless it
// succeeds.
func (d *dayOne) mustSh(line string) string {
	d.t.Helper()
	out, err := d.sh(line)
	if err != nil {
		d.t.Fatalf("the printed command does not work as printed (%v):\n  %s\n%s", err, line, out)
	}
	return out
}

// bannerCommands are the command lines a banner prints: each line (after
// an "or: ") that starts with saga-supervisor or mosquitto_rr, in order.
func bannerCommands(banner string) []string {
	var cmds []string
	for line := range strings.SplitSeq(banner, "\n") {
		if !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "or: ") {
			continue // a heading, or the first line: "saga-supervisor <version> running on ..."
		}
		line = strings.TrimPrefix(strings.TrimSpace(line), "or: ")
		if strings.HasPrefix(line, "saga-supervisor ") || strings.HasPrefix(line, "mosquitto_rr ") {
			cmds = append(cmds, line)
		}
	}
	return cmds
}

// resetCommand is the ctl reset line a banner prints.
func resetCommand(t *testing.T, banner string) string {
	t.Helper()
	for _, c := range bannerCommands(banner) {
		if strings.HasPrefix(c, "saga-supervisor ctl ") && strings.HasSuffix(c, " reset") {
			return c
		}
	}
	t.Fatalf("the banner prints no ctl reset command that needs nothing more:\n%s", banner)
	return ""
}

// runBannerCommands runs every command the banner prints, each as
// printed; a reset is run on a halted supervisor, and must clear it. It
// returns how many of each kind it ran.
func runBannerCommands(t *testing.T, d *dayOne, banner string) map[string]int {
	t.Helper()
	ran := map[string]int{}
	for _, c := range bannerCommands(banner) {
		kind := strings.Fields(c)[0]
		if strings.HasSuffix(c, " reset") {
			d.httpHalt("the banner test")
			kind = "reset"
		}
		out, err := d.sh(c)
		switch {
		case err != nil:
			t.Errorf("the printed command does not work as printed (%v):\n  %s\n%s", err, c, out)
		case kind == "mosquitto_rr" && !strings.Contains(out, `"ok":true`):
			t.Errorf("the printed mosquitto_rr got no status:\n  %s\n%s", c, out)
		case kind == "reset":
			if h, why := d.halted(); h {
				t.Errorf("the printed reset left the supervisor halted (%s):\n  %s\n%s", why, c, out)
			}
		}
		ran[kind]++
	}
	if ran["mosquitto_rr"] == 0 || ran["saga-supervisor"] == 0 || ran["reset"] == 0 {
		t.Errorf("the banner does not print a mosquitto_rr, a ctl and a reset command (ran %v):\n%s", ran, banner)
	}
	return ran
}

// defaultConfigAt writes the embedded default to dir/arm.yaml with only
// its ports changed (and the replacements given): its relative paths land
// in dir, the daemon's working directory.
func defaultConfigAt(t *testing.T, dir, mqttAddr, httpAddr string, more ...string) {
	t.Helper()
	r := append([]string{"  listen: 127.0.0.1:1883", "  listen: " + mqttAddr, "  listen: 127.0.0.1:8080", "  listen: " + httpAddr}, more...)
	text := string(config.DefaultYAML)
	for i := 0; i < len(r); i += 2 {
		if !strings.Contains(text, r[i]) {
			t.Fatalf("the default config no longer holds %q; adapt the day-one tests", r[i])
		}
		text = strings.Replace(text, r[i], r[i+1], 1)
	}
	if err := os.WriteFile(filepath.Join(dir, "arm.yaml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// useTokenFile points dir/arm.yaml's http.reset_token_file at path,
// whatever it named.
func useTokenFile(t *testing.T, dir, path string) {
	t.Helper()
	cfg := filepath.Join(dir, "arm.yaml")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^  reset_token_file: .*$`)
	if len(line.FindAll(b, -1)) != 1 {
		t.Fatal("the default config no longer holds one http.reset_token_file; adapt the day-one tests")
	}
	if err := os.WriteFile(cfg, line.ReplaceAll(b, []byte("  reset_token_file: "+path)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// haltResetRestart is the operator's day one on d, whose ctl commands
// take ctlFlags (the config, if run has one): the first start generates
// the operator token (mode 0600, its path in the banner, never the
// token); ctl halt latches a halt and the printed ctl reset, with no
// token given, clears it; a halt survives a restart, which says so — in
// the log (WARN) and the banner — with the halt's reason and the reset
// command, which works; the token is the same one.
func haltResetRestart(t *testing.T, d *dayOne, ctlFlags string) {
	t.Helper()
	banner := d.start()
	tokenPath := filepath.Join(d.dir, "saga-data", "operator-token")
	st, err := os.Stat(tokenPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the first start made no private operator token in %s: %v %v", tokenPath, st, err)
	}
	token, _ := os.ReadFile(tokenPath)
	tok := strings.TrimSpace(string(token))
	if !strings.Contains(banner, "  token    ./saga-data/operator-token  (") || !strings.Contains(banner, "created now") {
		t.Errorf("the banner does not say where the new operator token is:\n%s", banner)
	}
	if len(tok) < config.MinResetTokenLen || strings.Contains(banner, tok) || strings.Contains(d.log.String(), tok) {
		t.Fatalf("the token (%d bytes) is too short, or printed", len(tok))
	}
	reset := resetCommand(t, banner)
	if want := "saga-supervisor ctl" + ctlFlags + " reset"; reset != want {
		t.Errorf("the banner's reset is %q, want %q", reset, want)
	}

	d.mustSh("saga-supervisor ctl" + ctlFlags + " halt --reason 'person in the cell'")
	if h, why := d.halted(); !h || !strings.Contains(why, "person in the cell") {
		t.Fatalf("ctl halt: halted %v (%s)", h, why)
	}
	out := d.mustSh(reset)
	if h, why := d.halted(); h {
		t.Fatalf("ctl reset left it halted (%s):\n%s", why, out)
	}
	if !strings.Contains(out, "WARNING: the supervisor is HALTED: agent ctl: person in the cell — every command is refused until an operator resets it: "+reset+"\n") {
		t.Errorf("ctl's halt warning does not name the reset that works:\n%s", out)
	}

	d.mustSh("saga-supervisor ctl" + ctlFlags + " halt --reason 'gripper jammed'")
	d.stop()
	banner = d.start()
	if h, why := d.halted(); !h || why != "agent ctl: gripper jammed" {
		t.Fatalf("after a restart: halted %v (%s)", h, why)
	}
	if !strings.Contains(d.log.String(), `level=WARN msg="started HALTED: every command is refused until an operator resets it" reason="agent ctl: gripper jammed" reset="`+reset+`"`) {
		t.Errorf("the log does not say the start is halted, why and how to reset:\n%s", d.log.String())
	}
	if !strings.Contains(banner, "HALTED: the journal ends halted, so the robot starts halted: agent ctl: gripper jammed.") ||
		!strings.Contains(banner, "\n  "+reset+"\n") || strings.Contains(banner, "created now") {
		t.Errorf("the banner does not say the start is halted, why and how to reset (or made a new token):\n%s", banner)
	}
	if again, _ := os.ReadFile(tokenPath); string(again) != string(token) {
		t.Error("the restart replaced the operator token")
	}
	d.mustSh(resetCommand(t, banner))
	if h, why := d.halted(); h {
		t.Fatalf("the printed reset left the restarted supervisor halted (%s)", why)
	}
}

// The embedded default as `saga-supervisor run` runs it — no config at
// all, its own ports — in a network namespace of its own, so that its
// fixed ports are free: every command the banner prints works, and a halt
// is cleared with the printed, flagless ctl reset, before and after a
// restart. Skipped where no namespace can be made (the config-file twin
// below always runs).
func TestDayOneDefault(t *testing.T) {
	if !inOwnNetns(t) {
		return
	}
	d := &dayOne{t: t, dir: t.TempDir(), http: "127.0.0.1:8080"}
	haltResetRestart(t, d, "")
	runBannerCommands(t, d, d.out.String())
	// ctl's defaults and the banner's first command are this device's:
	// the ACL refuses nothing they send.
	d.mustSh("saga-supervisor ctl status")
}

// The same day on the embedded default written out as a file, only its
// ports changed: the banner's commands name the config.
func TestDayOneDefaultConfigFile(t *testing.T) {
	dir := t.TempDir()
	ports := stablePorts(t, 2)
	mqttAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	defaultConfigAt(t, dir, mqttAddr, httpAddr)
	d := &dayOne{t: t, dir: dir, args: []string{"--config", "arm.yaml"}, http: httpAddr}
	haltResetRestart(t, d, " --config arm.yaml")
	runBannerCommands(t, d, d.out.String())
}

// A robot of another name (device arm2): every command the banner prints
// works — ctl's among them, which must name the config, or ctl would ask
// for arm1's topics. A ctl pointed at the wrong device is told that, not
// that its login is wrong: the broker took the login and refused its will
// topic.
func TestDayOneOtherDevice(t *testing.T) {
	dir := t.TempDir()
	ports := stablePorts(t, 2)
	mqttAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	defaultConfigAt(t, dir, mqttAddr, httpAddr, "device: arm1", "device: arm2", "client_id: saga-supervisor-arm1", "client_id: saga-supervisor-arm2")
	d := &dayOne{t: t, dir: dir, args: []string{"--config", "arm.yaml"}, http: httpAddr}
	banner := d.start()
	if !strings.Contains(banner, "-t saga/v1/arm2/cmd/ctl -e saga/v1/arm2/reply/ctl") {
		t.Errorf("the banner's mosquitto_rr is not arm2's:\n%s", banner)
	}
	ran := runBannerCommands(t, d, banner)
	if ran["saga-supervisor"] == 0 {
		t.Fatal("no ctl command printed")
	}
	out, err := d.sh("saga-supervisor ctl --broker tcp://" + mqttAddr + " status") // ctl's defaults: device arm1
	if err == nil || !strings.Contains(out, "refused the agent's will topic saga/v1/arm1/will/ctl") || !strings.Contains(out, `device "arm1"`) ||
		!strings.Contains(out, "--config FILE") || strings.Contains(out, "refused the login") {
		t.Errorf("ctl status on the wrong device: %v, want an error naming the will topic and the device:\n%s", err, out)
	}
}

// An external mosquitto with logins, set up by mosquitto-config: the
// banner's mosquitto_rr logs in (host, port and the agent's password where
// mosquitto-config wrote it), and so does its ctl.
func TestDayOneMosquitto(t *testing.T) {
	testtool.Need(t, "mosquitto-clients", "mosquitto_rr")
	dir := t.TempDir()
	ports := stablePorts(t, 2)
	brokerAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	mq := filepath.Join(dir, "mosquitto")
	// state_dir is the test's directory, so that mosquitto-config (run
	// from here) and the daemon (run there) name the same credentials.
	defaultConfigAt(t, dir, `""`, httpAddr,
		"\nstate_dir: .\n", "\nstate_dir: "+dir+"\n",
		"  broker: embedded", "  broker: tcp://"+brokerAddr,
		`  username: ""`, "  username: saga-supervisor-arm1",
		`  password_file: ""`, "  password_file: saga-data/mqtt/credentials/saga-supervisor-arm1")
	if out, code := run(t, "mosquitto-config", "--config", filepath.Join(dir, "arm.yaml"), "--out", mq, "--listen", brokerAddr); code != 0 {
		t.Fatalf("mosquitto-config: exit %d\n%s", code, out)
	}
	conf := filepath.Join(mq, "mosquitto.conf")
	if os.Getuid() == 0 {
		f, _ := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString("user root\n") // as root mosquitto would drop to a user who cannot read the test's files
		f.Close()
	}
	runMosquittoConf(t, conf, ports[0])
	d := &dayOne{t: t, dir: dir, args: []string{"--config", "arm.yaml"}, http: httpAddr}
	banner := d.start()
	if !strings.Contains(banner, "mosquitto_rr -h 127.0.0.1 -p "+fmt.Sprint(ports[0])+" -u ctl -i ctl -P ") {
		t.Errorf("the banner's mosquitto_rr does not log in to mosquitto as ctl:\n%s", banner)
	}
	runBannerCommands(t, d, banner)
}

// An operator token the operator wrote is the one in force: never
// replaced, not at the first start nor later, and ctl reset reads it from
// the file the config names; one open to others stops the start, and is
// left as it was.
func TestDayOneTokenFileNeverOverwritten(t *testing.T) {
	dir := t.TempDir()
	ports := stablePorts(t, 2)
	mqttAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	const mine = "the-operators-own-token-0123456789abcdef\n"
	if err := os.WriteFile(filepath.Join(dir, "my-token"), []byte(mine), 0o600); err != nil {
		t.Fatal(err)
	}
	defaultConfigAt(t, dir, mqttAddr, httpAddr)
	useTokenFile(t, dir, "./my-token")
	d := &dayOne{t: t, dir: dir, args: []string{"--config", "arm.yaml"}, http: httpAddr}
	for range 2 {
		banner := d.start()
		if !strings.Contains(banner, "  token    ./my-token  (") || strings.Contains(banner, "created now") {
			t.Errorf("the banner does not name the operator's token file, or says it made one:\n%s", banner)
		}
		d.httpHalt("checking the token")
		d.mustSh(resetCommand(t, banner))
		if h, _ := d.halted(); h {
			t.Fatal("ctl reset with the operator's token file did not clear the halt")
		}
		d.stop()
		if b, _ := os.ReadFile(filepath.Join(dir, "my-token")); string(b) != mine {
			t.Fatalf("the operator's token was replaced: %q", b)
		}
		if _, err := os.Stat(filepath.Join(dir, "saga-data", "operator-token")); !os.IsNotExist(err) {
			t.Errorf("a token was generated beside the operator's: %v", err)
		}
	}

	os.Chmod(filepath.Join(dir, "my-token"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	refused := exec.CommandContext(ctx, binary, "run", "--config", "arm.yaml")
	refused.Dir = dir
	out, err := refused.CombinedOutput()
	if refused.ProcessState == nil || refused.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "http.reset_token_file") ||
		!strings.Contains(string(out), "has mode 0644") || strings.Contains(string(out), "running on") {
		t.Errorf("a start on a token open to others: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "my-token")); string(b) != mine {
		t.Fatalf("the refused token was replaced: %q", b)
	}
}

// A start on a journal that ends halted says so — in the log, at WARN,
// and in the banner — with the reason the operator gave (an HTTP halt
// journals its source before it reads the reason, then again with it) and
// the reset command, which works as printed.
func TestDayOneRestartHalted(t *testing.T) {
	dir := t.TempDir()
	ports := stablePorts(t, 2)
	mqttAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	if err := os.WriteFile(filepath.Join(dir, "my-token"), []byte("the-operators-own-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	defaultConfigAt(t, dir, mqttAddr, httpAddr)
	useTokenFile(t, dir, "./my-token")
	d := &dayOne{t: t, dir: dir, args: []string{"--config", "arm.yaml"}, http: httpAddr}
	d.start()
	d.httpHalt("person in the cell")
	_, why := d.halted()
	d.stop()
	banner := d.start()
	if h, after := d.halted(); !h || after != why || !strings.HasSuffix(why, ": person in the cell") {
		t.Errorf("halted %v, reason %q after the restart; %q before it", h, after, why)
	}
	const reset = "saga-supervisor ctl --config arm.yaml reset"
	if !strings.Contains(d.log.String(), `level=WARN msg="started HALTED: every command is refused until an operator resets it" reason="`+why+`" reset="`+reset+`"`) {
		t.Errorf("the log does not say the start is halted, why (%s) and how to reset:\n%s", why, d.log.String())
	}
	if !strings.Contains(banner, "HALTED: the journal ends halted, so the robot starts halted: "+why+".") || !strings.Contains(banner, "\n  "+reset+"\n") {
		t.Errorf("the banner does not say the start is halted, why (%s) and how to reset:\n%s", why, banner)
	}
	d.mustSh(reset)
	if h, _ := d.halted(); h {
		t.Fatal("the printed reset did not clear the halt")
	}
}

// The dashboard's reset box says where the operator token is — the path,
// from the dashboard's own JSON, never the token.
func TestDayOneDashboardNamesTokenFile(t *testing.T) {
	dir := t.TempDir()
	ports := stablePorts(t, 2)
	mqttAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	defaultConfigAt(t, dir, mqttAddr, httpAddr)
	d := &dayOne{t: t, dir: dir, args: []string{"--config", "arm.yaml"}, http: httpAddr}
	d.start()
	want, err := filepath.Abs(filepath.Join(dir, "saga-data", "operator-token"))
	if err != nil {
		t.Fatal(err)
	}
	token, _ := os.ReadFile(want)
	_, body := d.get("/api/v1/dashboard")
	var snap struct {
		File string `json:"reset_token_file"`
	}
	if err := json.Unmarshal([]byte(body), &snap); err != nil || snap.File != want || strings.Contains(body, strings.TrimSpace(string(token))) {
		t.Errorf("the dashboard's reset_token_file is %q (%v), want %s, and never the token", snap.File, err, want)
	}
	_, page := d.get("/")
	_, js := d.get("/dashboard.js")
	if !strings.Contains(page, `<span id="token-where"`) || !strings.Contains(js, `$("token-where").textContent = d.reset_token_file`) {
		t.Error("the reset box does not show the dashboard's reset_token_file")
	}
}
