//go:build !saga_lean

package hil

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// proc is a child process whose output is kept for failure messages.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{} // closed when the process has exited and been reaped
	// quiet: its output is kept elsewhere (the soak's evidence), so a
	// failed test does not log it.
	quiet bool
}

// syncBuffer is an output buffer written by a child process's pipes and
// read by the test. It keeps the first bufHead bytes (what a process
// prints as it starts) and the last bufTail: a broker logging every
// message for a long soak would otherwise fill the memory.
type syncBuffer struct {
	mu      sync.Mutex
	head    []byte
	tail    []byte
	dropped int64
}

const (
	bufHead = 64 << 10
	bufTail = 8 << 20
)

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	if room := bufHead - len(s.head); room > 0 {
		k := min(room, len(p))
		s.head = append(s.head, p[:k]...)
		p = p[k:]
	}
	s.tail = append(s.tail, p...)
	if over := len(s.tail) - bufTail; over > bufTail/4 {
		// Cut in batches, so that appending stays amortised O(1).
		s.dropped += int64(over)
		s.tail = append(s.tail[:0], s.tail[over:]...)
	}
	return n, nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped == 0 {
		return string(s.head) + string(s.tail)
	}
	return fmt.Sprintf("%s\n…[%d bytes not kept]…\n%s", s.head, s.dropped, s.tail)
}

// startProc starts argv in dir ("" for the test's own) and kills it when
// the test ends. Its output is logged if the test failed.
func startProc(t *testing.T, name, dir string, env []string, stdin io.Reader, argv ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Dir = dir
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = stdin, p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill(syscall.SIGKILL)
		if t.Failed() && !p.quiet {
			t.Logf("--- %s output (last 6000 bytes):\n%s", name, tail(p.out.String(), 6000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends sig and waits for the process to end (SIGKILL after 10 s).
func (p *proc) kill(sig syscall.Signal) {
	if p.exited() {
		return
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.t.Logf("%s did not end on %v within 10s: killing it", p.name, sig)
		p.cmd.Process.Kill()
		<-p.done
	}
}

// waitOutput waits until the process has printed a line starting with
// prefix and returns the rest of that line.
func (p *proc) waitOutput(prefix string, d time.Duration) string {
	p.t.Helper()
	var rest string
	waitFor(p.t, fmt.Sprintf("%s to print %q", p.name, prefix), d, func() bool {
		for _, line := range strings.Split(p.out.String(), "\n") {
			if r, ok := strings.CutPrefix(line, prefix); ok {
				rest = r
				return true
			}
		}
		if p.exited() {
			p.t.Fatalf("%s exited (%v) before printing %q:\n%s", p.name, p.cmd.ProcessState, prefix, p.out.String())
		}
		return false
	})
	return strings.TrimSpace(rest)
}

// waitFor polls cond every 10 ms until it holds, failing the test after d.
// d is a hang guard, never a speed requirement.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			fatalf(t, "timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// needTool finds a program the sim rig needs. Missing, it fails the test
// under CI (which installs it) and skips it elsewhere.
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s not found and CI is set: CI must install %s (apt-get install %s)", name, pkg, pkg)
	}
	t.Skipf("%s not found (apt-get install %s); CI is unset, so this is a skip, not a failure", name, pkg)
	return ""
}

// mosquitto is a broker of the sim rig's own, on a fixed port so that it
// can be stopped and started again at the same address.
type mosquitto struct {
	t    *testing.T
	path string
	conf string
	addr string
	p    *proc
}

func startMosquitto(t *testing.T, dir string) *mosquitto {
	t.Helper()
	m := &mosquitto{t: t, path: needTool(t, "mosquitto", "mosquitto"), conf: dir + "/mosquitto.conf"}
	port := testtool.FreePort(t)
	m.addr = fmt.Sprintf("127.0.0.1:%d", port)
	conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\nset_tcp_nodelay true\nlog_type all\n", port)
	if os.Getuid() == 0 {
		conf += "user root\n"
	}
	if err := os.WriteFile(m.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	m.start()
	return m
}

// URL is the broker's URL.
func (m *mosquitto) URL() string { return "tcp://" + m.addr }

func (m *mosquitto) start() {
	m.t.Helper()
	m.p = startProc(m.t, "mosquitto", "", nil, nil, m.path, "-c", m.conf)
	waitFor(m.t, "mosquitto to listen on "+m.addr, 10*time.Second, func() bool {
		if m.p.exited() {
			m.t.Fatalf("mosquitto exited:\n%s", m.p.out.String())
		}
		c, err := net.Dial("tcp", m.addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// stop ends the broker gracefully (SIGTERM: mosquitto publishes every
// connected client's will and closes the connections).
func (m *mosquitto) stop() { m.p.kill(syscall.SIGTERM) }

// crash kills the broker (SIGKILL: no wills, connections reset).
func (m *mosquitto) crash() { m.p.kill(syscall.SIGKILL) }

// failures holds what each failed test's harness check said, to be said
// again at the very end of its output (sayFailureLast): the processes'
// logs are printed after the failure, and CI shows the output's tail.
var failures sync.Map // *testing.T → string

// fatalf is t.Fatalf, remembered for sayFailureLast.
func fatalf(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	failures.Store(t, msg)
	t.Fatal(msg)
}

// sayFailureLast registers, before anything else of the test's does, the
// cleanup that runs last: it repeats the failure fatalf recorded.
func sayFailureLast(t *testing.T) {
	t.Cleanup(func() {
		m, ok := failures.LoadAndDelete(t)
		if ok && t.Failed() {
			t.Logf("FAILED, said again below the logs: %s", m)
		}
	})
}
