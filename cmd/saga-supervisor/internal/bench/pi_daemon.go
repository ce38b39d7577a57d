package bench

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/access"
)

// piDaemon is a daemon bench pi measures: `run` of a binary, as a process
// of its own in its own working directory, on a configuration the bench
// wrote, started through the launcher (pi-exec) so that it runs in its
// cgroup from its first instruction and, with a delay, with its fsyncs held.
type piDaemon struct {
	cmd     *exec.Cmd
	work    string
	mqtt    string // tcp://127.0.0.1:PORT
	http    string // 127.0.0.1:PORT
	topics  mqtt.Topics
	token   string // the operator's reset token
	secrets map[string]string
	stderr  *lockedBuffer
	exited  chan struct{}
	started time.Time
	ready   time.Time // READY=1 on the notify socket
	notify  *net.UnixConn
	cg      *cpuCgroup
	holder  *syncHolder
}

// Agents of bench pi, each with its own servo but the halter (which needs
// none) and base, the servo of the restart's journal.
const (
	piFlood   = "flood"
	piHalter  = "halter"
	piOther   = "other"
	piStepper = "stepper"
	piExpiry  = "expiry"
	piBase    = "base"
)

var piServos = []string{piFlood, piOther, piStepper, piExpiry, piBase}

// piConfig is the configuration of a daemon of bench pi: the defaults —
// lanes, leases' minimum, checkpoints — but for what a bench needs: sim
// servos that reach any angle at once, an in-memory world, every-step
// durability, room for the flood's sagas, the embedded broker locked (each
// agent under agents.allow, logging in with the password the daemon
// writes) and HTTP, both on free loopback ports, and the operator's reset
// token in a file. journal is the journal's directory.
func piConfig(device, work, journal string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "device: %s\n", device)
	fmt.Fprintf(&b, "journal:\n  dir: %s\n  durability: every-step\n  retention:\n    max_size: 4GiB\n", strconv.Quote(journal))
	fmt.Fprintf(&b, "unwind:\n  max_saga_commands: 100000\n")
	fmt.Fprintf(&b, "leases:\n  default_ttl: 60s\n  max_ttl: 60s\n")
	fmt.Fprintf(&b, "agents:\n  allow:\n")
	for _, name := range piServos[:len(piServos)-1] {
		fmt.Fprintf(&b, "    %s: {actuators: [%s]}\n", name, name)
	}
	fmt.Fprintf(&b, "    %s: {actuators: [], ops: []}\n", piHalter)
	fmt.Fprintf(&b, "mqtt:\n  listen: 127.0.0.1:0\n  auth:\n    password_file: %s\n    credentials_dir: %s\n",
		strconv.Quote(filepath.Join(work, "passwd")), strconv.Quote(filepath.Join(work, "credentials")))
	fmt.Fprintf(&b, "http:\n  listen: 127.0.0.1:0\n  reset_token_file: %s\n", strconv.Quote(filepath.Join(work, "token")))
	fmt.Fprintf(&b, "sim:\n  world: \"\"\n")
	fmt.Fprintf(&b, "actuators:\n")
	for _, name := range piServos {
		fmt.Fprintf(&b, "  %s: {kind: servo, driver: sim, sim: {slew: 0}, min: -90, max: 90, timeout: %s}\n", name, driverTimeout)
	}
	return b.String()
}

// piStart is how a daemon is started: its binary, its cgroup (nil: none)
// and whether its fsyncs are held (delay not zero).
type piStart struct {
	bin, launcher string
	work, journal string
	cg            *cpuCgroup
	delay         fsyncDelay
	env           []string // added to the daemon's environment
}

