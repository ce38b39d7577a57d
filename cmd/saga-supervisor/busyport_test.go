package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A busy HTTP port stops `run` with a non-zero exit and the reason, before
// it is ready: it never tells systemd READY. It printed its banner, told
// systemd READY and exited 0 (so Restart=on-failure never brought it
// back).
func TestRunExitsOnBusyHTTPPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	runOnBusyPort(t, daemonConfig(t, busy.Addr().String()))
}

// So does a busy port for the embedded broker (mqtt.listen).
func TestRunExitsOnBusyBrokerPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	runOnBusyPort(t, daemonConfigListen(t, fmt.Sprintf("127.0.0.1:%d", freePort(t)), busy.Addr().String()))
}

func runOnBusyPort(t *testing.T, config string) {
	t.Helper()
	sock := newNotifySocket(t)
	cmd := exec.Command(binary, "run", "--config", config)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock.path)
	b, err := cmd.CombinedOutput()
	out := string(b)
	time.Sleep(100 * time.Millisecond) // what it sent is read from the socket by now
	if err == nil || !strings.Contains(out, "address already in use") || strings.Contains(out, "running on") || sock.count("READY=1") != 0 {
		t.Fatalf("run on a busy port: %v, READY sent %d times\n%s", err, sock.count("READY=1"), out)
	}
}
