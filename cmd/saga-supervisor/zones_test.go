package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// TestZonesThroughTheBinary runs the real binary with zones against
// mosquitto: the arm's zone halts over HTTP, the base keeps stepping, the
// supervisor is killed with SIGKILL and restarted, the arm is still halted
// (rebuilt from the journal) while the base serves, and an operator's zone
// reset frees the arm.
func TestZonesThroughTheBinary(t *testing.T) {
	broker := startMosquitto(t)
	dir := t.TempDir()
	d := &daemonProc{t: t, http: fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))}
	d.cfgPath = writeDaemonConfig(t, dir, broker, d.http)
	f, err := os.OpenFile(d.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("\nzones:\n  arm: [shoulder, elbow, gripper]\n  base: [base]\n")
	f.Close()
	if out, code := run(t, "check-config", d.cfgPath); code != 0 {
		t.Fatalf("config with zones invalid:\n%s", out)
	}
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

	base := ctl.Must(map[string]any{"op": "begin"}).Saga
	ctl.Must(map[string]any{"op": "step", "saga": base, "actuator": "base", "value": 30})
	arm := ctl.Must(map[string]any{"op": "begin"}).Saga
	ctl.Must(map[string]any{"op": "step", "saga": arm, "actuator": "shoulder", "value": 60})

	post := func(path, token, body string) (int, string) {
		req, _ := http.NewRequest("POST", "http://"+d.http+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := post("/api/v1/halt?zone=arm", "", `{"reason":"light curtain"}`); code != 200 || !strings.Contains(body, `"halted_zones":["arm"]`) {
		t.Fatalf("zone halt: %d %s", code, body)
	}
	// The arm's saga is unwound; the shoulder goes to its safe value (10).
	daemontest.WaitFor(t, "the shoulder parked at its safe value", 10*time.Second, func() bool { return state(watcher, "shoulder") == 10 })
	if r := ctl.Send(map[string]any{"op": "step", "saga": arm, "actuator": "elbow", "value": 30}); r.OK {
		t.Errorf("a step in the arm's unwound saga: %+v", r)
	}
	fresh := ctl.Must(map[string]any{"op": "begin"}).Saga
	if r := ctl.Send(map[string]any{"op": "step", "saga": fresh, "actuator": "elbow", "value": 30}); r.Code != "ZONE_HALTED" {
		t.Errorf("a step on the halted arm: %+v", r)
	}
	ctl.Must(map[string]any{"op": "step", "saga": base, "actuator": "base", "value": 40})
	daemontest.WaitFor(t, "the base at 40", 5*time.Second, func() bool { return state(watcher, "base") == 40 })
	zoneGauge := func() string {
		_, m := d.get("/metrics")
		for l := range strings.Lines(m) {
			if strings.HasPrefix(l, `saga_zone_halted{zone="arm"}`) {
				return strings.TrimSpace(l)
			}
		}
		return ""
	}
	if g := zoneGauge(); g != `saga_zone_halted{zone="arm"} 1` {
		t.Errorf("metrics: %q", g)
	}

	// kill -9 with the base's saga open and the arm halted.
	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()
	d.start()
	d.waitReady() // ready: a zone halt does not stop the other zones
	zones := d.status()["zones"].([]any)
	armZone := zones[0].(map[string]any)
	if armZone["name"] != "arm" || armZone["halted"] != true || !strings.Contains(fmt.Sprint(armZone["halt_reason"]), "light curtain") {
		t.Fatalf("after the restart the arm's zone is %v", armZone)
	}
	if zones[1].(map[string]any)["halted"] != false {
		t.Errorf("after the restart the base's zone is %v", zones[1])
	}
	// The base's saga was unwound by recovery (the supervisor crashed).
	daemontest.WaitFor(t, "the base back at its prior after recovery", 10*time.Second, func() bool { return state(watcher, "base") == 0 })
	ctl.Hello(60 * time.Second)
	s := ctl.Must(map[string]any{"op": "begin"}).Saga
	if r := ctl.Send(map[string]any{"op": "step", "saga": s, "actuator": "shoulder", "value": 50}); r.Code != "ZONE_HALTED" {
		t.Errorf("after the restart, a step on the halted arm: %+v", r)
	}
	ctl.Must(map[string]any{"op": "step", "saga": s, "actuator": "base", "value": 20})
	if g := zoneGauge(); g != `saga_zone_halted{zone="arm"} 1` {
		t.Errorf("metrics after the restart: %q", g)
	}

	// The operator resets the zone (the full reset is not needed: there is
	// no full halt), and the arm serves again.
	token := "operator-secret-0123456789abcdef-daemon"
	if code, body := post("/api/v1/reset", token, `{"zone":"wrist"}`); code != 404 || !strings.Contains(body, "UNKNOWN_ZONE") {
		t.Errorf("reset of an unknown zone: %d %s", code, body)
	}
	if code, body := post("/api/v1/reset", token, `{"zone":"arm","operator":"ada"}`); code != 200 || strings.Contains(body, "halted_zones") {
		t.Fatalf("zone reset: %d %s", code, body)
	}
	ctl.Must(map[string]any{"op": "step", "saga": s, "actuator": "shoulder", "value": 50})
	ctl.Must(map[string]any{"op": "commit", "saga": s})
	if g := zoneGauge(); g != `saga_zone_halted{zone="arm"} 0` {
		t.Errorf("metrics after the zone reset: %q", g)
	}

	// From the shell: ctl halts the base's zone (through the Go client,
	// on the e-stop topic), shows it, and resets it.
	if out, code := run(t, "ctl", "--config", d.cfgPath, "halt", "--zone", "base", "--reason", "from the shell"); code != 0 || !strings.Contains(out, "halted zone base") {
		t.Fatalf("ctl halt --zone base: %d\n%s", code, out)
	}
	if out, code := run(t, "ctl", "--config", d.cfgPath, "status"); code != 0 || !strings.Contains(out, "base       HALTED") || !strings.Contains(out, "ready:      yes") {
		t.Errorf("ctl status with the base halted: %d\n%s", code, out)
	}
	s = ctl.Must(map[string]any{"op": "begin"}).Saga
	if r := ctl.Send(map[string]any{"op": "step", "saga": s, "actuator": "base", "value": 10}); r.Code != "ZONE_HALTED" {
		t.Errorf("a step on the halted base: %+v", r)
	}
	ctl.Must(map[string]any{"op": "step", "saga": s, "actuator": "elbow", "value": 40})
	if out, code := run(t, "ctl", "--config", d.cfgPath, "halt", "--zone", "wrist"); code == 0 || !strings.Contains(out, "UNKNOWN_ZONE") {
		t.Errorf("ctl halt of an unknown zone: %d\n%s", code, out)
	}
	if h, _ := d.status()["halted"].(bool); !h {
		t.Error("a halt of an unknown zone did not halt everything")
	}
	if out, code := run(t, "ctl", "--config", d.cfgPath, "reset", "--zone", "base"); code != 0 || !strings.Contains(out, "reset zone base") {
		t.Errorf("ctl reset --zone base: %d\n%s", code, out)
	}
	if out, code := run(t, "ctl", "--config", d.cfgPath, "reset"); code != 0 {
		t.Errorf("ctl reset (the full halt): %d\n%s", code, out)
	}
	if st := d.status(); st["halted"] != false || strings.Contains(fmt.Sprint(st["zones"]), "halted:true") {
		t.Errorf("after both resets: %v", st)
	}
}
