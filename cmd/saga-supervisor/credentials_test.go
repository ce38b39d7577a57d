package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// stateLayout is a supervisor laid out as the shipped unit lays it out: a
// config that names its state directory, the daemon in a working directory
// of its own, and the commands a user types run from a third directory.
type stateLayout struct {
	root      string // every directory below, open to all (0755) so that another user reaches its own files
	state     string // state_dir
	cfg       string // the config file
	wd        string // the daemon's working directory
	elsewhere string // where the user's commands run
	http      string // the daemon's HTTP address
	broker    string // tcp://host:port
	token     string // the operator token file
}

// newStateLayout writes the embedded default config with state_dir, the
// broker and HTTP addresses and a reset token file named relative to
// state_dir. external points it at mosquitto on l.broker instead of the
// embedded broker, the supervisor logging in with the password
// mosquitto-config writes under state_dir (named relative to it).
func newStateLayout(t *testing.T, external bool) *stateLayout {
	t.Helper()
	root, err := os.MkdirTemp("", "saga-state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	l := &stateLayout{root: root, state: filepath.Join(root, "state"), cfg: filepath.Join(root, "etc", "config.yaml"),
		wd: filepath.Join(root, "wd"), elsewhere: filepath.Join(root, "home")}
	for _, d := range []string{filepath.Dir(l.cfg), l.wd, l.elsewhere} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(l.state, 0o700); err != nil {
		t.Fatal(err)
	}
	ports := stablePorts(t, 2)
	l.http, l.broker = fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("tcp://127.0.0.1:%d", ports[1])
	l.token = filepath.Join(l.state, "reset-token")
	if err := os.WriteFile(l.token, []byte(strings.Repeat("k", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := string(config.DefaultYAML)
	repl := []string{
		"\nstate_dir: .\n", "\nstate_dir: " + l.state + "\n",
		"  listen: 127.0.0.1:1883", "  listen: " + strings.TrimPrefix(l.broker, "tcp://"),
		"  listen: 127.0.0.1:8080", "  listen: " + l.http,
		"  reset_token_file: ./saga-data/operator-token", "  reset_token_file: reset-token", // relative: under state_dir
		"sim: {slew: 720}", "sim: {slew: 0}",
	}
	if external {
		repl[3] = `  listen: ""`
		repl = append(repl,
			"  broker: embedded", "  broker: "+l.broker,
			`  username: ""`, "  username: saga-supervisor-arm1",
			`  password_file: ""`, "  password_file: saga-data/mqtt/credentials/saga-supervisor-arm1")
	}
	for i := 0; i < len(repl); i += 2 {
		if !strings.Contains(text, repl[i]) {
			t.Fatalf("the default config no longer has %q: adapt newStateLayout", repl[i])
		}
		text = strings.Replace(text, repl[i], repl[i+1], 1)
	}
	// Not secret: a controller's user reads it (ctl --config).
	if err := os.WriteFile(l.cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return l
}

// run runs the binary from l.elsewhere, as the user cred (nil: the test's).
func (l *stateLayout) run(t *testing.T, cred *syscall.Credential, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = l.elsewhere
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	t.Fatalf("running %v: %v", args, err)
	return "", -1
}

// startDaemon runs `run --config` in l.wd as cred (nil: the test's user)
// and waits until it is ready.
func (l *stateLayout) startDaemon(t *testing.T, cred *syscall.Credential) *daemonProc {
	t.Helper()
	d := &daemonProc{t: t, cfgPath: l.cfg, http: l.http, wd: l.wd, as: cred}
	d.start()
	t.Cleanup(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		d.cmd.Wait()
		if t.Failed() {
			t.Logf("the daemon's output:\n%s", lastBytes(d.out.String(), 4<<10))
		}
	})
	d.waitReady()
	return d
}

// nobody is the credential of the user nobody, for running commands as a
// user other than the one owning the supervisor's files; nil when the test
// is not root (it cannot switch users).
func nobody(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}

// ctl --config FILE, run from another directory than the daemon's, finds
// what the daemon uses: the broker and the agent's password under the
// file's state_dir, the HTTP address; the daemon keeps its journal and
// logins under state_dir, not in its working directory. (Relative paths
// used to be relative to each process's own working directory: ctl looked
// for ./saga-data/mqtt/credentials/ctl where it ran, logged in with no
// password and was refused.)
func TestCtlConfigFromAnyDirectory(t *testing.T) {
	l := newStateLayout(t, false)
	l.startDaemon(t, nil)
	for _, f := range []string{"saga-data/journal", "saga-data/mqtt/passwd", "saga-data/mqtt/credentials/ctl"} {
		if _, err := os.Stat(filepath.Join(l.state, f)); err != nil {
			t.Errorf("the daemon's %s is not under state_dir: %v", f, err)
		}
	}
	if ents, _ := os.ReadDir(l.wd); len(ents) != 0 {
		t.Errorf("the daemon wrote into its working directory: %v", ents)
	}
	out, code := l.run(t, nil, "ctl", "--config", l.cfg, "--timeout", "10s", "status")
	journal := filepath.Join(l.state, "saga-data", "journal")
	if code != 0 || !strings.Contains(out, "ready:      yes") || !strings.Contains(out, "journal:    "+journal+",") {
		t.Fatalf("ctl --config status from another directory: exit %d, want ready and the journal %s:\n%s", code, journal, out)
	}
	// The HTTP address is the file's too: a halt over MQTT, a reset over
	// HTTP with the token the daemon read from state_dir.
	if out, code := l.run(t, nil, "ctl", "--config", l.cfg, "halt", "--reason", "state_dir test"); code != 0 {
		t.Fatalf("ctl --config halt: exit %d\n%s", code, out)
	}
	if out, code := l.run(t, nil, "ctl", "--config", l.cfg, "reset", "--token-file", l.token); code != 0 || !strings.Contains(out, "the halt is cleared") {
		t.Fatalf("ctl --config reset: exit %d\n%s", code, out)
	}
	if out, code := l.run(t, nil, "check-config", l.cfg); code != 0 || !strings.Contains(out, "journal "+journal) {
		t.Errorf("check-config from another directory: exit %d\n%s", code, out)
	}
}

// With an external mosquitto, ctl --config reads the agent's password
// where mosquitto-config wrote it (the config's credentials_dir, under
// state_dir) and logs in. (ctl used to take the credentials dir from the
// config only for the embedded broker: on mosquitto it connected with no
// password and was refused.)
func TestCtlConfigExternalMosquittoUsesCredentials(t *testing.T) {
	needTool(t, "mosquitto", "mosquitto")
	l := newStateLayout(t, true)
	mq := filepath.Join(l.root, "mosquitto")
	addr := strings.TrimPrefix(l.broker, "tcp://")
	if out, code := l.run(t, nil, "mosquitto-config", "--config", l.cfg, "--out", mq, "--listen", addr, "--mosquitto-user", ""); code != 0 {
		t.Fatalf("mosquitto-config: exit %d\n%s", code, out)
	}
	conf := filepath.Join(mq, "mosquitto.conf")
	if os.Getuid() == 0 {
		// As root mosquitto drops to its user, who cannot enter the test's
		// directories; TestMosquittoDebianLayout runs it that way.
		b, _ := os.ReadFile(conf)
		os.WriteFile(conf, append(b, "user root\n"...), 0o644)
	}
	port, _ := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
	runMosquittoConf(t, conf, port)
	if out, code := l.run(t, nil, "check-config", l.cfg); code != 0 {
		t.Fatalf("check-config: exit %d\n%s", code, out)
	}
	l.startDaemon(t, nil)
	out, code := l.run(t, nil, "ctl", "--config", l.cfg, "--timeout", "10s", "status")
	if code != 0 || !strings.Contains(out, "ready:      yes") {
		t.Fatalf("ctl --config status on mosquitto: exit %d\n%s", code, out)
	}
}

// `credentials`: list and show for the files' owner; show refused to
// anyone else with the file or directory in the way, its mode and owner
// and the way out; export hands one agent's password to one user (0600,
// theirs), never the supervisor's own; and ctl, for a user who cannot
// read the agent's password, says the same rather than logging in with
// none — and with the exported file, it works.
func TestCredentialsCommand(t *testing.T) {
	l := newStateLayout(t, false)
	l.startDaemon(t, nil) // writes the logins under state_dir
	creds := filepath.Join(l.state, "saga-data", "mqtt", "credentials")
	pw, err := os.ReadFile(filepath.Join(creds, "ctl"))
	if err != nil {
		t.Fatal(err)
	}

	out, code := l.run(t, nil, "credentials", "list", "--config", l.cfg)
	if code != 0 || !strings.Contains(out, filepath.Join(creds, "ctl")+": present, mode 0600") ||
		!strings.Contains(out, "saga-supervisor-arm1 (users saga-supervisor-arm1, saga-supervisor-arm1-estop, saga-supervisor-arm1-devices)") ||
		strings.Contains(out, strings.TrimSpace(string(pw))) {
		t.Errorf("credentials list: exit %d\n%s", code, out)
	}
	if out, code := l.run(t, nil, "credentials", "show", "ctl", "--config", l.cfg); code != 0 || out != string(pw) {
		t.Errorf("credentials show ctl as the owner: exit %d, %q", code, out)
	}
	if out, code := l.run(t, nil, "credentials", "show", "mallory", "--config", l.cfg); code != 2 || !strings.Contains(out, `no login "mallory"`) || !strings.Contains(out, "ctl, planner") {
		t.Errorf("credentials show of an unknown login: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{{"show"}, {"frobnicate"}, {"show", "ctl", "--to", "x"}, {"export", "ctl"}} {
		if out, code := l.run(t, nil, append([]string{"credentials", "--config", l.cfg}, args...)...); code != 2 {
			t.Errorf("credentials %q: exit %d, want 2\n%s", args, code, out)
		}
	}
	if out, code := l.run(t, nil, "credentials", "export", "saga-supervisor-arm1", "--to", filepath.Join(l.elsewhere, "s"), "--owner", "root", "--config", l.cfg); code != 1 || !strings.Contains(out, "the supervisor's own login") {
		t.Errorf("export of the supervisor's login: exit %d\n%s", code, out)
	}

	other := nobody(t)
	if other == nil {
		// Not root: no other user to be. The same refusal, for a
		// directory this user may not enter.
		if err := os.Chmod(l.state, 0); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(l.state, 0o700)
		out, code := l.run(t, nil, "credentials", "show", "ctl", "--config", l.cfg)
		if code != 1 || !strings.Contains(out, "its directory "+l.state+" is mode 0000") || !strings.Contains(out, "credentials export ctl") {
			t.Errorf("credentials show through a closed directory: exit %d\n%s", code, out)
		}
		me, _ := user.Current()
		if out, code := l.run(t, nil, "credentials", "export", "ctl", "--to", filepath.Join(l.elsewhere, "ctl.pw"), "--owner", "root", "--config", l.cfg); me.Uid != "0" && (code != 1 || !strings.Contains(out, "only root may give")) {
			t.Errorf("export to another user, not as root: exit %d\n%s", code, out)
		}
		return
	}
	// As another user: refused, naming the state directory, its mode and
	// its owner, and what to do.
	out, code = l.run(t, other, "credentials", "show", "ctl", "--config", l.cfg)
	if code != 1 || !strings.Contains(out, "permission denied") || !strings.Contains(out, "its directory "+l.state+" is mode 0700, owner root:root: nobody may not enter it") ||
		!strings.Contains(out, "credentials export ctl --to FILE --owner USER") || strings.Contains(out, strings.TrimSpace(string(pw))) {
		t.Errorf("credentials show as nobody: exit %d\n%s", code, out)
	}
	out, code = l.run(t, other, "ctl", "--config", l.cfg, "status")
	if code != 2 || !strings.Contains(out, "agent ctl's password "+filepath.Join(creds, "ctl")) || !strings.Contains(out, "is mode 0700, owner root:root") ||
		!strings.Contains(out, "credentials export ctl") {
		t.Errorf("ctl --config as a user who may not read the password: exit %d\n%s", code, out)
	}
	if out, code := l.run(t, other, "credentials", "export", "ctl", "--to", filepath.Join(l.elsewhere, "x"), "--owner", "root", "--config", l.cfg); code != 1 || !strings.Contains(out, "only root may give a file to root") {
		t.Errorf("export to root as nobody: exit %d\n%s", code, out)
	}

	// Root hands ctl's password to nobody, in a directory of nobody's.
	home := filepath.Join(l.elsewhere, "nobody")
	os.Mkdir(home, 0o700)
	os.Chown(home, int(other.Uid), int(other.Gid))
	exported := filepath.Join(home, "ctl.password")
	out, code = l.run(t, nil, "credentials", "export", "ctl", "--to", exported, "--owner", "nobody", "--config", l.cfg)
	if code != 0 || !strings.Contains(out, "mode 0600, owner nobody:") {
		t.Fatalf("credentials export ctl --owner nobody: exit %d\n%s", code, out)
	}
	fi, err := os.Stat(exported)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o600 || st.Uid != other.Uid || st.Gid != other.Gid {
		t.Errorf("exported file: mode %04o, uid %d gid %d; want 0600 owned by nobody", fi.Mode().Perm(), st.Uid, st.Gid)
	}
	if b, _ := os.ReadFile(exported); !bytes.Equal(b, pw) {
		t.Error("the exported file does not hold ctl's password")
	}
	if fi, err := os.Stat(l.state); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the state directory's mode changed: %v %v", fi, err)
	}
	// And nobody, as a controller, logs in with it.
	out, code = l.run(t, other, "ctl", "--config", l.cfg, "--password-file", exported, "--timeout", "10s", "status")
	if code != 0 || !strings.Contains(out, "ready:      yes") {
		t.Errorf("ctl as nobody with the exported password: exit %d\n%s", code, out)
	}
}

// debianMosquittoConf is /etc/mosquitto/mosquitto.conf as Debian's
// mosquitto package installs it (2.0.11, bookworm): the test lays out the
// machine's own when it has one, this copy otherwise.
const debianMosquittoConf = `# Place your local configuration in /etc/mosquitto/conf.d/
#
# A full description of the configuration file is at
# /usr/share/doc/mosquitto/examples/mosquitto.conf.example

pid_file /run/mosquitto/mosquitto.pid

persistence true
persistence_location /var/lib/mosquitto/

log_dest file /var/log/mosquitto/mosquitto.log

include_dir /etc/mosquitto/conf.d
`

// The documented mosquitto set-up works with Debian's mosquitto as its
// service runs it: in a throw-away root laid out like Debian's (its
// mosquitto.conf loading conf.d), `mosquitto-config --config FILE --out
// /etc/mosquitto/saga --conf-d /etc/mosquitto/conf.d` writes the conf.d
// snippet, gives the password file and ACL to the mosquitto user (0600)
// and the passwords to the state directory's owner; mosquitto started as
// the service starts it (as root, dropping to mosquitto) reads them; the
// supervisor, as the state directory's user, logs in with its own; and
// the documented `ctl --config FILE status` succeeds. (mosquitto-config
// used to leave everything root's, mode 0600: "Unable to open pwfile".)
// Not as root, the files stay the caller's and mosquitto runs as the
// caller: the modes are checked and the rest runs the same.
func TestMosquittoDebianLayout(t *testing.T) {
	mosquitto := needTool(t, "mosquitto", "mosquitto")
	l := newStateLayout(t, true)
	text := debianMosquittoConf
	if b, err := os.ReadFile("/etc/mosquitto/mosquitto.conf"); err == nil {
		text = string(b)
	}
	if !strings.Contains(text, "\ninclude_dir /etc/mosquitto/conf.d\n") {
		t.Fatalf("/etc/mosquitto/mosquitto.conf does not load conf.d as Debian's does:\n%s", text)
	}
	at := func(p string) string { return filepath.Join(l.root, p) }
	text = strings.NewReplacer("/etc/mosquitto", at("/etc/mosquitto"), "/run/mosquitto", at("/run/mosquitto"),
		"/var/lib/mosquitto", at("/var/lib/mosquitto"), "/var/log/mosquitto", at("/var/log/mosquitto")).Replace(text)
	root := os.Geteuid() == 0
	var mosqUID, mosqGID int
	if root {
		u, err := user.Lookup("mosquitto")
		if err != nil {
			t.Fatalf("the mosquitto package's user: %v", err)
		}
		mosqUID, _ = strconv.Atoi(u.Uid)
		mosqGID, _ = strconv.Atoi(u.Gid)
	}
	for _, d := range []string{"/etc/mosquitto/conf.d", "/var/lib/mosquitto", "/run/mosquitto", "/var/log/mosquitto"} {
		if err := os.MkdirAll(at(d), 0o755); err != nil {
			t.Fatal(err)
		}
		if root && d != "/etc/mosquitto/conf.d" { // as mosquitto.service's ExecStartPre= and the package do
			os.Chown(at(d), mosqUID, -1)
		}
	}
	if err := os.WriteFile(at("/etc/mosquitto/mosquitto.conf"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	// The supervisor's user owns its state directory (saga on a robot).
	sup := nobody(t)
	if sup != nil {
		for _, p := range []string{l.state, l.token} {
			if err := os.Chown(p, int(sup.Uid), int(sup.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}

	addr := strings.TrimPrefix(l.broker, "tcp://")
	out, code := l.run(t, nil, "mosquitto-config", "--config", l.cfg, "--out", at("/etc/mosquitto/saga"),
		"--conf-d", at("/etc/mosquitto/conf.d"), "--listen", addr)
	if code != 0 {
		t.Fatalf("mosquitto-config: exit %d\n%s", code, out)
	}
	for _, want := range []string{"sudo systemctl restart mosquitto", "password_file: " + filepath.Join(l.state, "saga-data/mqtt/credentials/saga-supervisor-arm1")} {
		if !strings.Contains(out, want) {
			t.Errorf("mosquitto-config's output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(at("/etc/mosquitto/saga/mosquitto.conf")); err == nil {
		t.Error("with --conf-d, a second conf was written to --out too")
	}
	type want struct {
		mode     os.FileMode
		uid, gid int // -1: any
	}
	files := map[string]want{
		"/etc/mosquitto/conf.d/saga.conf": {0o644, -1, -1},
		"/etc/mosquitto/saga/passwd":      {0o600, -1, -1},
		"/etc/mosquitto/saga/saga.acl":    {0o600, -1, -1},
	}
	creds := filepath.Join(l.state, "saga-data", "mqtt", "credentials")
	for _, p := range []string{filepath.Join(l.state, "saga-data"), filepath.Dir(creds), creds} {
		files[p] = want{0o700, -1, -1}
	}
	for _, login := range []string{"saga-supervisor-arm1", "ctl", "planner"} {
		files[filepath.Join(creds, login)] = want{0o600, -1, -1}
	}
	if root {
		for _, p := range []string{"/etc/mosquitto/saga/passwd", "/etc/mosquitto/saga/saga.acl"} {
			files[p] = want{0o600, mosqUID, mosqGID}
		}
		for p, w := range files {
			if strings.HasPrefix(p, l.state) {
				files[p] = want{w.mode, int(sup.Uid), int(sup.Gid)}
			}
		}
		// mosquitto's group may enter the directory, no one else.
		files["/etc/mosquitto/saga"] = want{0o750, 0, mosqGID}
	}
	for p, w := range files {
		if !strings.HasPrefix(p, l.root) {
			p = at(p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != w.mode || w.uid >= 0 && int(st.Uid) != w.uid || w.gid >= 0 && int(st.Gid) != w.gid {
			t.Errorf("%s: mode %04o, owner %d:%d; want %04o %d:%d", p, fi.Mode().Perm(), st.Uid, st.Gid, w.mode, w.uid, w.gid)
		}
	}
	if fi, err := os.Stat(l.state); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the state directory is no longer 0700: %v %v", fi, err)
	}

	// mosquitto as Debian's mosquitto.service runs it.
	cmd := exec.Command(mosquitto, "-c", at("/etc/mosquitto/mosquitto.conf"))
	var mout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &mout, &mout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			log, _ := os.ReadFile(at("/var/log/mosquitto/mosquitto.log"))
			t.Logf("mosquitto's output:\n%s\nits log:\n%s", mout.String(), log)
		}
	})
	daemontestWait(t, "mosquitto to listen on "+addr, 10*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if root {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		if err != nil || !regexp.MustCompile(`(?m)^Uid:\s+`+strconv.Itoa(mosqUID)+`\s`).Match(b) {
			t.Errorf("mosquitto does not run as the mosquitto user (%d):\n%s", mosqUID, b)
		}
	}
	l.startDaemon(t, sup)
	out, code = l.run(t, nil, "ctl", "--config", l.cfg, "--timeout", "10s", "status")
	if code != 0 || !strings.Contains(out, "ready:      yes") {
		t.Fatalf("ctl --config status against Debian's mosquitto: exit %d\n%s", code, out)
	}
}
