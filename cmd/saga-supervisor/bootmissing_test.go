package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// booted is the real binary started, as systemd starts it (a notify socket
// and a watchdog), with a part it needs missing.
type booted struct {
	t       *testing.T
	http    string
	token   string // the operator token (reset)
	cmd     *exec.Cmd
	out     *syncBuffer
	sock    *notifySocket
	started time.Time
}

// bootWith starts `run --config cfg` with HTTP on httpAddr.
func bootWith(t *testing.T, cfg, httpAddr, token string) *booted {
	t.Helper()
	b := &booted{t: t, http: httpAddr, token: token, out: &syncBuffer{}, sock: newNotifySocket(t)}
	b.cmd = exec.Command(binary, "run", "--config", cfg)
	b.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+b.sock.path, "WATCHDOG_USEC=1000000")
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	b.started = time.Now()
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.cmd.Process.Kill() // kill -9: no orderly stop to hide behind
		b.cmd.Wait()
		if t.Failed() {
			t.Logf("the daemon's output:\n%s", lastBytes(b.out.String(), 8<<10))
		}
	})
	return b
}

// bootClient gives up on a request after 2 s: the hang this file is about
// must fail the test, not stall it.
var bootClient = &http.Client{Timeout: 2 * time.Second}

// do sends one request; code 0 when none came back.
func (b *booted) do(method, path, auth, body string) (int, string) {
	req, err := http.NewRequest(method, "http://"+b.http+path, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	res, err := bootClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	got, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(got)
}

// answering waits until /readyz answers past the start-up (whose answers,
// "starting: …" — the boards' wait, then recovering the journal — come
// first: see TestHaltWhileRecoveringAtBoot), and returns what.
func (b *booted) answering() (int, string) {
	b.t.Helper()
	var code int
	var body string
	daemontest.WaitFor(b.t, "HTTP to answer /readyz once recovered", 20*time.Second, func() bool {
		code, body = b.do(http.MethodGet, "/readyz", "", "")
		return code != 0 && !strings.Contains(body, "starting: ")
	})
	return code, body
}

type bootStatus struct {
	Ready     bool     `json:"ready"`
	Reasons   []string `json:"reasons"`
	Halted    bool     `json:"halted"`
	HaltWhy   string   `json:"halt_reason"`
	Actuators []struct {
		Name      string  `json:"name"`
		Commanded float64 `json:"commanded"`
	} `json:"actuators"`
}

func (b *booted) status() bootStatus {
	b.t.Helper()
	code, body := b.do(http.MethodGet, "/api/v1/status", "", "")
	var st bootStatus
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
		b.t.Fatalf("status: %d %s", code, body)
	}
	return st
}

// commanded is every actuator's commanded value, in one string.
func (s bootStatus) commanded() string {
	var parts []string
	for _, a := range s.Actuators {
		parts = append(parts, fmt.Sprintf("%s=%g", a.Name, a.Commanded))
	}
	return strings.Join(parts, " ")
}

// reasonAbout is the first not-ready reason containing part, or "".
func (s bootStatus) reasonAbout(part string) string {
	for _, r := range s.Reasons {
		if strings.Contains(r, part) {
			return r
		}
	}
	return ""
}

// haltOverHTTP halts as the dashboard's E-STOP does, and checks it latched.
func (b *booted) haltOverHTTP() {
	b.t.Helper()
	if code, body := b.do(http.MethodPost, "/api/v1/halt", "", `{"reason":"boot test"}`); code != 200 {
		b.t.Fatalf("halt: %d %s", code, body)
	}
	if st := b.status(); !st.Halted {
		b.t.Fatalf("not halted after POST /api/v1/halt: %+v", st)
	}
}

// reattached waits until no not-ready reason names part, and returns how
// long that took from since.
func (b *booted) reattached(part string, since time.Time) time.Duration {
	b.t.Helper()
	daemontest.WaitFor(b.t, part+" to reattach", 30*time.Second, func() bool {
		return b.status().reasonAbout(part) == ""
	})
	return time.Since(since)
}

// resetAndReady resets the halt with the operator token and waits for
// /readyz to say ready.
func (b *booted) resetAndReady() {
	b.t.Helper()
	// A reset is refused (NOT_READY) until what came back has reported
	// (a board's first readings): asked again until it is taken.
	var code int
	var body string
	daemontest.WaitFor(b.t, "a reset to be taken", 10*time.Second, func() bool {
		code, body = b.do(http.MethodPost, "/api/v1/reset", b.token, `{}`)
		if code != 200 && !strings.Contains(body, `"NOT_READY"`) {
			b.t.Fatalf("reset: %d %s", code, body)
		}
		return code == 200
	})
	daemontest.WaitFor(b.t, "ready after the reset", 10*time.Second, func() bool {
		code, _ := b.do(http.MethodGet, "/readyz", "", "")
		return code == 200
	})
}

