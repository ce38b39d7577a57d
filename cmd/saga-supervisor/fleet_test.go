package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/daemon/fleet"
	"github.com/saga-supervisor/saga-supervisor/daemon/homeassistant"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/longtest"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// fleetConfig is the embedded default on an external broker, renamed to
// device, HTTP off, the fleet summary every second and, with ha, Home
// Assistant discovery with a halt-only agent for it.
func fleetConfig(t *testing.T, dir, broker, device string, ha bool) string {
	t.Helper()
	r := []string{
		"device: arm1", "device: " + device,
		"client_id: saga-supervisor-arm1", "client_id: saga-supervisor-" + device,
		"  dir: ./saga-data/journal", "  dir: " + filepath.Join(dir, "journal"),
		"  world: ./saga-data/world", "  world: " + filepath.Join(dir, "world"),
		"  broker: embedded", "  broker: " + broker,
		"  listen: 127.0.0.1:1883", `  listen: ""`,
		"  listen: 127.0.0.1:8080", `  listen: ""`,
		"  fleet:\n    enabled: false\n    period: 5s", "  fleet:\n    enabled: true\n    period: 1s",
	}
	if ha {
		// defaultYAMLForTests lists no agents.allow: every user is an
		// agent, Home Assistant's too.
		r = append(r, "  home_assistant:\n    enabled: false", "  home_assistant:\n    enabled: true")
	}
	text := strings.NewReplacer(r...).Replace(defaultYAMLForTests(t))
	for i := 0; i < len(r); i += 2 {
		if !strings.Contains(text, r[i+1]) {
			t.Fatalf("the default config no longer holds %q", r[i])
		}
	}
	path := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(path, []byte(text), 0o600)
	return path
}

// fleetRows runs `saga-supervisor fleet --once --json`.
func fleetRows(t *testing.T, broker string) map[string]fleet.Row {
	t.Helper()
	out, code := run(t, "fleet", "--once", "--json", "--broker", broker, "--credentials", "", "--timeout", "10s")
	if code != 0 {
		t.Fatalf("fleet --once exited %d:\n%s", code, out)
	}
	var rows []fleet.Row
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("fleet --json: %v\n%s", err, out)
	}
	m := map[string]fleet.Row{}
	for _, r := range rows {
		m[r.Device] = r
	}
	return m
}

// retained gathers the retained messages under filter.
func retained(t *testing.T, broker, filter string) map[string][]byte {
	t.Helper()
	var mu sync.Mutex
	got := map[string][]byte{}
	c := paho.NewClient(paho.NewClientOptions().AddBroker(broker).SetClientID(fmt.Sprintf("probe-%d", time.Now().UnixNano())))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("probe connect: %v", tok.Error())
	}
	defer c.Disconnect(0)
	last := time.Now()
	tok := c.Subscribe(filter, 1, func(_ paho.Client, m paho.Message) {
		mu.Lock()
		defer mu.Unlock()
		if m.Retained() {
			got[m.Topic()] = m.Payload()
			last = time.Now()
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("probe subscribe: %v", tok.Error())
	}
	daemontest.WaitFor(t, "retained messages to stop coming", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return time.Since(last) > 500*time.Millisecond
	})
	mu.Lock()
	defer mu.Unlock()
	return got
}

