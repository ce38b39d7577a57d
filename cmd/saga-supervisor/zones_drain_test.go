package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// TestDrainQuarantineAndZoneAcrossKill9 runs the real binary with zones
// and a checkpoint after every record: a drain, a quarantined agent and a
// halted zone at once are shown side by side (status, ctl status,
// metrics), are checkpointed in one version-3 snapshot, and all three
// hold after kill -9 and a restart from that checkpoint.
func TestDrainQuarantineAndZoneAcrossKill9(t *testing.T) {
	broker := startMosquitto(t)
	dir := t.TempDir()
	d := &daemonProc{t: t, http: fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))}
	d.cfgPath = writeDaemonConfig(t, dir, broker, d.http)
	cfg, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(cfg), "  checkpoint_records: 16384", "  checkpoint_records: 1", 1)
	if text == string(cfg) {
		t.Fatal("the test config has no checkpoint_records line to change")
	}
	text += "\nzones:\n  arm: [shoulder, elbow, gripper]\n  base: [base]\n"
	if err := os.WriteFile(d.cfgPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "check-config", d.cfgPath); code != 0 {
		t.Fatalf("config invalid:\n%s", out)
	}
	d.start()
	defer func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			d.cmd.Wait()
		}
	}()
	d.waitReady()
	ctl := func(args ...string) string {
		t.Helper()
		out, code := run(t, append([]string{"ctl", "--config", d.cfgPath, "--broker", broker}, args...)...)
		if code != 0 {
			t.Fatalf("ctl %v exited %d:\n%s", args, code, out)
		}
		return out
	}
	rogue := daemontest.NewAgent(t, broker, arm1, "rogue")
	planner := daemontest.NewAgent(t, broker, arm1, "planner")
	rogue.Hello(time.Minute)
	rs := rogue.Must(map[string]any{"op": "begin"}).Saga
	rogue.Must(map[string]any{"op": "step", "saga": rs, "actuator": "base", "value": 30})

	ctl("drain", "--grace", "10m", "--reason", "swap the gripper")
	ctl("quarantine", "rogue", "--reason", "erratic steps")
	req, _ := http.NewRequest("POST", "http://"+d.http+"/api/v1/halt?zone=arm", strings.NewReader(`{"reason":"light curtain"}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("zone halt: %d %s", res.StatusCode, body)
	}

	all := func(when string) {
		t.Helper()
		st := d.status()
		if st["drain"] == nil {
			t.Errorf("%s: status has no drain: %v", when, st)
		}
		if q := fmt.Sprint(st["quarantined"]); !strings.Contains(q, "rogue") {
			t.Errorf("%s: status quarantined %s", when, q)
		}
		zones, _ := st["zones"].([]any)
		if len(zones) != 2 || zones[0].(map[string]any)["name"] != "arm" || zones[0].(map[string]any)["halted"] != true ||
			zones[1].(map[string]any)["halted"] != false {
			t.Errorf("%s: status zones %v", when, st["zones"])
		}
		out := ctl("status")
		for _, want := range []string{"drain:      IN FORCE", "quarantine: rogue", "arm        HALTED", "base       serving"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: ctl status lacks %q:\n%s", when, want, out)
			}
		}
		_, m := d.get("/metrics")
		for _, want := range []string{"saga_draining 1", "saga_quarantined_agents 1", `saga_zone_halted{zone="arm"} 1`, `saga_zone_halted{zone="base"} 0`} {
			if !strings.Contains(m, want+"\n") {
				t.Errorf("%s: /metrics lacks %q", when, want)
			}
		}
		planner.Hello(time.Minute)
		if r := planner.Send(map[string]any{"op": "begin"}); r.Code != "DRAINING" {
			t.Errorf("%s: begin while draining: %+v", when, r)
		}
		if r := rogue.Send(map[string]any{"op": "hello", "ttl_ms": 60000}); r.Code != "QUARANTINED" {
			t.Errorf("%s: hello of the quarantined agent: %+v", when, r)
		}
	}
	all("before the kill")

	// The newest checkpoint, covering all three, is version 3; the restart
	// starts from it (and the serving engine is always handed its state
	// as a snapshot of the rebuild: version 3 again).
	daemontest.WaitFor(t, "a version-3 checkpoint", testtool.Slow(20*time.Second), func() bool {
		cs, _, err := wal.Checkpoints(filepath.Join(dir, "journal"), wal.Options{})
		return err == nil && len(cs) > 0 && len(cs[0].Payload) > 0 && cs[0].Payload[0] == 3
	})

	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()
	d.start()
	daemontest.WaitFor(t, "the restarted daemon serving, not ready for the drain", testtool.Slow(30*time.Second), func() bool {
		code, body := d.get("/readyz")
		return code == 503 && strings.Contains(body, "draining:")
	})
	all("after kill -9")
}
