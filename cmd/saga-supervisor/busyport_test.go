package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
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

// TestBusyBrokerPortWaits: the embedded broker's port held by another
// process (Debian's mosquitto on 1883) used to stop `run` (exit 1, and
// systemd restarting it in a loop). Now it stays up: HTTP answers, /readyz
// names the address "in use by another process", systemd hears READY=1
// and is fed, a halt latches, and the listen is retried with backoff
// (one log line, not one per attempt). Neither the transport nor the MQTT
// devices dial that address meanwhile — our logins never go to a
// stranger's broker — and once the port is free the broker listens, MQTT
// connects, and the halt stays.
func TestBusyBrokerPortWaits(t *testing.T) {
	stranger, dialled := daemontest.Stranger(t)
	addr := stranger.Addr().String()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))
	cfg := daemonConfigListen(t, httpAddr, addr)
	text, _ := os.ReadFile(cfg)
	// An MQTT-attached actuator too: its link dials the embedded broker's
	// address while the config loads.
	withPump := strings.Replace(string(text), "\nactuators:\n", "\nactuators:\n  pump:\n    kind: setpoint\n    driver: mqtt\n"+
		"    mqtt: {set_topic: p/set, ack_topic: p/ack, state_topic: p/state}\n    min: 0\n    max: 1\n", 1)
	if withPump == string(text) {
		t.Fatal("no actuators section in the default config to add the pump to")
	}
	os.WriteFile(cfg, []byte(withPump), 0o600)
	if out, code := run(t, "check-config", cfg); code != 0 {
		t.Fatalf("test config invalid:\n%s", out)
	}
	b := bootWith(t, cfg, httpAddr, "")

	code, body := b.answering()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "input mqtt broker: "+addr+" in use by another process") {
		t.Fatalf("/readyz with the broker's port taken: %d %q, want 503 naming %s in use by another process", code, body, addr)
	}
	t.Logf("/readyz: %q", body)
	daemontest.WaitFor(t, "READY=1 and the watchdog fed", 10*time.Second, func() bool {
		return b.sock.count("READY=1") == 1 && b.sock.count("WATCHDOG=1") >= 3
	})
	b.haltOverHTTP()
	time.Sleep(3 * time.Second) // the transport and the devices' link retry every 0.5-2 s: they would have dialled by now
	if n := dialled.Load(); n != 0 {
		t.Errorf("%d connections to the other process's port: the supervisor dialled a stranger's broker", n)
	}
	if b.cmd.ProcessState != nil {
		t.Fatalf("run exited: %v", b.cmd.ProcessState)
	}
	if n := b.lines("embedded broker: its address is", "in use by another process", "addr="+addr); n < 1 || n > 2 {
		t.Errorf("%d log lines naming the address in use in the first seconds, want 1 or 2 (at the first failure, then with backoff)", n)
	}

	stranger.Close()
	freed := time.Now()
	t.Logf("MQTT up %v after the port was freed", b.reattached("input mqtt", freed).Round(time.Millisecond))
	t.Logf("the pump's link up %v after the port was freed", b.reattached("actuator pump: link lost", freed).Round(time.Millisecond))
	if st := b.status(); !st.Halted {
		t.Fatalf("not halted once the broker listens: %+v", st)
	}
	if b.lines("embedded broker: listening on its address after it was in use", "addr="+addr) != 1 {
		t.Error("no one line saying the broker listens now")
	}
	if b.lines("mqtt connected") < 1 {
		t.Error("the transport did not connect once the broker listened")
	}
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
