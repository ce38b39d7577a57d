package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// The operator's drain and quarantine through the real binary, its ctl
// and mosquitto: a drain refuses begin DRAINING while the open saga goes
// on; a quarantine ends the agent's lease, unwinds its saga and refuses it
// QUARANTINED; both hold across kill -9 (the saga open at the crash is
// unwound by recovery); ctl ends both, and that too is durable.
func TestDrainAndQuarantineAcrossKill9(t *testing.T) {
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
	ctl := func(args ...string) string {
		t.Helper()
		out, code := run(t, append([]string{"ctl", "--config", d.cfgPath, "--broker", broker}, args...)...)
		if code != 0 {
			t.Fatalf("ctl %v exited %d:\n%s", args, code, out)
		}
		return out
	}
	watcher := daemontest.NewAgent(t, broker, arm1, "watcher")
	planner := daemontest.NewAgent(t, broker, arm1, "planner")
	rogue := daemontest.NewAgent(t, broker, arm1, "rogue")
	planner.Hello(time.Minute)
	rogue.Hello(time.Minute)
	open := planner.Must(map[string]any{"op": "begin"}).Saga
	planner.Must(map[string]any{"op": "step", "saga": open, "actuator": "base", "value": 30})
	rs := rogue.Must(map[string]any{"op": "begin"}).Saga
	rogue.Must(map[string]any{"op": "step", "saga": rs, "actuator": "elbow", "value": 35})

	if out := ctl("drain", "--grace", "10m", "--reason", "swap the gripper"); !strings.Contains(out, "drain:      IN FORCE") {
		t.Fatalf("ctl drain printed:\n%s", out)
	}
	if r := planner.Send(map[string]any{"op": "begin"}); r.Code != "DRAINING" {
		t.Fatalf("begin while draining: %+v", r)
	}
	daemontest.WaitFor(t, "/readyz 503 with the drain", 10*time.Second, func() bool {
		code, body := d.get("/readyz")
		return code == 503 && strings.Contains(body, "draining:") && strings.Contains(body, "swap the gripper")
	})
	planner.Must(map[string]any{"op": "step", "saga": open, "actuator": "shoulder", "value": 40})

	if out := ctl("quarantine", "rogue", "--reason", "erratic steps"); !strings.Contains(out, "quarantine: rogue") {
		t.Fatalf("ctl quarantine printed:\n%s", out)
	}
	if r := rogue.Send(map[string]any{"op": "step", "saga": rs, "actuator": "elbow", "value": 36}); r.Code != "QUARANTINED" {
		t.Fatalf("step of the quarantined agent: %+v", r)
	}
	daemontest.WaitFor(t, "the rogue's elbow back at its prior", 10*time.Second, func() bool { return state(watcher, "elbow") == 20 })
	out := ctl("status")
	if !strings.Contains(out, "drain:      IN FORCE") || !strings.Contains(out, "quarantine: rogue") {
		t.Fatalf("ctl status does not show the drain and the quarantine:\n%s", out)
	}
	code, metrics := d.get("/metrics")
	if code != 200 || !strings.Contains(metrics, "saga_draining 1") || !strings.Contains(metrics, "saga_quarantined_agents 1") ||
		!strings.Contains(metrics, `saga_lease_ends_total{reason="quarantined"} 1`) {
		t.Fatalf("/metrics does not show the drain and the quarantine")
	}

	// kill -9 with the planner's saga open; restarted, the drain and the
	// quarantine hold, and recovery unwound the saga.
	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()
	d.start()
	daemontest.WaitFor(t, "the restarted daemon serving, not ready for the drain", 30*time.Second, func() bool {
		code, body := d.get("/readyz")
		return code == 503 && strings.Contains(body, "draining:") && strings.Contains(body, "before the last start")
	})
	st := d.status()
	if open := st["open_sagas"].([]any); len(open) != 0 {
		t.Fatalf("sagas open after recovery: %v", open)
	}
	daemontest.WaitFor(t, "the planner's saga unwound", 10*time.Second, func() bool {
		return state(watcher, "base") == 0 && state(watcher, "shoulder") == 10
	})
	planner.Hello(time.Minute)
	if r := planner.Send(map[string]any{"op": "begin"}); r.Code != "DRAINING" {
		t.Fatalf("begin after the restart: %+v", r)
	}
	if r := rogue.Send(map[string]any{"op": "hello", "ttl_ms": 60000}); r.Code != "QUARANTINED" {
		t.Fatalf("hello of the quarantined agent after the restart: %+v", r)
	}
	// Halt still latches, from the quarantined agent too, and reset
	// clears it while the drain stays.
	rogue.Must(map[string]any{"op": "halt", "reason": "rogue sees a person"})
	daemontest.WaitFor(t, "halted", 10*time.Second, func() bool { return d.status()["halted"] == true })
	if out, code := run(t, "ctl", "--config", d.cfgPath, "--broker", broker, "reset"); code != 0 {
		t.Fatalf("reset while draining: %d\n%s", code, out)
	}

	ctl("undrain", "--reason", "gripper swapped")
	ctl("release", "rogue")
	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()
	d.start()
	d.waitReady() // ready: the end of the drain was journaled
	planner.Hello(time.Minute)
	planner.Must(map[string]any{"op": "begin"})
	rogue.Hello(time.Minute)
	if r, _ := ctlCode(t, d, broker, "undrain"); r != 1 {
		t.Fatalf("a second undrain exited %d, want 1", r)
	}
}

// ctlCode runs ctl against d and returns its exit status and output.
func ctlCode(t *testing.T, d *daemonProc, broker string, args ...string) (int, string) {
	t.Helper()
	out, code := run(t, append([]string{"ctl", "--config", d.cfgPath, "--broker", broker}, args...)...)
	return code, out
}