// lines counts the log lines containing every one of parts.
func (b *booted) lines(parts ...string) int {
	n := 0
	for _, l := range strings.Split(b.out.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			n++
		}
	}
	return n
}

// operatorToken is the token writeDaemonConfig's configs reset with.
const operatorToken = "operator-secret-0123456789abcdef-daemon"

// TestBrokerUnreachableAtBoot: with the external broker's port closed, HTTP
// answers (it hung: the HTTP server started only after the transport's
// Start, which waited for the broker), /readyz and the status name the
// broker and the error, the banner says NOT READY, the log names them once
// and then with backoff (it said "connected but not yet subscribed"),
// systemd hears READY=1 and is fed, a halt latches; once a broker listens
// there, the supervisor connects on its own and stays halted until a reset.
func TestBrokerUnreachableAtBoot(t *testing.T) {
	needTool(t, "mosquitto", "mosquitto")
	dir := t.TempDir()
	port := testtool.FreePort(t) // closed: nothing listens there yet
	broker := fmt.Sprintf("tcp://127.0.0.1:%d", port)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))
	b := bootWith(t, writeDaemonConfig(t, dir, broker, httpAddr), httpAddr, operatorToken)

	code, body := b.answering()
	t.Logf("/readyz answered %v after the start: %d %q", time.Since(b.started).Round(time.Millisecond), code, body)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "input mqtt: not connected to the broker "+broker) {
		t.Fatalf("/readyz with the broker down: %d %q, want 503 naming %s", code, body, broker)
	}
	// The error follows at the next refresh (PollEvery) after the first
	// failed attempt.
	daemontest.WaitFor(t, "/readyz to give the error", 5*time.Second, func() bool {
		code, body = b.do(http.MethodGet, "/readyz", "", "")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "connection refused")
	})
	st := b.status()
	if st.Ready || !strings.Contains(st.reasonAbout("input mqtt"), "connection refused") {
		t.Fatalf("status with the broker down: %+v", st)
	}
	for _, path := range []string{"/metrics", "/", "/api/v1/dashboard", "/api/v1/events"} {
		if code, body := b.do(http.MethodGet, path, "", ""); code != 200 {
			t.Errorf("GET %s with the broker down: %d %.200s", path, code, body)
		}
	}
	daemontest.WaitFor(t, "READY=1 and the watchdog fed", 10*time.Second, func() bool {
		return b.sock.count("READY=1") == 1 && b.sock.count("WATCHDOG=1") >= 3
	})
	b.haltOverHTTP()
	var before string
	daemontest.WaitFor(t, "the halt to apply the safe policies (elbow 45, shoulder 10)", 10*time.Second, func() bool {
		before = b.status().commanded()
		return strings.Contains(before, "elbow=45") && strings.Contains(before, "shoulder=10")
	})
	// Retried every 500 ms, logged at the first failure and then after 5 s.
	time.Sleep(4 * time.Second)
	out := b.out.String()
	if strings.Contains(out, "connected but not yet subscribed") {
		t.Errorf("the misleading line is back:\n%s", out)
	}
	if !strings.Contains(out, "NOT READY: input mqtt: not connected to the broker "+broker) {
		t.Errorf("the banner does not say NOT READY with the broker:\n%s", out)
	}
	logged := b.lines("cannot connect to the broker", "broker="+broker, "connection refused")
	if logged < 1 || logged > 2 {
		t.Errorf("%d log lines naming the broker and the error in the first 4 s, want 1 or 2 (at the first failure, then with backoff)", logged)
	}

	mosqStart := time.Now()
	runMosquitto(t, dir, port, fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n", port))
	t.Logf("reattached %v after the broker was started", b.reattached("input mqtt", mosqStart).Round(time.Millisecond))
	st = b.status()
	if !st.Halted || st.Ready {
		t.Fatalf("not halted once the broker is back: %+v", st)
	}
	if b.lines("connected to the broker after failing", "broker="+broker) != 1 {
		t.Errorf("no one line saying the broker is back")
	}
	if after := st.commanded(); after != before {
		t.Errorf("something moved while the broker was down: %s, then %s", before, after)
	}
	b.resetAndReady()
}