// TestFleetOfTwentyOnMosquitto runs 20 real daemons (5 under -short) on one mosquitto and
// reads them back with `saga-supervisor fleet`: all ready; one halted by
// Home Assistant's discovered button, one by its e-stop topic; one killed
// with SIGKILL shows OFFLINE through its will.
func TestFleetOfTwentyOnMosquitto(t *testing.T) {
	n := 20
	if longtest.Short(t) {
		n = 5
	}
	broker := startMosquitto(t)
	procs := make([]*exec.Cmd, n)
	outs := make([]*syncBuffer, n)
	for i := range n {
		dev := fmt.Sprintf("arm%02d", i)
		dir := t.TempDir()
		path := fleetConfig(t, dir, broker, dev, i == 0)
		if i == 0 {
			if out, code := run(t, "check-config", path); code != 0 {
				t.Fatalf("fleet test config invalid:\n%s", out)
			}
		}
		cmd := exec.Command(binary, "run", "--config", path, "--log-level", "warn")
		cmd.Dir = dir
		outs[i] = &syncBuffer{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = cmd
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
			if t.Failed() {
				t.Logf("%s's output (last 2 KiB):\n%s", dev, lastBytes(outs[i].String(), 2<<10))
			}
		})
	}
	var rows map[string]fleet.Row
	waitRows := func(what string, ok func(map[string]fleet.Row) bool) {
		t.Helper()
		daemontest.WaitFor(t, what, 60*time.Second, func() bool {
			rows = fleetRows(t, broker)
			return ok(rows)
		})
	}
	start := time.Now()
	waitRows(fmt.Sprintf("all %d devices READY in the fleet view", n), func(rows map[string]fleet.Row) bool {
		ready := 0
		for _, r := range rows {
			if r.State == fleet.RowReady && r.Version != "" && r.Hash != "" {
				ready++
			}
		}
		return ready == n
	})
	t.Logf("%d daemons READY in the fleet view %v after start", n, time.Since(start).Round(100*time.Millisecond))

	// The summary's size and rate, as a subscriber sees them.
	sums := retained(t, broker, "saga/v1/+/summary")
	if len(sums) != n {
		t.Fatalf("%d retained summaries, want %d", len(sums), n)
	}
	last := fmt.Sprintf("arm%02d", n-1)
	t.Logf("summary payload: %d bytes (%s: %s)", len(sums["saga/v1/"+last+"/summary"]), last, sums["saga/v1/"+last+"/summary"])

	// Home Assistant's view of arm00: every config parses, its ids are
	// unique, its topics carry what its templates read.
	disc := retained(t, broker, "homeassistant/#")
	checkDiscovery(t, broker, disc)

	// Its halt button latches a halt.
	var button map[string]any
	for topic, p := range disc {
		if strings.HasPrefix(topic, "homeassistant/button/") {
			json.Unmarshal(p, &button)
		}
	}
	if button == nil {
		t.Fatalf("no button among %d discovery configs", len(disc))
	}
	publish(t, broker, button["command_topic"].(string), button["payload_press"].(string))
	// arm01 is halted through its e-stop topic, any payload.
	publish(t, broker, mqtt.Topics{Device: "arm01"}.Estop(), "stop")
	// arm02 dies.
	procs[2].Process.Signal(syscall.SIGKILL)
	procs[2].Wait()

	waitRows("arm00 and arm01 HALTED, arm02 OFFLINE, the rest READY", func(rows map[string]fleet.Row) bool {
		for dev, want := range map[string]string{"arm00": fleet.RowHalted, "arm01": fleet.RowHalted, "arm02": fleet.RowOffline, "arm03": fleet.RowReady, last: fleet.RowReady} {
			if rows[dev].State != want {
				return false
			}
		}
		return len(rows) == n
	})
	if r := rows["arm00"].HaltReason; !strings.Contains(r, "Home Assistant") {
		t.Errorf("arm00 halted by the button with reason %q", r)
	}
	if r := rows["arm01"].HaltReason; !strings.Contains(r, "e-stop") {
		t.Errorf("arm01 halted on its e-stop topic with reason %q", r)
	}

	// The rate: one summary a period (1s) per device, plus its changes.
	c := paho.NewClient(paho.NewClientOptions().AddBroker(broker).SetClientID("rate"))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer c.Disconnect(0)
	var mu sync.Mutex
	count := 0
	c.Subscribe("saga/v1/+/summary", 0, func(_ paho.Client, m paho.Message) {
		if !m.Retained() {
			mu.Lock()
			count++
			mu.Unlock()
		}
	}).WaitTimeout(10 * time.Second)
	t0 := time.Now()
	time.Sleep(5 * time.Second) // a measurement window, not a wait for a condition
	mu.Lock()
	t.Logf("summaries published: %.1f/s for %d live daemons at period 1s", float64(count)/time.Since(t0).Seconds(), n-1)
	mu.Unlock()
}

// checkDiscovery checks Home Assistant's discovery configs against the
// topics they name.
func checkDiscovery(t *testing.T, broker string, disc map[string][]byte) {
	t.Helper()
	if len(disc) < 3+1+4 { // halt, ready, halted; a supply; four actuators
		t.Fatalf("%d discovery configs: %v", len(disc), disc)
	}
	ids := map[string]bool{}
	for topic, p := range disc {
		var c map[string]any
		if err := json.Unmarshal(p, &c); err != nil {
			t.Fatalf("%s: %v: %s", topic, err, p)
		}
		id, _ := c["unique_id"].(string)
		if id == "" || ids[id] {
			t.Errorf("%s: unique_id %q missing or twice", topic, id)
		}
		ids[id] = true
		if d, _ := c["device"].(map[string]any); d["name"] != "arm00" || d["model"] != "saga-supervisor" {
			t.Errorf("%s: device %v", topic, c["device"])
		}
		for _, pair := range [][2]string{{"availability_topic", "availability_template"}, {"state_topic", "value_template"}} {
			st, _ := c[pair[0]].(string)
			if st == "" {
				continue
			}
			vals := retained(t, broker, st)
			v, ok := vals[st]
			if !ok {
				t.Errorf("%s: %s %s holds no retained message", topic, pair[0], st)
				continue
			}
			got, err := homeassistant.Eval(c[pair[1]].(string), v)
			if err != nil {
				t.Errorf("%s: %v", topic, err)
			}
			if pair[0] == "availability_topic" {
				if got != c["payload_available"] {
					t.Errorf("%s: availability %q, want %v", topic, got, c["payload_available"])
				}
			} else if c["payload_on"] != nil && got != c["payload_on"] && got != c["payload_off"] {
				t.Errorf("%s: %q is neither payload_on nor payload_off", topic, got)
			}
		}
		if ct, _ := c["command_topic"].(string); ct != "" && ct != "saga/v1/arm00/estop/homeassistant" {
			t.Errorf("%s: command_topic %s is not Home Assistant's own e-stop topic", topic, ct)
		}
	}
}

func publish(t *testing.T, broker, topic, payload string) {
	t.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(broker).SetClientID(fmt.Sprintf("pub-%d", time.Now().UnixNano())))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	if tok := c.Publish(topic, 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish %s: %v", topic, tok.Error())
	}
}
