package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/latency"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// These tests run the real binary against Debian's mosquitto, drive sagas
// over MQTT, kill controllers and kill -9 the supervisor itself.

// startMosquitto runs a real broker on a free loopback port.
func startMosquitto(t *testing.T) string {
	t.Helper()
	port := testtool.FreePort(t)
	return runMosquitto(t, t.TempDir(), port, fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\nset_tcp_nodelay true\n", port))
}

// runMosquitto starts Debian's mosquitto on conf (written into dir) and
// waits until it listens on port.
func runMosquitto(t *testing.T, dir string, port int, conf string) string {
	t.Helper()
	path := filepath.Join(dir, "mosquitto.conf")
	os.WriteFile(path, []byte(conf), 0o600)
	url, _ := runMosquittoConf(t, path, port)
	return url
}

// runMosquittoConf starts Debian's mosquitto on the conf file at path and
// waits until it listens on port; it returns the broker's URL and process.
func runMosquittoConf(t *testing.T, path string, port int) (string, *exec.Cmd) {
	t.Helper()
	mosq := needTool(t, "mosquitto", "mosquitto")
	cmd := exec.Command(mosq, "-c", path)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	daemontest.WaitFor(t, "mosquitto to listen", 5*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mosquitto's output (last 4 KiB):\n%s", lastBytes(out.String(), 4<<10))
		}
	})
	return "tcp://" + addr, cmd
}

// daemonProc is the real binary running `run --config`.
type daemonProc struct {
	t       *testing.T
	cfgPath string
	http    string
	args    []string            // more flags for run
	wd      string              // its working directory ("": this package's)
	as      *syscall.Credential // the user it runs as (nil: the test's)
	cmd     *exec.Cmd
	out     *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// writeDaemonConfig adapts the embedded default to an external broker and
// temporary directories.
func writeDaemonConfig(t *testing.T, dir, broker, httpAddr string) string {
	t.Helper()
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("operator-secret-0123456789abcdef-daemon\n"), 0o600)
	text := strings.NewReplacer(
		"  dir: ./saga-data/journal", "  dir: "+filepath.Join(dir, "journal"),
		"  world: ./saga-data/world", "  world: "+filepath.Join(dir, "world"),
		"  broker: embedded", "  broker: "+broker,
		"  listen: 127.0.0.1:1883", `  listen: ""`,
		"  listen: 127.0.0.1:8080", "  listen: "+httpAddr,
		`  reset_token_file: ""`, "  reset_token_file: "+token,
	).Replace(defaultYAMLForTests(t))
	path := filepath.Join(dir, "arm.yaml")
	os.WriteFile(path, []byte(text), 0o600)
	if out, code := run(t, "check-config", path); code != 0 {
		t.Fatalf("test config invalid:\n%s", out)
	}
	return path
}

func (d *daemonProc) start() {
	d.t.Helper()
	d.out = &syncBuffer{}
	d.cmd = exec.Command(binary, append([]string{"run", "--config", d.cfgPath}, d.args...)...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.Dir = d.wd
	if d.as != nil {
		d.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: d.as}
	}
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
}