// TestJournalUnwritableAtStart: a journal on a read-only or full file
// system stops `run` at once with exit status 3 (ExitJournalRefused), the
// journal's directory and the error in its last line, never READY=1; the
// unit's RestartPreventExitStatus= names that status, so systemd does not
// restart it in a loop.
func TestJournalUnwritableAtStart(t *testing.T) {
	unit, err := os.ReadFile("../../configs/saga-supervisor.service")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("\nRestartPreventExitStatus=%d\n", ExitJournalRefused); !strings.Contains(string(unit), want) {
		t.Errorf("the unit lacks %q: a journal that cannot be opened would be restarted every RestartSec", strings.TrimSpace(want))
	}
	for _, tc := range []struct {
		name, want string
		spoil      func(t *testing.T, mnt string)
	}{
		{"read-only", "read-only file system", func(t *testing.T, mnt string) {
			if out, err := exec.Command("mount", "-o", "remount,ro", mnt).CombinedOutput(); err != nil {
				t.Fatalf("remount ro: %v\n%s", err, out)
			}
		}},
		{"full", "no space left on device", func(t *testing.T, mnt string) {
			f, err := os.Create(filepath.Join(mnt, "filler"))
			if err != nil {
				t.Fatal(err)
			}
			f.Write(make([]byte, 2<<20)) // more than fits: ENOSPC
			f.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mnt := filepath.Join(dir, "sd") // the journal's own file system, as on a robot's SD card
			os.Mkdir(mnt, 0o700)
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
				t.Fatalf("mounting a small tmpfs for the journal (the test runs as root, as CI does): %v\n%s", err, out)
			}
			t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
			cfg := writeDaemonConfig(t, dir, fmt.Sprintf("tcp://127.0.0.1:%d", testtool.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t)))
			yaml, _ := os.ReadFile(cfg)
			os.WriteFile(cfg, []byte(strings.Replace(string(yaml), "  dir: "+filepath.Join(dir, "journal"), "  dir: "+filepath.Join(mnt, "journal"), 1)), 0o600)
			os.Mkdir(filepath.Join(mnt, "journal"), 0o700)
			tc.spoil(t, mnt)

			sock := newNotifySocket(t)
			cmd := exec.Command(binary, "run", "--config", cfg)
			cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock.path, "WATCHDOG_USEC=1000000")
			out := &syncBuffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			var werr error
			select {
			case werr = <-exited:
			case <-time.After(testtool.Slow(30 * time.Second)):
				cmd.Process.Kill()
				<-exited
				t.Fatalf("still running 30 s after the start on a %s journal:\n%s", tc.name, out.String())
			}
			time.Sleep(100 * time.Millisecond) // what it sent is read from the socket by now
			code := -1
			if ee, ok := werr.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			text := out.String()
			if code != ExitJournalRefused || !strings.Contains(text, filepath.Join(mnt, "journal")) || !strings.Contains(text, tc.want) {
				t.Errorf("on a %s journal: exit %d (%v), want %d with the journal's directory and %q:\n%s", tc.name, code, werr, ExitJournalRefused, tc.want, text)
			}
			if n := sock.count("READY=1"); n != 0 {
				t.Errorf("READY=1 sent %d times by a daemon without its journal", n)
			}
		})
	}
}

