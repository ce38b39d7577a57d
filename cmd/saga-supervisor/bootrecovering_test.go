package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// TestHaltWhileRecoveringAtBoot: with a board missing, recovery reads the
// board's actuators back for up to 3 s before it finishes. HTTP used to
// answer only after that (about 3.1 s after the journal opened): a halt
// from the dashboard hung meanwhile. Now, from the "journal opened" line
// on, the start-up handler answers /readyz 503 "starting: recovering the
// journal", the status and POST /api/v1/halt: a halt sent at once is
// answered while recovery still runs, latches, nothing moves, and the
// journal holds it as a HALT record.
func TestHaltWhileRecoveringAtBoot(t *testing.T) {
	dir := t.TempDir()
	host := filepath.Join(dir, "ttyHost") // never created: the board's cable is out
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte(operatorToken+"\n"), 0o600)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	journal := filepath.Join(dir, "journal")
	cfg := filepath.Join(dir, "robot.yaml")
	text := strings.Replace(fmt.Sprintf(monitoringConfig, journal, freePort(t), httpAddr, host),
		`  reset_token_file: ""`, "  reset_token_file: "+token, 1)
	os.WriteFile(cfg, []byte(text), 0o600)
	if out, code := run(t, "check-config", cfg); code != 0 {
		t.Fatalf("test config invalid:\n%s", out)
	}
	b := bootWith(t, cfg, httpAddr, operatorToken)

	var opened time.Time
	deadline := time.Now().Add(testtool.Slow(20 * time.Second))
	for !strings.Contains(b.out.String(), "journal opened") {
		if time.Now().After(deadline) || b.cmd.ProcessState != nil {
			t.Fatalf("no \"journal opened\" line in 20 s:\n%s", b.out.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	opened = time.Now()
	code, body := b.do(http.MethodPost, "/api/v1/halt", "", `{"reason":"boot test"}`)
	answered := time.Since(opened)
	during := !strings.Contains(b.out.String(), "journal taken over")
	t.Logf("POST /api/v1/halt answered %v after the \"journal opened\" line was seen (during recovery: %v): %d %s",
		answered.Round(time.Millisecond), during, code, body)
	var hj struct {
		Halted     bool   `json:"halted"`
		HaltReason string `json:"halt_reason"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &hj) != nil || !hj.Halted || !strings.Contains(hj.HaltReason, "boot test") {
		t.Fatalf("halt while recovering: %d %s", code, body)
	}
	if !during {
		t.Fatalf("the halt was answered only after recovery finished (\"journal taken over\" is in the log): HTTP did not serve while it ran")
	}
	code, body = b.do(http.MethodGet, "/readyz", "", "")
	scode, sbody := b.do(http.MethodGet, "/api/v1/status", "", "")
	if !strings.Contains(b.out.String(), "journal taken over") {
		// Still recovering: the start-up handler's answers (the status
		// 503: what is known so far, not the whole status).
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "starting: recovering the journal") {
			t.Errorf("/readyz while recovering: %d %q", code, body)
		}
		var st bootStatus
		if scode != http.StatusServiceUnavailable || json.Unmarshal([]byte(sbody), &st) != nil || st.Ready || !st.Halted ||
			st.reasonAbout("starting: recovering the journal") == "" {
			t.Errorf("status while recovering: %d %s", scode, sbody)
		}
	}

	daemontest.WaitFor(t, "recovery to finish and the full API to serve", testtool.Slow(20*time.Second), func() bool {
		return strings.Contains(b.out.String(), "msg=\"http serving\"")
	})
	st := b.status()
	if !st.Halted || !strings.Contains(st.HaltWhy, "boot test") {
		t.Fatalf("after recovery: not halted by the boot test's halt: %+v", st)
	}
	// Nothing moved: base (safe hold) where it started, elbow at its
	// initial value, which is also its safe value.
	if got := st.commanded(); got != "base=0 elbow=45" {
		t.Errorf("commanded after recovery: %s, want base=0 elbow=45", got)
	}

	b.cmd.Process.Kill()
	b.cmd.Wait()
	stdout, stderr, ecode := runSplit(t, "journal", "export", "--wal", journal, "--format", "jsonl")
	if ecode != 0 {
		t.Fatalf("journal export: exit %d: %s", ecode, stderr)
	}
	halts, moves := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var r struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		switch r.Type {
		case "HALT":
			if strings.Contains(r.Message, "boot test") {
				halts++
			}
		case "INTENT", "COMP_INTENT":
			moves++
		}
	}
	if halts == 0 || moves != 0 {
		t.Errorf("the journal holds %d HALT records naming the boot test (want 1 or more) and %d moves (want 0):\n%s", halts, moves, stdout)
	}
}