func (d *daemonProc) get(path string) (int, string) {
	resp, err := http.Get("http://" + d.http + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (d *daemonProc) waitReady() {
	d.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _ := d.get("/readyz")
		if code == 200 {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("daemon never ready:\n%s", d.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (d *daemonProc) status() map[string]any {
	d.t.Helper()
	_, body := d.get("/api/v1/status")
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		d.t.Fatalf("status %q: %v", body, err)
	}
	return m
}

// arm1 are the default config's topics.
var arm1 = mqtt.Topics{Device: "arm1"}

// state is an agent's last retained value for an actuator (0 if none yet).
func state(a *daemontest.Agent, name string) float64 {
	v, _ := a.State(name)
	return v
}

func TestDaemonOverMosquitto(t *testing.T) {
	broker := startMosquitto(t)
	dir := t.TempDir()
	d := &daemonProc{t: t, http: fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))}
	d.cfgPath = writeDaemonConfig(t, dir, broker, d.http)
	d.start()
	defer func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			d.cmd.Wait()
		}
	}()
	d.waitReady()
	watcher := daemontest.NewAgent(t, broker, arm1, "watcher")
	ctl := daemontest.NewAgent(t, broker, arm1, "planner")
	ctl.Hello(60 * time.Second)

	// A saga half done when the supervisor is killed with SIGKILL.
	saga := ctl.Must(map[string]any{"op": "begin"}).Saga
	ctl.Must(map[string]any{"op": "step", "saga": saga, "actuator": "base", "value": 45})
	ctl.Must(map[string]any{"op": "step", "saga": saga, "actuator": "shoulder", "value": 60})
	daemontest.WaitFor(t, "the steps on the retained state topics", 5*time.Second, func() bool {
		return state(watcher, "base") == 45 && state(watcher, "shoulder") == 60
	})
	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()
	daemontest.WaitFor(t, "the broker to publish the supervisor's will", 30*time.Second, func() bool { return watcher.SupervisorState() == api.StateOffline })

	// Restarted, it recovers before it is ready: by the first 200 from
	// /readyz the saga is unwound and nothing is open.
	d.start()
	d.waitReady()
	st := d.status()
	if open := st["open_sagas"].([]any); len(open) != 0 {
		t.Fatalf("ready with open sagas: %v", st)
	}
	for _, a := range st["actuators"].([]any) {
		m := a.(map[string]any)
		want := map[string]float64{"base": 0, "shoulder": 10, "elbow": 20, "gripper": 0}[m["name"].(string)]
		if m["commanded"].(float64) != want {
			t.Errorf("after recovery %s commanded %v, want %v", m["name"], m["commanded"], want)
		}
	}
	if !strings.Contains(d.out.String(), "recovered: clean") {
		t.Errorf("the restarted daemon did not report its recovery:\n%s", d.out.String())
	}
	daemontest.WaitFor(t, "retained state back at the priors", 5*time.Second, func() bool {
		return state(watcher, "base") == 0 && state(watcher, "shoulder") == 10
	})
	// The old lease died with the old process.
	if r := ctl.Send(map[string]any{"op": "begin"}); r.Code != "LEASE_EXPIRED" {
		t.Fatalf("begin under a lease from before the crash: %+v", r)
	}

	// Command → reply latency over loopback MQTT, beside the fsync floor.
	ctl.Hello(60 * time.Second)
	saga = ctl.Must(map[string]any{"op": "begin"}).Saga
	var lat latency.Samples
	for i := 0; i < 200; i++ {
		t0 := time.Now()
		ctl.Must(map[string]any{"op": "step", "saga": saga, "actuator": "elbow", "value": float64(20 + i%5)})
		lat = append(lat, time.Since(t0))
	}
	ctl.Must(map[string]any{"op": "commit", "saga": saga})
	var hb latency.Samples // a heartbeat: the same path with no journal write
	for i := 0; i < 200; i++ {
		t0 := time.Now()
		ctl.Must(map[string]any{"op": "heartbeat"})
		hb = append(hb, time.Since(t0))
	}
	t.Logf("heartbeat→reply over mosquitto: p50 %v p99 %v", hb.Percentile(0.5), hb.Percentile(0.99))
	echo := mqttEcho(t, broker, 200)
	t.Logf("MQTT echo between two paho clients over the same mosquitto (no supervisor): p50 %v p99 %v", echo.Percentile(0.5), echo.Percentile(0.99))
	floor, err := latency.Floor(dir, 200, 200)
	if err != nil {
		t.Fatal(err)
	}
	idle, err := latency.FloorGap(dir, 200, 200, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("command→reply over mosquitto (every-step): p50 %v p99 %v; fsync floor p50 %v back to back, %v 1 ms apart (same run, same disk)",
		lat.Percentile(0.5), lat.Percentile(0.99), floor.Percentile(0.5), idle.Percentile(0.5))

	// A controller that dies (stops heartbeating): its saga is unwound when
	// the lease runs out, visible on the retained state topics.
	const ttl = 400 * time.Millisecond
	dead := daemontest.NewAgent(t, broker, arm1, "doomed")
	granted := time.Now()
	dead.Hello(ttl)
	saga = dead.Must(map[string]any{"op": "begin"}).Saga
	dead.Must(map[string]any{"op": "step", "saga": saga, "actuator": "gripper", "value": 30})
	daemontest.WaitFor(t, "gripper at 30 on the state topic", 5*time.Second, func() bool { return state(watcher, "gripper") == 30 })
	daemontest.WaitFor(t, "gripper back at its prior after the lease ran out", 5*time.Second, func() bool { return state(watcher, "gripper") == 0 })
	t.Logf("controller silent → gripper back at its prior on the state topic %v after the lease was granted (TTL %v)", time.Since(granted), ttl)

	// SIGTERM: an orderly stop, exit 0, status offline.
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM exit: %v\n%s", err, d.out.String())
	}
	daemontest.WaitFor(t, "offline status after SIGTERM", 5*time.Second, func() bool { return watcher.SupervisorState() == api.StateOffline })
}

// mqttEcho measures the MQTT path alone, the floor under any command's
// latency: one paho client publishes (QoS 1) to another, which publishes it
// back (QoS 1), through the broker — the same hops a request and its reply
// make, with nothing done in between.
func mqttEcho(t *testing.T, broker string, n int) latency.Samples {
	t.Helper()
	connect := func(id string) paho.Client {
		c := paho.NewClient(paho.NewClientOptions().AddBroker(broker).SetClientID(id).SetOrderMatters(false))
		if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("echo client %s: %v", id, tok.Error())
		}
		t.Cleanup(func() { c.Disconnect(0) })
		return c
	}
	echo, ping := connect("bench-echo"), connect("bench-ping")
	if tok := echo.Subscribe("bench/ping", 1, func(c paho.Client, m paho.Message) {
		c.Publish("bench/pong", 1, false, m.Payload())
	}); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	got := make(chan struct{}, 1)
	if tok := ping.Subscribe("bench/pong", 1, func(paho.Client, paho.Message) { got <- struct{}{} }); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	var lat latency.Samples
	for i := 0; i < n; i++ {
		t0 := time.Now()
		ping.Publish("bench/ping", 1, false, []byte("x"))
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("no echo")
		}
		lat = append(lat, time.Since(t0))
	}
	return lat
}