// TestBrokerRefusesAtBoot: a broker that is there but refuses the
// supervisor — its login, or its TLS certificate — is the broker missing
// too: HTTP answers, /readyz and the log give the broker and the error, a
// halt latches; once the broker is mended (restarted on the same port) the
// supervisor connects on its own and stays halted until a reset.
func TestBrokerRefusesAtBoot(t *testing.T) {
	needTool(t, "mosquitto", "mosquitto")
	for _, tc := range []struct {
		name string
		// setup writes the bad and the mended broker's configs for port
		// and returns them, with what the supervisor's config gets instead
		// of "  broker: embedded", and the error /readyz must give.
		setup func(t *testing.T, dir string, port int) (bad, good, broker, want string)
	}{
		{"login refused", func(t *testing.T, dir string, port int) (string, string, string, string) {
			os.WriteFile(filepath.Join(dir, "passwd"), nil, 0o600) // no one may log in
			bad := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous false\npassword_file %s\npersistence false\n", port, filepath.Join(dir, "passwd"))
			good := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n", port)
			return bad, good, fmt.Sprintf("tcp://127.0.0.1:%d", port), "not Authorized"
		}},
		{"TLS fails", func(t *testing.T, dir string, port int) (string, string, string, string) {
			trusted, other := filepath.Join(dir, "trusted"), filepath.Join(dir, "other")
			os.Mkdir(trusted, 0o700)
			os.Mkdir(other, 0o700)
			tc, tk, _ := writeSelfSigned(t, trusted)
			oc, ok, _ := writeSelfSigned(t, other) // a certificate the supervisor does not trust
			conf := "listener %d 127.0.0.1\ncertfile %s\nkeyfile %s\nallow_anonymous true\npersistence false\n"
			broker := fmt.Sprintf("ssl://127.0.0.1:%d\n  tls:\n    ca_file: %s", port, tc)
			return fmt.Sprintf(conf, port, oc, ok), fmt.Sprintf(conf, port, tc, tk), broker, "certificate signed by unknown authority"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			port := testtool.FreePort(t)
			bad, good, broker, want := tc.setup(t, dir, port)
			if os.Getuid() == 0 {
				// As root mosquitto would drop to a user who cannot read
				// the test's files.
				bad, good = bad+"user root\n", good+"user root\n"
			}
			badPath, goodPath := filepath.Join(dir, "bad.conf"), filepath.Join(dir, "good.conf")
			os.WriteFile(badPath, []byte(bad), 0o600)
			os.WriteFile(goodPath, []byte(good), 0o600)
			_, mosq := runMosquittoConf(t, badPath, port)

			httpAddr := fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))
			cfg := writeDaemonConfig(t, dir, "tcp://127.0.0.1:1", httpAddr)
			yaml, _ := os.ReadFile(cfg)
			os.WriteFile(cfg, []byte(strings.Replace(string(yaml), "  broker: tcp://127.0.0.1:1\n", "  broker: "+broker+"\n", 1)), 0o600)
			url, _, _ := strings.Cut(broker, "\n")
			b := bootWith(t, cfg, httpAddr, operatorToken)

			b.answering()
			var body string
			daemontest.WaitFor(t, "/readyz to give the broker and the error", 10*time.Second, func() bool {
				var code int
				code, body = b.do(http.MethodGet, "/readyz", "", "")
				return code == http.StatusServiceUnavailable && strings.Contains(body, "not connected to the broker "+url) && strings.Contains(body, want)
			})
			t.Logf("/readyz: %q", body)
			b.haltOverHTTP()
			daemontest.WaitFor(t, "READY=1 and the watchdog fed", 10*time.Second, func() bool {
				return b.sock.count("READY=1") == 1 && b.sock.count("WATCHDOG=1") >= 3
			})
			if n := b.lines("cannot connect to the broker", "broker="+url, want); n < 1 || n > 2 {
				t.Errorf("%d log lines naming the broker and %q, want 1 or 2 (at the first failure, then with backoff)", n, want)
			}

			mosq.Process.Kill()
			mosq.Wait()
			mended := time.Now()
			runMosquittoConf(t, goodPath, port)
			t.Logf("reattached %v after the mended broker was started", b.reattached("input mqtt", mended).Round(time.Millisecond))
			if st := b.status(); !st.Halted {
				t.Fatalf("not halted once the broker is mended: %+v", st)
			}
			b.resetAndReady()
		})
	}
}

