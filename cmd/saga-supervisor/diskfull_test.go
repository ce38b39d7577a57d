package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

// TestDiskFullThenRestart fills the journal's file system for real (a
// 1 MiB tmpfs), as a robot's SD card fills. The next journal write fails,
// the daemon halts (JOURNAL_FAILED) and parks the shoulder at its safe
// value — a move the full disk cannot record. It is killed, the disk is
// freed and it restarts: the journal says 60, the shoulder is at 10. The
// daemon must say so and stay halted, and after an operator's reset a
// saga's abort takes the shoulder back to 10, never to 60 (a restart that
// is not halted lets a clean abort drive the joint to the journal's stale
// value).
func TestDiskFullThenRestart(t *testing.T) {
	dir := t.TempDir()
	jfs := filepath.Join(dir, "sd")
	os.Mkdir(jfs, 0o700)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", jfs).CombinedOutput(); err != nil {
		t.Fatalf("mounting a small tmpfs for the journal (the test runs as root, as CI does): %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", jfs).Run() })

	token := "operator-secret-0123456789abcdef-diskfull"
	world := filepath.Join(dir, "world")
	cfgPath, httpAddr, brokerPort := smallSegmentsConfig(t, dir, filepath.Join(jfs, "journal"), token)
	d := &daemonProc{t: t, cfgPath: cfgPath, http: httpAddr}
	d.start()
	t.Cleanup(func() { d.cmd.Process.Kill(); d.cmd.Wait() })
	d.waitReady()
	broker := fmt.Sprintf("tcp://127.0.0.1:%d", brokerPort)
	topics := mqtt.Topics{Device: "arm1"}
	a := daemontest.NewAgent(t, broker, topics, "planner")
	a.Hello(time.Minute)
	saga := a.Must(map[string]any{"op": "begin"}).Saga
	a.Must(map[string]any{"op": "step", "saga": saga, "actuator": "shoulder", "value": 60})
	a.Must(map[string]any{"op": "commit", "saga": saga})

	// The card fills.
	filler := filepath.Join(jfs, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(bytes.Repeat([]byte{1}, 2<<20)) // more than fits: ENOSPC
	f.Close()
	failed := false
	for i := 0; i < 200 && !failed; i++ {
		s := a.Send(map[string]any{"op": "begin"})
		if !s.OK {
			failed = s.Code == "JOURNAL_FAILED" || s.Code == "HALTED"
			continue
		}
		r := a.Send(map[string]any{"op": "step", "saga": s.Saga, "actuator": "base", "value": float64(i % 2)})
		failed = r.Code == "JOURNAL_FAILED" || r.Code == "HALTED"
	}
	if !failed {
		t.Fatalf("200 sagas on a full disk and no JOURNAL_FAILED; status %v", d.status())
	}
	shoulder := func() float64 {
		b, err := os.ReadFile(world)
		if err != nil {
			t.Fatal(err)
		}
		cp := filepath.Join(dir, "world.copy")
		os.WriteFile(cp, b, 0o600)
		w, err := sim.OpenWorld(cp)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		return w.Snapshot()["shoulder"].Commanded
	}
	daemontest.WaitFor(t, "the journal-failed halt to park the shoulder at its safe value", 5*time.Second, func() bool { return shoulder() == 10 })

	// Killed, the card freed, restarted.
	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()
	os.Remove(filler)
	d.start()
	// The status answers 200 once recovered (503 while the journal is).
	daemontest.WaitFor(t, "the restarted daemon to answer its status", 20*time.Second, func() bool { code, _ := d.get("/api/v1/status"); return code == 200 })
	st := d.status()
	why, _ := st["halt_reason"].(string)
	if st["halted"] != true || !strings.Contains(why, "shoulder reads 10, the journal says 60") {
		t.Fatalf("after the restart: halted %v, reason %q", st["halted"], why)
	}
	if code, _ := d.get("/readyz"); code != 503 {
		t.Errorf("/readyz %d while halted", code)
	}

	// The operator resets; a saga on the shoulder is aborted: back to 10.
	// HTTP answers before the broker link is up, and a reset needs it.
	daemontest.WaitFor(t, "the broker link up", 20*time.Second, func() bool {
		return !strings.Contains(fmt.Sprint(d.status()["reasons"]), "input mqtt")
	})
	req, _ := http.NewRequest("POST", "http://"+httpAddr+"/api/v1/reset", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 {
		t.Fatalf("reset: %d %s", resp.StatusCode, body)
	}
	resp.Body.Close()
	d.waitReady()
	b := daemontest.NewAgent(t, broker, topics, "planner2")
	b.Hello(time.Minute)
	saga = b.Must(map[string]any{"op": "begin"}).Saga
	b.Must(map[string]any{"op": "step", "saga": saga, "actuator": "shoulder", "value": 30})
	b.Must(map[string]any{"op": "abort", "saga": saga})
	if got := shoulder(); got != 10 {
		t.Fatalf("the abort drove the shoulder to %g; it was at 10 before the saga", got)
	}
}

// smallSegmentsConfig writes dir/arm.yaml: the embedded default (locked
// broker, sim arm) with its journal in journal, in 4 KiB segments, the
// world in dir/world, free ports for HTTP and the broker, and token as the
// operator's reset token. It returns the config's path and the ports.
func smallSegmentsConfig(t *testing.T, dir, journal, token string) (cfgPath, httpAddr string, brokerPort int) {
	t.Helper()
	httpAddr = fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))
	brokerPort = testtool.FreePort(t)
	os.WriteFile(filepath.Join(dir, "token"), []byte(token+"\n"), 0o600)
	text := strings.NewReplacer(
		"  dir: ./saga-data/journal", "  dir: "+journal,
		"  segment_size: 16MiB", "  segment_size: 4KiB",
		"  world: ./saga-data/world", "  world: "+filepath.Join(dir, "world"),
		"  listen: 127.0.0.1:1883", fmt.Sprintf("  listen: 127.0.0.1:%d", brokerPort),
		"  listen: 127.0.0.1:8080", "  listen: "+httpAddr,
		`  reset_token_file: ""`, "  reset_token_file: "+filepath.Join(dir, "token"),
		"    password_file: ./saga-data/mqtt/passwd", "    password_file: "+filepath.Join(dir, "mqtt", "passwd"),
		"    credentials_dir: ./saga-data/mqtt/credentials", "    credentials_dir: "+filepath.Join(dir, "mqtt", "credentials"),
	).Replace(defaultYAMLForTests(t))
	cfgPath = filepath.Join(dir, "arm.yaml")
	os.WriteFile(cfgPath, []byte(text), 0o600)
	if out, code := run(t, "check-config", cfgPath); code != 0 {
		t.Fatalf("test config invalid:\n%s", out)
	}
	return cfgPath, httpAddr, brokerPort
}
