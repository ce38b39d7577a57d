package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	journal := filepath.Join(dir, "journal")
	cfg, httpAddr := boardRobotConfig(t, dir, filepath.Join(dir, "ttyHost")) // never created: the board's cable is out
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
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "starting: ") {
			t.Errorf("/readyz while recovering: %d %q", code, body)
		}
		var st bootStatus
		if scode != http.StatusServiceUnavailable || json.Unmarshal([]byte(sbody), &st) != nil || st.Ready || !st.Halted ||
			st.reasonAbout("starting: ") == "" {
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

// TestBoardWaitWhileHTTPServes: the start waits up to 3 s for a serial
// board to answer (so that recovery can read it back, and a board whose
// channel table the config contradicts is refused). That wait came before
// the journal opened, with the HTTP port bound and silent: a client's
// /readyz or halt hung for the 3 s. The wait now comes after the journal
// opened and HTTP serves: the "journal opened" line precedes "mcu not
// answering yet", and /readyz answers in between.
func TestBoardWaitWhileHTTPServes(t *testing.T) {
	dir := t.TempDir()
	cfg, httpAddr := boardRobotConfig(t, dir, filepath.Join(dir, "ttyHost")) // never created: the board's cable is out
	b := bootWith(t, cfg, httpAddr, operatorToken)

	daemontest.WaitFor(t, "the \"journal opened\" or \"mcu not answering yet\" line", testtool.Slow(20*time.Second), func() bool {
		out := b.out.String()
		return strings.Contains(out, "journal opened") || strings.Contains(out, "mcu not answering yet")
	})
	if strings.Contains(b.out.String(), "mcu not answering yet") && !strings.Contains(b.out.String(), "journal opened") {
		t.Fatalf("the board was waited for before the journal opened and HTTP served:\n%s", b.out.String())
	}
	code, body := b.do(http.MethodGet, "/readyz", "", "")
	waited := strings.Contains(b.out.String(), "mcu not answering yet")
	t.Logf("/readyz during the board's wait (wait over by the answer: %v): %d %s", waited, code, body)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Errorf("/readyz while the board is waited for: %d %q, want 503 starting", code, body)
	}
	// While the wait lasts, /readyz says what the start waits on — not
	// "recovering the journal", which it is not yet doing.
	if !waited && !strings.Contains(body, "waiting up to 3s for serial board board to answer") {
		t.Errorf("/readyz while the board is waited for: %q, want it to name the wait for board", body)
	}
	daemontest.WaitFor(t, "the \"mcu not answering yet\" line", testtool.Slow(20*time.Second), func() bool {
		return strings.Contains(b.out.String(), "mcu not answering yet")
	})
	out := b.out.String()
	if i, j := strings.Index(out, "journal opened"), strings.Index(out, "mcu not answering yet"); i < 0 || j < i {
		t.Fatalf("\"mcu not answering yet\" came before \"journal opened\": the HTTP port was silent for the board's wait:\n%s", out)
	}
}

// TestBoardTableRefusedAfterHTTPServes: with the board's wait moved after
// the journal's open, a board whose channel table the configuration
// contradicts must still end the start (exit 1, naming the actuator and
// the mismatch), before recovery. The config puts the elbow on the
// board's channel 1; the board has one channel.
func TestBoardTableRefusedAfterHTTPServes(t *testing.T) {
	var out string
	var err error
	for try := 1; ; try++ {
		var foreign bool
		out, err, foreign = tableRefusalRun(t)
		if !foreign {
			break
		}
		// Another test's board (a process of another package reopening
		// its port's path, now a pty number reused for ours) answered on
		// this cable before ours did: not what this test is about.
		t.Logf("try %d: a board that is not this test's answered on its pty; again", try)
		if try == 3 {
			t.Fatalf("a foreign board answered on this test's pty in 3 tries:\n%s", out)
		}
	}
	t.Logf("%v; the last line: %s", err, lastBytes(out, 400))
	if err == nil || !strings.Contains(out, "SERIAL_TABLE") || !strings.Contains(out, "elbow") {
		t.Fatalf("exit %v; want a failed start naming SERIAL_TABLE and elbow:\n%s", err, out)
	}
	if !strings.Contains(out, "journal opened") {
		t.Errorf("refused before the journal opened: the board's wait is not after HTTP serves:\n%s", out)
	}
	if strings.Contains(out, "journal taken over") {
		t.Errorf("recovery ran on a board whose table was refused:\n%s", out)
	}
}

// foreignSession matches a serial session with a board of other than one
// channel: not the one-channel board tableRefusalRun serves.
var foreignSession = regexp.MustCompile(`serial session up .* channels=([02-9]|[1-9][0-9])\b`)

// tableRefusalRun runs the supervisor once on a one-channel board whose
// config names channel 1, and returns its output and exit once it exits
// (or after 30 s, killed); foreign reports that a board other than the
// test's answered on its pty.
func tableRefusalRun(t *testing.T) (out string, exit error, foreign bool) {
	t.Helper()
	dir := t.TempDir()
	host, _, stop := simBoardOnCable(t, dir)
	defer stop()

	httpAddr := fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))
	cfg := filepath.Join(dir, "robot.yaml")
	text := fmt.Sprintf(monitoringConfig, filepath.Join(dir, "journal"), testtool.FreePort(t), httpAddr, host)
	// The board has one channel (--channels 45): channel 1 is not there.
	edited := strings.Replace(text, "mcu: {board: board, channel: 0}", "mcu: {board: board, channel: 1}", 1)
	if edited == text {
		t.Fatal("the test's config edit did not apply")
	}
	os.WriteFile(cfg, []byte(edited), 0o600)
	if out, code := run(t, "check-config", cfg); code != 0 {
		t.Fatalf("test config invalid:\n%s", out)
	}
	buf := &syncBuffer{}
	cmd := exec.Command(binary, "run", "--config", cfg)
	cmd.Stdout, cmd.Stderr = buf, buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case exit = <-done:
	case <-time.After(testtool.Slow(30 * time.Second)):
		cmd.Process.Kill()
		<-done
		out = buf.String()
		if foreignSession.MatchString(out) {
			return out, nil, true
		}
		t.Fatalf("the supervisor started on a board without the channel its config names:\n%s", out)
	}
	out = buf.String()
	return out, exit, foreignSession.MatchString(out) && !strings.Contains(out, "SERIAL_TABLE")
}

// boardRobotConfig writes, in dir, the monitoring test's robot (a serial
// board on port host, its journal in dir/journal) with the operator token
// in a file and a free HTTP address, checks it, and returns its path and
// that address.
func boardRobotConfig(t *testing.T, dir, host string) (cfg, httpAddr string) {
	t.Helper()
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte(operatorToken+"\n"), 0o600)
	httpAddr = fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))
	cfg = filepath.Join(dir, "robot.yaml")
	text := strings.Replace(fmt.Sprintf(monitoringConfig, filepath.Join(dir, "journal"), testtool.FreePort(t), httpAddr, host),
		`  reset_token_file: ""`, "  reset_token_file: "+token, 1)
	os.WriteFile(cfg, []byte(text), 0o600)
	if out, code := run(t, "check-config", cfg); code != 0 {
		t.Fatalf("test config invalid:\n%s", out)
	}
	return cfg, httpAddr
}