// TestBoardMissingAtBoot: a microcontroller board whose serial port is
// absent (the USB cable out), or present but silent (the board not
// running), leaves the daemon up: HTTP answers, /readyz names the board
// and why, a halt latches; once the port and the board are there, the
// link comes up on its own and the daemon stays halted until a reset.
func TestBoardMissingAtBoot(t *testing.T) {
	socat := needTool(t, "socat", "socat")
	for _, tc := range []struct {
		name       string
		portAtBoot bool   // the cable is there at the start, the board silent
		want       string // in /readyz while it is missing
	}{
		{"port absent", false, "cannot open the port"},
		{"board silent", true, "input mcu board: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			host, board := filepath.Join(dir, "ttyHost"), filepath.Join(dir, "ttyMCU")
			cable := func() {
				c := exec.Command(socat, "pty,raw,echo=0,link="+host, "pty,raw,echo=0,link="+board)
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Process.Kill(); c.Wait() })
				daemontest.WaitFor(t, "socat's ptys", 10*time.Second, func() bool {
					_, e1 := os.Stat(host)
					_, e2 := os.Stat(board)
					return e1 == nil && e2 == nil
				})
			}
			if tc.portAtBoot {
				cable()
			}
			cfg, httpAddr := boardRobotConfig(t, dir, host)
			b := bootWith(t, cfg, httpAddr, operatorToken)

			b.answering()
			var body string
			daemontest.WaitFor(t, "/readyz to name the board", 10*time.Second, func() bool {
				var code int
				code, body = b.do(http.MethodGet, "/readyz", "", "")
				return code == http.StatusServiceUnavailable && strings.Contains(body, "input mcu board") && strings.Contains(body, tc.want)
			})
			t.Logf("/readyz: %q", body)
			b.haltOverHTTP()
			daemontest.WaitFor(t, "READY=1 and the watchdog fed", 10*time.Second, func() bool {
				return b.sock.count("READY=1") == 1 && b.sock.count("WATCHDOG=1") >= 3
			})
			var before string
			daemontest.WaitFor(t, "the halt to apply the safe policies", 10*time.Second, func() bool {
				before = b.status().commanded()
				return strings.Contains(before, "elbow=45")
			})

			back := time.Now()
			if !tc.portAtBoot {
				cable()
			}
			mcu := exec.Command(binary, "sim-mcu", "--port", board, "--channels", "45", "--supplies", "12", "--control", "127.0.0.1:0")
			mcuOut := &syncBuffer{}
			mcu.Stdout, mcu.Stderr = mcuOut, mcuOut
			if err := mcu.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mcu.Process.Kill(); mcu.Wait() })
			t.Logf("reattached %v after the board came back", b.reattached("input mcu board", back).Round(time.Millisecond))
			st := b.status()
			if !st.Halted {
				t.Fatalf("not halted once the board is back: %+v", st)
			}
			if after := st.commanded(); after != before {
				t.Errorf("something moved while the board was missing: %s, then %s", before, after)
			}
			if n := b.lines("serial port not opened", "port="+host); !tc.portAtBoot && (n < 1 || n > 2) {
				t.Errorf("%d lines saying the port %s is not there, want 1 or 2 (at the first failure, then with backoff)", n, host)
			}
			b.resetAndReady()
		})
	}
}

// pwmChipConfig is a robot with one sim servo and one servo on a kernel
// PWM channel whose sysfs tree is under a directory of the test's.
const pwmChipConfig = `device: pwm
journal:
  dir: %s
  durability: every-step
mqtt:
  broker: embedded
  listen: 127.0.0.1:%d
  auth: {anonymous: true}
http:
  listen: %s
  reset_token_file: %s
sim:
  world: ""
actuators:
  base:
    kind: servo
    driver: sim
    min: -90
    max: 90
    initial: 0
    safe: hold
  wrist:
    kind: servo
    driver: gpio
    gpio: {pwm: sysfs, chip: 0, channel: 0, sysfs_root: %s, min_pulse: 500us, max_pulse: 2500us, min_angle: -90, max_angle: 90}
    min: -90
    max: 90
    initial: 0
    safe: detach
`