// startPiDaemon writes the configuration and the token into s.work,
// starts the daemon through the launcher and waits until it has said
// READY=1 and printed its addresses.
func startPiDaemon(s piStart) (_ *piDaemon, err error) {
	var rnd [6]byte
	var tok [32]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	device := "pi-" + hex.EncodeToString(rnd[:])
	d := &piDaemon{work: s.work, topics: mqtt.Topics{Prefix: "saga/v1", Device: device}, token: hex.EncodeToString(tok[:]),
		stderr: &lockedBuffer{}, exited: make(chan struct{}), cg: s.cg}
	if err := os.WriteFile(filepath.Join(s.work, "token"), []byte(d.token+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(s.work, "config.yaml"), []byte(piConfig(device, s.work, s.journal)), 0o600); err != nil {
		return nil, err
	}

	// READY=1 comes on a notify socket, as systemd would take it.
	sockPath := filepath.Join(os.TempDir(), fmt.Sprintf("saga-pi-%d-%s.sock", os.Getpid(), hex.EncodeToString(rnd[:3])))
	d.notify, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("notify socket: %w", err)
	}
	defer os.Remove(sockPath)
	readyCh := make(chan time.Time, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := d.notify.Read(buf)
			if err != nil {
				return
			}
			at := time.Now()
			for _, l := range strings.Split(string(buf[:n]), "\n") {
				if l == "READY=1" {
					select {
					case readyCh <- at:
					default:
					}
				}
			}
		}
	}()

	procs := ""
	if s.cg != nil {
		procs = s.cg.procs()
	}
	var parentSock, childSock *os.File
	if !s.delay.zero() {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		parentSock, childSock = os.NewFile(uintptr(fds[0]), "listener socket"), os.NewFile(uintptr(fds[1]), "listener socket")
		defer parentSock.Close()
	}
	d.cmd = exec.Command(s.launcher, launchArgs(procs, !s.delay.zero(), []string{s.bin, "run", "--config", "config.yaml", "--log-level", "warn"})...)
	d.cmd.Dir = s.work
	d.cmd.Stderr = d.stderr
	d.cmd.Env = append(append(os.Environ(), "NOTIFY_SOCKET="+sockPath), s.env...)
	if childSock != nil {
		d.cmd.ExtraFiles = []*os.File{childSock}
	}
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	d.started = time.Now()
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { d.cmd.Wait(); close(d.exited) }()
	fail := func(err error) (*piDaemon, error) {
		d.stop()
		return nil, fmt.Errorf("%w; its log:\n%s", err, d.stderr.String())
	}
	if childSock != nil {
		childSock.Close()
		fd, err := receiveListener(parentSock, 30*time.Second)
		if err != nil {
			return fail(err)
		}
		d.holder = holdSyncs(fd, s.delay)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	deadline := time.After(5 * time.Minute) // a million records at a quarter of a core
	for d.mqtt == "" || d.http == "" || d.ready.IsZero() {
		select {
		case line, ok := <-lines:
			if !ok {
				if d.mqtt == "" || d.http == "" {
					return fail(errors.New("the daemon ended before printing its addresses"))
				}
				lines = nil
				continue
			}
			f := strings.Fields(line)
			switch {
			case len(f) >= 2 && f[0] == "MQTT" && strings.Contains(f[1], "://"):
				d.mqtt = f[1]
			case len(f) >= 2 && f[0] == "HTTP" && strings.HasPrefix(f[1], "http://"):
				d.http = strings.TrimPrefix(f[1], "http://")
			}
		case d.ready = <-readyCh:
		case <-d.exited:
			return fail(errors.New("the daemon ended before it was ready"))
		case <-deadline:
			return fail(errors.New("not ready within 5 minutes"))
		}
	}
	if lines != nil {
		go func() {
			for range lines { // the rest of its output, unread otherwise
			}
		}()
	}
	if s.cg != nil {
		if err := s.cg.holds(d.cmd.Process.Pid); err != nil {
			return fail(err)
		}
	}
	d.secrets = map[string]string{}
	for _, name := range append(piServos[:len(piServos)-1:len(piServos)-1], piHalter) {
		if d.secrets[name], err = access.ReadSecret(filepath.Join(s.work, "credentials", name)); err != nil {
			return fail(fmt.Errorf("agent %s's password: %w", name, err))
		}
	}
	return d, nil
}

func (d *piDaemon) pid() int { return d.cmd.Process.Pid }

// login is how agent name logs in to the daemon's broker.
func (d *piDaemon) login(name string) login {
	return login{clientID: name, user: name, password: d.secrets[name]}
}

// agent connects agent name and subscribes its reply topic.
func (d *piDaemon) agent(name string) (*agent, error) {
	return newAgent(d.mqtt, d.login(name), d.topics, name)
}

// cpuTime is the CPU time the daemon has used (user and system), from
// /proc/PID/stat.
func (d *piDaemon) cpuTime() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.pid()))
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	// After the command: state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime (clock ticks, 100 a second).
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// reset clears the halt over HTTP with the operator's token.
func (d *piDaemon) reset() error {
	for try := 0; ; try++ {
		req, err := http.NewRequest(http.MethodPost, "http://"+d.http+"/api/v1/reset", strings.NewReader("{}"))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+d.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("reset: %w", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		// Not ready yet (the halt is still being applied): again.
		if try >= 200 || resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("reset: %s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metric reads one unlabelled series of the daemon's /metrics: a
// counter's value, or a histogram's _sum or _count.
func (d *piDaemon) metric(name string) (float64, error) {
	resp, err := http.Get("http://" + d.http + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	total, found := 0.0, false
	for sc.Scan() {
		line := sc.Text()
		series, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexByte(series, '{'); i >= 0 {
			series = series[:i]
		}
		if series == name {
			v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
			if err == nil {
				total, found = total+v, true
			}
		}
	}
	if !found {
		return 0, fmt.Errorf("no %s in /metrics", name)
	}
	return total, nil
}

// stop ends the daemon with SIGTERM (its orderly stop), or kills it after
// 60 s; then stops holding fsyncs. The cgroup is its owner's to remove.
func (d *piDaemon) stop() error {
	defer func() {
		if d.notify != nil {
			d.notify.Close()
		}
	}()
	var err error
	select {
	case <-d.exited:
	default:
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(60 * time.Second):
			d.cmd.Process.Kill()
			<-d.exited
			err = errors.New("the daemon did not stop within 60 s of SIGTERM: killed")
		}
	}
	if d.holder != nil {
		d.holder.close()
		if herr := d.holder.err(); herr != nil {
			err = errors.Join(err, herr)
		}
	}
	if st := d.cmd.ProcessState; err == nil && st != nil && !st.Success() {
		err = fmt.Errorf("the daemon exited %v; its log:\n%s", st, d.stderr.String())
	}
	return err
}
