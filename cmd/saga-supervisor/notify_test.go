package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// notifySocket is a $NOTIFY_SOCKET, as systemd's: it keeps every state
// line sent to it.
type notifySocket struct {
	path string
	conn *net.UnixConn
	mu   sync.Mutex
	got  []string
}

func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifySocket{path: path, conn: conn}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.got = append(n.got, strings.Split(strings.TrimSpace(string(buf[:k])), "\n")...)
			n.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return n
}

func (n *notifySocket) count(line string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, l := range n.got {
		if l == line {
			c++
		}
	}
	return c
}

// daemonConfig is the embedded default on free ports and temporary paths.
func daemonConfig(t *testing.T, httpListen string) string {
	t.Helper()
	return daemonConfigListen(t, httpListen, fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t)))
}

// daemonConfigListen is daemonConfig with the embedded broker listening on
// mqttListen.
func daemonConfigListen(t *testing.T, httpListen, mqttListen string) string {
	t.Helper()
	dir := t.TempDir()
	text := strings.NewReplacer(
		"  dir: ./saga-data/journal", "  dir: "+filepath.Join(dir, "journal"),
		"  world: ./saga-data/world", "  world: "+filepath.Join(dir, "world"),
		"  listen: 127.0.0.1:1883", "  listen: "+mqttListen,
		"  listen: 127.0.0.1:8080", "  listen: "+httpListen,
		"    password_file: ./saga-data/mqtt/passwd", "    password_file: "+filepath.Join(dir, "mqtt", "passwd"),
		"    credentials_dir: ./saga-data/mqtt/credentials", "    credentials_dir: "+filepath.Join(dir, "mqtt", "credentials"),
		"  reset_token_file: ./saga-data/operator-token", "  reset_token_file: "+filepath.Join(dir, "operator-token"),
	).Replace(string(config.DefaultYAML))
	path := filepath.Join(dir, "arm.yaml")
	os.WriteFile(path, []byte(text), 0o600)
	return path
}

// TestSystemdNotify runs the binary as systemd would, with a notify
// socket and a watchdog: it says READY once serving, feeds the watchdog
// while it makes progress (Supervisor.Alive: a healthy idle daemon is
// alive), and says STOPPING on SIGTERM.
func TestSystemdNotify(t *testing.T) {
	sock := newNotifySocket(t)
	env := append(os.Environ(), "NOTIFY_SOCKET="+sock.path, "WATCHDOG_USEC=400000")
	cmd := exec.Command(binary, "run", "--config", daemonConfig(t, fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))))
	cmd.Env = env
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	daemontest.WaitFor(t, "READY=1 and then two watchdog pings", 20*time.Second, func() bool {
		return sock.count("READY=1") == 1 && sock.count("WATCHDOG=1") >= 2
	})
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, out.String())
	}
	if sock.count("STOPPING=1") != 1 {
		t.Errorf("no STOPPING=1 on SIGTERM: %q", sock.got)
	}

}
