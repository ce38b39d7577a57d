package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// The newest journal segment deleted while the daemon was down: verify
// says LOST (exit 1), run refuses to start (non-zero, before READY), and
// run --accept-journal-loss starts halted, the loss in the halt's reason
// (journaled), until an operator resets. It fails if the journal verifies
// clean or the daemon starts as if the deleted records had never been.
func TestJournalLossRefusedUntilAccepted(t *testing.T) {
	dir := t.TempDir()
	token := "operator-secret-0123456789abcdef-journalloss"
	journal := filepath.Join(dir, "journal")
	cfgPath, httpAddr, brokerPort := smallSegmentsConfig(t, dir, journal, token)
	d := &daemonProc{t: t, cfgPath: cfgPath, http: httpAddr}
	d.start()
	t.Cleanup(func() { d.cmd.Process.Kill(); d.cmd.Wait() })
	d.waitReady()
	broker := fmt.Sprintf("tcp://127.0.0.1:%d", brokerPort)
	a := daemontest.NewAgent(t, broker, mqtt.Topics{Device: "arm1"}, "planner")
	a.Hello(time.Minute)
	for i := range 40 { // several 4 KiB segments
		saga := a.Must(map[string]any{"op": "begin"}).Saga
		a.Must(map[string]any{"op": "step", "saga": saga, "actuator": "base", "value": float64(i % 30)})
		a.Must(map[string]any{"op": "commit", "saga": saga})
	}
	// An orderly stop: the anchor names the last record.
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()
	if out, code := run(t, "verify", "--wal", journal); code != 0 {
		t.Fatalf("verify before the loss: exit %d\n%s", code, out)
	}

	segs, _ := filepath.Glob(filepath.Join(journal, "*.wal"))
	sort.Strings(segs)
	if len(segs) < 3 {
		t.Fatalf("%d segments; the test wants several", len(segs))
	}
	os.Remove(segs[len(segs)-1])

	if out, code := run(t, "verify", "--wal", journal); code != 1 || !strings.Contains(out, "LOST") {
		t.Fatalf("verify after the newest segment was deleted: exit %d\n%s", code, out)
	}
	if out, code := run(t, "certify", "--wal", journal); code != 1 || !strings.Contains(out, "durable records lost") {
		t.Fatalf("certify after the loss: exit %d\n%s", code, out)
	}
	sock := newNotifySocket(t)
	cmd := exec.Command(binary, "run", "--config", cfgPath)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock.path)
	b, err := cmd.CombinedOutput()
	time.Sleep(100 * time.Millisecond) // what it sent is read from the socket by now
	if err == nil || !strings.Contains(string(b), "durable records lost") || sock.count("READY=1") != 0 {
		t.Fatalf("run on a journal that lost records: %v, READY %d\n%s", err, sock.count("READY=1"), b)
	}

	// The operator looks, then accepts the loss.
	d.args = []string{"--accept-journal-loss"}
	d.start()
	// The status answers 200 once recovered (503 while the journal is).
	daemontest.WaitFor(t, "the daemon to answer its status", 20*time.Second, func() bool { code, _ := d.get("/api/v1/status"); return code == 200 })
	st := d.status()
	why, _ := st["halt_reason"].(string)
	if st["halted"] != true || !strings.Contains(why, "loss accepted by the operator") {
		t.Fatalf("started on an accepted loss: halted %v, reason %q", st["halted"], why)
	}
	// HTTP answers before the broker link is up (it serves whatever the
	// broker does): a reset needs every other condition, the link too.
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
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()

	// The acceptance is in the journal (the halt's record), and the
	// journal verifies again.
	if out, code := run(t, "verify", "--wal", journal); code != 0 {
		t.Fatalf("verify after the accepted loss: exit %d\n%s", code, out)
	}
	found := false
	err = wal.Scan(journal, wal.Options{}, 1, func(r wal.Record) error {
		rec, err := rollback.DecodeRecord(r.Type, r.Payload)
		if err == nil && rec.Type == rollback.RecHalt && strings.Contains(rec.Message, "loss accepted by the operator") {
			found = true
		}
		return err
	})
	if err != nil || !found {
		t.Fatalf("no HALT record journals the accepted loss (scan: %v)", err)
	}
}