// TestPWMChipMissingAtBoot: with a servo's PWM chip not there (the overlay
// not loaded), run stayed down (exit 1, restarted by systemd in a loop).
// Now HTTP answers, /readyz names the actuator, the chip's path and the
// error, a halt latches, the log names it once and then with backoff;
// once the chip appears the servo is attached on its own, nothing was
// written to it meanwhile, and the halt stays until a reset.
//
// The chip is a directory tree shaped as the kernel's sysfs PWM class
// (gpio.SysfsConfig.Root is the driver's own knob for that): the
// supervisor's files, driver and retries are the real ones, the kernel
// is not.
func TestPWMChipMissingAtBoot(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "pwm")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte(operatorToken+"\n"), 0o600)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))
	cfg := filepath.Join(dir, "robot.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(pwmChipConfig, filepath.Join(dir, "journal"), testtool.FreePort(t), httpAddr, token, root)), 0o600)
	if out, code := run(t, "check-config", cfg); code != 0 {
		t.Fatalf("test config invalid:\n%s", out)
	}
	b := bootWith(t, cfg, httpAddr, operatorToken)

	b.answering()
	chip := filepath.Join(root, "pwmchip0")
	var body string
	daemontest.WaitFor(t, "/readyz to name the servo and its chip", 10*time.Second, func() bool {
		var code int
		code, body = b.do(http.MethodGet, "/readyz", "", "")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "input actuator wrist") && strings.Contains(body, chip) &&
			strings.Contains(body, "no such file or directory")
	})
	t.Logf("/readyz: %q", body)
	if b.cmd.ProcessState != nil {
		t.Fatalf("run exited: %v", b.cmd.ProcessState)
	}
	b.haltOverHTTP()
	daemontest.WaitFor(t, "READY=1 and the watchdog fed", 10*time.Second, func() bool {
		return b.sock.count("READY=1") == 1 && b.sock.count("WATCHDOG=1") >= 3
	})

	// The chip appears whole, its channel exported (as udev leaves it).
	back := time.Now()
	stage := filepath.Join(dir, "stage")
	for f, v := range map[string]string{"npwm": "2\n", "export": "", "unexport": "", "pwm0/period": "0\n", "pwm0/duty_cycle": "0\n", "pwm0/enable": "0\n"} {
		p := filepath.Join(stage, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(stage, chip); err != nil {
		t.Fatal(err)
	}
	t.Logf("reattached %v after the chip appeared", b.reattached("input actuator wrist", back).Round(time.Millisecond))
	if st := b.status(); !st.Halted {
		t.Fatalf("not halted once the chip is back: %+v", st)
	}
	for _, f := range []string{"duty_cycle", "enable"} {
		if got, _ := os.ReadFile(filepath.Join(chip, "pwm0", f)); string(got) != "0\n" {
			t.Errorf("pwm0/%s is %q once attached, want it untouched (0): the servo moved", f, got)
		}
	}
	if n := b.lines("part not opened; retrying", "actuator wrist"); n < 1 || n > 2 {
		t.Errorf("%d lines saying the servo's chip is not there, want 1 or 2 (at the first failure, then with backoff)", n)
	}
	if n := b.lines("part opened; attached", "actuator wrist"); n != 1 {
		t.Errorf("%d lines saying the servo was attached, want 1", n)
	}
	b.resetAndReady()
}

// TestEStopUnreadableAtBoot: an e-stop pin that cannot be read (here: a
// machine without GPIO) leaves the daemon up, halted and not ready naming
// the pin; the pin is retried (it was never), logged at the first failure
// and then with backoff, not at every attempt. Its coming back is tested
// with a fake pin in drivers/gpio (TestEStopRetriedUntilReadable): periph
// finds no GPIO here to bring back.
func TestEStopUnreadableAtBoot(t *testing.T) {
	if _, err := os.Stat("/dev/gpiochip0"); err == nil {
		t.Skip("this machine has GPIO: GPIO27 may be readable")
	}
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte(operatorToken+"\n"), 0o600)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))
	cfg := filepath.Join(dir, "robot.yaml")
	text := fmt.Sprintf(pwmChipConfig, filepath.Join(dir, "journal"), testtool.FreePort(t), httpAddr, token, dir)
	text = text[:strings.Index(text, "  wrist:")] + "estop:\n  driver: gpio\n  pin: GPIO27\n  active_high: true\n  pull: up\n"
	os.WriteFile(cfg, []byte(text), 0o600)
	if out, code := run(t, "check-config", cfg); code != 0 {
		t.Fatalf("test config invalid:\n%s", out)
	}
	b := bootWith(t, cfg, httpAddr, operatorToken)
	b.answering()
	var body string
	daemontest.WaitFor(t, "/readyz to name the e-stop", 10*time.Second, func() bool {
		var code int
		code, body = b.do(http.MethodGet, "/readyz", "", "")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "input estop: ") && strings.Contains(body, "GPIO27")
	})
	t.Logf("/readyz: %q", body)
	if st := b.status(); !st.Halted {
		t.Fatalf("not halted with the e-stop unreadable: %+v", st)
	}
	// Retried every second, logged at the first failure and then after
	// 5 s with the attempts since: not at every retry.
	if n := b.lines("level=ERROR", "msg=e-stop", "pin=GPIO27", "pin not found"); n != 1 {
		t.Errorf("%d lines of the first failure, want 1", n)
	}
	daemontest.WaitFor(t, "the retry's line after 5 s", testtool.Slow(20*time.Second), func() bool {
		return b.lines("e-stop pin not readable; retrying", "pin=GPIO27", "attempts=") >= 1
	})
	if n := b.lines("e-stop pin not readable; retrying", "pin=GPIO27", "attempts=5"); n != 1 {
		t.Errorf("%d retry lines saying 5 attempts, want 1 (retried every second, logged after 5 s)", n)
	}
	if b.cmd.ProcessState != nil {
		t.Fatalf("run exited: %v", b.cmd.ProcessState)
	}
	if st := b.status(); !st.Halted || st.reasonAbout("input estop") == "" {
		t.Fatalf("the e-stop no longer halts or names itself: %+v", st)
	}
}
